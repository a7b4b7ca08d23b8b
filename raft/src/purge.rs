//! Purging a group's Raft log (and replacing its snapshots) so that deleted values leave them
//! before the deletes' deadlines.
//!
//! The log is the group's write-ahead log: it holds every written value until it is purged,
//! which openraft does only some way behind its snapshots. A replica's engine tells when a
//! delete it has itself persisted is held back only by the log or a snapshot the replica built
//! ([`ebb_storage::Engine::awaiting_log`]; one a snapshot being received holds back waits for
//! that receive, which removes its files if it fails); [`LogPurger::tick`] then compacts the
//! log: it ends the newest segment, waits for the replica to apply everything in the log,
//! builds a snapshot (whose files the engine has already cleared), removes the older
//! snapshots, and purges the log up to the snapshot, which removes every segment before the
//! new one.

use std::time::{Duration, Instant};

use openraft::error::Fatal;
use parking_lot::Mutex;

use crate::error::ReplicaError;
use crate::transport::GroupHandle;
use crate::types::NodeId;

/// How long a step of a log compaction may take before the pass gives up (the next retries).
const STEP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a compaction waits for its snapshot before asking for one again.
const RETRIGGER: Duration = Duration::from_millis(500);
/// How long a compaction waits for openraft to purge the log before the pass ends.
const PURGE_WAIT: Duration = Duration::from_secs(2);
/// Received snapshots untouched this long are abandoned transfers.
const STALE_INCOMING: Duration = Duration::from_secs(600);

/// What one [`LogPurger::tick`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PurgeOutcome {
    /// Nothing was waiting for the log.
    Idle,
    /// Something waits, but the last compaction was too recent.
    Waiting,
    /// The log was compacted up to this index.
    Compacted(u64),
}

/// Why a [`LogPurger::tick`] failed (the next tick tries again).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PurgeError {
    /// The replica failed to tell or refresh what the log holds back.
    #[error(transparent)]
    Replica(#[from] ReplicaError),
    /// The replica's engine failed to tell what waits for the log.
    #[error(transparent)]
    Storage(#[from] ebb_storage::Error),
    /// Openraft refused to build a snapshot or purge the log (it has stopped).
    #[error(transparent)]
    Raft(Box<Fatal<NodeId>>),
    /// The replica did not apply the whole log within the step timeout.
    #[error("the replica did not apply its log in time")]
    ApplyTimeout,
    /// No snapshot covering the log was built within the step timeout.
    #[error("no snapshot was built in time")]
    SnapshotTimeout,
    /// A blocking step panicked or was cancelled.
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
}

impl From<Fatal<NodeId>> for PurgeError {
    fn from(e: Fatal<NodeId>) -> Self {
        PurgeError::Raft(Box::new(e))
    }
}

/// Decides when a group's log is compacted for deletes, and does it. One per group.
#[derive(Debug)]
pub struct LogPurger {
    interval: Duration,
    last: Mutex<Option<Instant>>,
}

impl LogPurger {
    /// A purger that compacts a log at most once per `interval`, more often only as a
    /// deadline comes close.
    pub fn new(interval: Duration) -> LogPurger {
        LogPurger { interval, last: Mutex::new(None) }
    }

    /// Refreshes the replica's log watermark and, if a persisted delete waits only for the
    /// log or a snapshot, compacts the log. `now_ms` is the wall clock in ms.
    pub async fn tick(&self, g: &GroupHandle, now_ms: u64) -> Result<PurgeOutcome, PurgeError> {
        let deadline = {
            let g = g.clone();
            blocking(move || {
                g.replica.refresh_log_clearance(g.log.first_stored())?;
                // A delete a snapshot being received (or a replaced engine still read) holds
                // data of waits for that copy to go, whatever a compaction does.
                let fixed = g.replica.fixed_copies_clearance();
                Ok(g.replica.engine().awaiting_log(&fixed)?)
            })
            .await?
        };
        tracing::debug!(?deadline, now_ms, "deletes awaiting the log");
        let Some(deadline) = deadline else { return Ok(PurgeOutcome::Idle) };
        // Once per interval; as the deadline nears, up to every quarter of the time left.
        let left = deadline.left(now_ms);
        let gap = self.interval.min((left / 4).max(Duration::from_secs(1)));
        if self.last.lock().is_some_and(|t| t.elapsed() < gap) {
            tracing::debug!(?gap, "log compaction waits");
            return Ok(PurgeOutcome::Waiting);
        }
        *self.last.lock() = Some(Instant::now());
        let upto = self.compact(g).await?;
        let g = g.clone();
        blocking(move || Ok(g.replica.refresh_log_clearance(g.log.first_stored())?)).await?;
        Ok(PurgeOutcome::Compacted(upto))
    }

    async fn compact(&self, g: &GroupHandle) -> Result<u64, PurgeError> {
        g.log.rotate();
        let Some(last) = g.log.last_index() else { return Ok(0) };
        wait(|| {
            let applied = g.replica.applied_state().ok()?.0?.index;
            (applied >= last).then_some(())
        })
        .await
        .ok_or(PurgeError::ApplyTimeout)?;
        let built = |min: u64| {
            let d = g.replica.current_snapshot()?.0;
            let index = d.meta.last_log_id?.index;
            (index >= min).then_some(index)
        };
        // Always a fresh snapshot: an existing one may cover the log but predate the engine's
        // cleanup of the deleted data. Openraft ignores a trigger while it builds a snapshot
        // (one its own policy started, say), and that one may end below `last`: the trigger is
        // repeated until a snapshot taken after it covers `last`.
        let before = g.replica.current_snapshot().map(|(d, _)| d.meta.snapshot_id);
        let start = Instant::now();
        let index = loop {
            g.raft.trigger().snapshot().await?;
            let found = wait_for(RETRIGGER, || {
                let now = g.replica.current_snapshot().map(|(d, _)| d.meta.snapshot_id);
                (now != before).then_some(())?;
                built(last)
            })
            .await;
            if let Some(index) = found {
                break index;
            }
            if start.elapsed() > STEP_TIMEOUT {
                return Err(PurgeError::SnapshotTimeout);
            }
        };
        g.replica.drop_older_snapshots(STALE_INCOMING);
        g.raft.trigger().purge_log(index).await?;
        // Openraft purges once no replication to a follower still reads the entries; the next
        // tick sees what it did.
        wait_for(PURGE_WAIT, || (g.log.first_stored() > last).then_some(())).await;
        Ok(index)
    }
}

/// Polls `f` until it returns `Some`, for up to [`STEP_TIMEOUT`].
async fn wait<T>(f: impl FnMut() -> Option<T>) -> Option<T> {
    wait_for(STEP_TIMEOUT, f).await
}

/// Polls `f` until it returns `Some`, for up to `limit`.
async fn wait_for<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if start.elapsed() > limit {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, PurgeError> + Send + 'static,
) -> Result<T, PurgeError> {
    tokio::task::spawn_blocking(f).await?
}
