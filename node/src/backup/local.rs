//! A single node's part: a checkpoint of its one engine (shard 0).

use std::sync::Arc;

use async_trait::async_trait;
use ebb_backup::transfer::{upload_part, PartSource};
use ebb_backup::{BackupError, Part, SetKind};
use ebb_query::db::Database;
use ebb_query::QueryError;

use super::{Job, PartTaker};

/// The one shard of a single node.
#[derive(Debug)]
pub struct LocalParts {
    db: Arc<Database>,
}

impl LocalParts {
    /// Parts of `db`.
    pub fn new(db: Arc<Database>) -> LocalParts {
        LocalParts { db }
    }
}

#[async_trait]
impl PartTaker for LocalParts {
    fn kind(&self) -> SetKind {
        SetKind::Node
    }

    async fn shards(&self) -> Result<Vec<u64>, QueryError> {
        Ok(vec![0])
    }

    async fn take(&self, shard: u64, job: &mut Job) -> Result<Part, BackupError> {
        take_checkpoint(&self.db, shard, job).await
    }
}

/// A part's write-ahead log is copied up to this size; above it, the engine flushes first.
const FLUSH_ABOVE: u64 = 16 << 20;

/// Checkpoints `db` (everything it acknowledged so far; what is not flushed travels as its
/// write-ahead log, or is flushed first above [`FLUSH_ABOVE`]) into the job's staging
/// directory, uploads it as shard `shard`'s part, and removes the checkpoint.
pub async fn take_checkpoint(
    db: &Arc<Database>,
    shard: u64,
    job: &mut Job,
) -> Result<Part, BackupError> {
    let dir = job.staging.join(format!("{}-{shard}", job.set_id));
    ebb_backup::transfer::private_dir(&job.staging)?;
    let engine = db.engine();
    let target = dir.clone();
    let started = std::time::Instant::now();
    // Without a flush unless the log of what is not flushed is large (see FLUSH_ABOVE).
    let seq = tokio::task::spawn_blocking(move || engine.checkpoint_live(&target, FLUSH_ABOVE))
        .await
        .map_err(|e| BackupError::Source(Box::new(e)))?
        .map_err(|e| BackupError::Source(Box::new(e)))?;
    let checkpointed = started.elapsed();
    let src = PartSource { shard, dir: &dir, seq, applied: None };
    let part = upload_part(
        &job.store,
        &job.lock,
        src,
        &mut job.stored,
        &mut job.cache,
        &job.progress,
        job.encrypting.as_mut(),
    )
    .await;
    tracing::debug!(
        shard,
        checkpoint_ms = checkpointed.as_millis() as u64,
        upload_ms = (started.elapsed() - checkpointed).as_millis() as u64,
        "part taken"
    );
    let _ = tokio::fs::remove_dir_all(&dir).await;
    part
}
