//! Statements that change every shard (`DELETE`, `ERASE`, table DDL and retention changes),
//! single node and cluster alike ([`run_everywhere`]): the session records the change as an
//! intent first (a cluster keeps it in its metadata group; a single node applies it at once),
//! applies it on every shard in parallel, retrying each through elections and restarts, and
//! answers only once every shard has. An intent left open (its coordinator gave up waiting, or
//! died) is driven to completion by the cluster's metadata leader ([`drive`] again), and
//! `system.deletions` shows it pending meanwhile. Each shard applies the change as one request
//! id, answering a request it has completed from its record, so applying it twice changes
//! nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{ArrayRef, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};

use super::{ShardError, ShardId, ShardOp, ShardRequest, Shards};
use crate::error::{QueryError, Result};
use crate::{QueryOutput, StatementKind};

/// A statement to run on every shard, as the metadata group records it until it is done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent {
    /// The request id every shard runs it as.
    pub id: u64,
    /// Database of unqualified names.
    pub database: String,
    /// The statement as people read it (`system.deletions`).
    pub sql: String,
    /// What every shard applies (absent in intents recorded by older builds: the metadata
    /// leader reads `sql` again to drive one of those).
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

    /// True if the change removes data (what every backup set must be reached by): the typed
    /// op decides; an intent of an older build, without one, by its kind.
    pub fn deletes_data(&self) -> bool {
        self.op.as_ref().map_or_else(|| self.deletes(), ShardOp::deletes)
    }
}

/// How one shard answered an intent.
#[derive(Debug)]
pub enum ShardOutcome {
    /// It ran (or had run) the statement: its answer.
    Done(Vec<RecordBatch>),
    /// The table or database is not on that shard (why): nothing to do there.
    Absent(QueryError),
    /// The shard refused the statement (the same on every attempt).
    Refused(QueryError),
}

/// Runs `intent` on every shard in parallel, retrying a shard that cannot answer until
/// `patience` has passed. Returns each shard's outcome, or the shards still unanswered (with
/// why each last could not answer).
pub async fn drive(
    shards: &dyn Shards,
    intent: &Intent,
    op: &ShardOp,
    patience: Duration,
) -> std::result::Result<Vec<(ShardId, ShardOutcome)>, Vec<(ShardId, ShardError)>> {
    let until = Instant::now() + patience;
    let ids = shards.statement_shards();
    let runs = ids.iter().map(|&s| drive_shard(shards, intent, op, s, until));
    let answers = futures::future::join_all(runs).await;
    let mut done = Vec::new();
    let mut open = Vec::new();
    for (&shard, answer) in ids.iter().zip(answers) {
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

/// Runs `intent` on `shard` until it answers or `until` passes (then the last reason, a
/// [`ShardError::Unavailable`]).
async fn drive_shard(
    client: &dyn Shards,
    intent: &Intent,
    op: &ShardOp,
    shard: ShardId,
    until: Instant,
) -> std::result::Result<ShardOutcome, ShardError> {
    let request = intent.request();
    let mut pause = Duration::from_millis(50);
    loop {
        let attempt = async {
            let done = client.apply(shard, op, &request).await?;
            let out = crate::sql::shard::op::answer(op, request.id, &done)
                .map_err(ShardError::Invalid)?;
            out.stream.try_collect::<Vec<_>>().await.map_err(|e| ShardError::Invalid(e.into()))
        };
        let why = match attempt.await {
            Ok(batches) => return Ok(ShardOutcome::Done(batches)),
            Err(ShardError::NotFound(m)) => return Ok(ShardOutcome::Absent(m)),
            Err(ShardError::Invalid(m)) => return Ok(ShardOutcome::Refused(m)),
            Err(why @ ShardError::Unavailable(_)) => why,
        };
        if Instant::now() + pause >= until {
            return Err(why);
        }
        tracing::debug!(shard, request = intent.id, %why, "retrying a statement on a shard");
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}

/// Applies `op` on every shard as `request` (see the module docs): each shard's answer with a
/// leading `shard` column (a `DELETE`'s row count and ledger id are per shard).
pub async fn run_everywhere(
    shards: &dyn Shards,
    database: &str,
    op: &ShardOp,
    request: &ShardRequest,
) -> Result<QueryOutput> {
    let kind = op.kind();
    let intent = Intent::new(database, op, request);
    // Backup sets are copies every delete must reach: journaled before any shard applies it.
    let backups = shards.backups().filter(|_| op.deletes());
    // Held until the request is answered (see `Backups::journal`).
    let _journaled = match &backups {
        Some(b) => b.journal(&intent).await?,
        None => Default::default(),
    };
    if let Err(e) = shards.open_intent(&intent).await {
        // The record may have been made although its answer was lost: then the metadata
        // leader runs the statement.
        return Err(QueryError::Unavailable(format!(
            "request {} could not be confirmed as recorded ({e}); it may still run on every \
             shard (see system.deletions)",
            intent.id
        )));
    }
    let answers = match drive(shards, &intent, op, shards.intent_patience()).await {
        Ok(a) => a,
        Err(open) => {
            let open: Vec<String> =
                open.iter().map(|(s, why)| format!("shard {s}: {}", why.reason())).collect();
            return Err(QueryError::Unavailable(format!(
                "request {} is recorded and runs on every shard until done (see \
                 system.deletions); not answered yet: {}",
                intent.id,
                open.join("; ")
            )));
        }
    };
    if let Err(e) = shards.close_intent(intent.id).await {
        // The metadata leader closes it when it next drives open intents.
        tracing::warn!(request = intent.id, %e, "closing a completed intent");
    }
    if let Some(b) = &backups {
        b.journal_done(intent.id).await;
    }
    let mut out = Vec::new();
    let mut refused = None;
    let mut absent = None;
    let mut reached = false;
    for (shard, answer) in answers {
        match answer {
            ShardOutcome::Done(batches) => {
                reached = true;
                for b in batches {
                    out.push(with_shard(shard, &b)?);
                }
            }
            // The table never reached it.
            ShardOutcome::Absent(why) => absent = absent.or(Some(why)),
            ShardOutcome::Refused(why) => refused = refused.or(Some(why)),
        }
    }
    if let Some(why) = refused {
        return Err(why);
    }
    if !reached {
        let why = absent.map_or_else(|| "no shard answered".into(), |e| e.to_string());
        return Err(QueryError::invalid(format!("{why} (on no shard): {}", intent.sql)));
    }
    let schema = match out.first() {
        Some(b) => b.schema(),
        None => Arc::new(Schema::empty()),
    };
    let stream = futures::stream::iter(out.into_iter().map(Ok));
    Ok(QueryOutput {
        schema: schema.clone(),
        stream: Box::pin(RecordBatchStreamAdapter::new(schema, stream)),
        kind,
    })
}

/// `b` with a leading `shard` column.
fn with_shard(shard: ShardId, b: &RecordBatch) -> Result<RecordBatch> {
    let mut fields = vec![Arc::new(Field::new("shard", DataType::UInt64, false))];
    fields.extend(b.schema().fields().iter().cloned());
    let mut cols: Vec<ArrayRef> = vec![Arc::new(UInt64Array::from(vec![shard; b.num_rows()]))];
    cols.extend(b.columns().iter().cloned());
    let opts = RecordBatchOptions::new().with_row_count(Some(b.num_rows()));
    RecordBatch::try_new_with_options(Arc::new(Schema::new(fields)), cols, &opts)
        .map_err(|e| QueryError::Internal(e.to_string()))
}
