//! Statements that change every shard (`DELETE`, `ERASE`, table DDL and retention changes) as
//! intents: the coordinator records the statement in the metadata group first, runs it on
//! every shard in parallel, retrying each through elections and restarts, and acknowledges it
//! only once every shard has answered. An intent left open (its coordinator gave up waiting, or
//! died) is driven to completion by the metadata leader ([`drive`] again), and
//! `system.deletions` shows it pending meanwhile. Each shard runs the statement as one request
//! id, answering a request it has completed from its record, so running it twice changes
//! nothing.

use std::time::{Duration, Instant};

use datafusion::arrow::record_batch::RecordBatch;
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};

use super::{ShardClient, ShardError, ShardRequest};
use crate::sql::shard::ShardOp;
use crate::StatementKind;

/// A statement to run on every shard, as the metadata group records it until it is done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent {
    /// The request id every shard runs it as.
    pub id: u64,
    /// Database of unqualified names.
    pub database: String,
    /// The statement as people read it (`system.deletions`).
    pub sql: String,
    /// What every shard applies (absent in intents recorded by older builds, which every shard
    /// runs as the SQL text `sql`).
    #[serde(default)]
    pub op: Option<ShardOp>,
    /// `delete`, `erase` or the command tag (`DROP TABLE`, `ALTER TABLE`...).
    pub kind: String,
    /// Its deadline (ms since the epoch), if the statement set one.
    pub deadline_ms: Option<u64>,
    /// Who issued it.
    pub issued_by: String,
    /// When it was recorded (ms since the epoch).
    pub issued_at_ms: u64,
}

impl Intent {
    /// An intent to apply `op` (in a session whose database is `database`) as `request`.
    pub fn new(database: &str, op: &ShardOp, request: &ShardRequest) -> Intent {
        let kind = match op.kind() {
            StatementKind::Delete => "delete".to_string(),
            StatementKind::Erase => "erase".to_string(),
            StatementKind::Command(tag) => tag,
            StatementKind::Query | StatementKind::Insert => "statement".to_string(),
        };
        Intent {
            id: request.id,
            database: database.to_string(),
            sql: op.text(),
            op: Some(op.clone()),
            kind,
            deadline_ms: request.deadline_ms,
            issued_by: request.issued_by.clone(),
            issued_at_ms: crate::now_ms(),
        }
    }

    /// The kind of statement, for its answer.
    pub fn statement_kind(&self) -> StatementKind {
        match self.kind.as_str() {
            "delete" => StatementKind::Delete,
            "erase" => StatementKind::Erase,
            tag => StatementKind::Command(tag.to_string()),
        }
    }

    /// The request each shard runs it as.
    pub fn request(&self) -> ShardRequest {
        ShardRequest {
            id: self.id,
            deadline_ms: self.deadline_ms,
            issued_by: self.issued_by.clone(),
        }
    }

    /// True for the statements that delete data (shown in `system.deletions` while open).
    pub fn deletes(&self) -> bool {
        matches!(self.kind.as_str(), "delete" | "erase" | "DROP TABLE")
    }
}

/// How one shard answered an intent.
#[derive(Debug)]
pub enum ShardOutcome {
    /// It ran (or had run) the statement: its answer.
    Done(Vec<RecordBatch>),
    /// The table or database is not on that shard: nothing to do there.
    Absent,
    /// The shard refused the statement (the same on every attempt).
    Refused(String),
}

/// Runs `intent` on every shard in parallel, retrying a shard that cannot answer until
/// `patience` has passed. Returns each shard's outcome, or the shards still unanswered.
pub async fn drive(
    client: &dyn ShardClient,
    intent: &Intent,
    patience: Duration,
) -> Result<Vec<(u64, ShardOutcome)>, Vec<(u64, String)>> {
    let until = Instant::now() + patience;
    let shards = client.statement_shard_ids();
    let runs = shards.iter().map(|&s| drive_shard(client, intent, s, until));
    let answers = futures::future::join_all(runs).await;
    let mut done = Vec::new();
    let mut open = Vec::new();
    for (&shard, answer) in shards.iter().zip(answers) {
        match answer {
            Ok(o) => done.push((shard, o)),
            Err(why) => open.push((shard, why)),
        }
    }
    if open.is_empty() {
        Ok(done)
    } else {
        Err(open)
    }
}

/// Runs `intent` on `shard` until it answers or `until` passes (then the last reason).
async fn drive_shard(
    client: &dyn ShardClient,
    intent: &Intent,
    shard: u64,
    until: Instant,
) -> Result<ShardOutcome, String> {
    let request = intent.request();
    let mut pause = Duration::from_millis(50);
    loop {
        let attempt = async {
            let Some(op) = &intent.op else {
                let sql = &intent.sql;
                let (_, stream) =
                    client.query(shard, &intent.database, sql, Some(&request), None).await?;
                return stream.try_collect::<Vec<_>>().await;
            };
            let done = client.apply(shard, op, &request).await?;
            let out = crate::sql::shard::op::answer(op, request.id, &done)
                .map_err(|e| ShardError::Invalid(e.to_string()))?;
            out.stream.try_collect::<Vec<_>>().await.map_err(|e| ShardError::Invalid(e.to_string()))
        };
        let why = match attempt.await {
            Ok(batches) => return Ok(ShardOutcome::Done(batches)),
            Err(ShardError::NotFound(_)) => return Ok(ShardOutcome::Absent),
            Err(ShardError::Invalid(m)) => return Ok(ShardOutcome::Refused(m)),
            Err(ShardError::Unavailable(m)) => m,
        };
        if Instant::now() + pause >= until {
            return Err(why);
        }
        tracing::debug!(shard, request = intent.id, %why, "retrying a statement on a shard");
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}
