//! A [`Database`] whose changes are replicated through its shard's Raft group: the leader's
//! writer proposes every change, and every replica (the leader included) applies what the group
//! commits through [`Database::apply`], the path a single node applies its changes by.
//!
//! Proposals are pipelined: a write whose batch changes no catalog record is proposed under the
//! writer lock and waited for after it is released. Such writes are committed in groups
//! (`write_group`): concurrent writes become one proposal, with at most two groups in flight
//! per shard, so a busy shard makes few, large log entries. What must see earlier writes waits for them: a
//! change to the catalog is applied before the writer lock is released (later plans see it),
//! and a write that merges with stored rows of a series that a proposal in flight writes waits
//! until none is in flight ([`RaftReplicator::drain`]).

use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use ebb_raft::sm::{Admitted, Applier, MAX_BATCH_OPS};
use ebb_raft::{Command, Replica, Response, TypeConfig};
use ebb_storage::{Engine, WriteBatch};
use openraft::error::{CheckIsLeaderError, ClientWriteError, RaftError};
use openraft::Raft;
use parking_lot::{Condvar, Mutex, RwLock};

use super::apply::Change;
use super::{Database, Writer};
use crate::error::{QueryError, Result};
use crate::model::catalog::Catalog;

/// How long a proposal may wait for commit before the write fails (it may still commit).
pub const PROPOSE_TIMEOUT: Duration = Duration::from_secs(30);

/// Proposes a database's changes through its shard's Raft group.
pub struct RaftReplicator {
    raft: OnceLock<Raft<TypeConfig>>,
    rt: tokio::runtime::Handle,
    in_flight: Arc<InFlight>,
}

impl std::fmt::Debug for RaftReplicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftReplicator").field("started", &self.raft.get().is_some()).finish()
    }
}

/// Proposals submitted and not yet answered.
#[derive(Default)]
struct InFlight {
    n: Mutex<usize>,
    idle: Condvar,
}

/// Counts one proposal in flight until dropped.
struct Tracked(Arc<InFlight>);

impl Drop for Tracked {
    fn drop(&mut self) {
        let mut n = self.0.n.lock();
        *n -= 1;
        if *n == 0 {
            self.0.idle.notify_all();
        }
    }
}

/// A proposal in flight. [`Proposal::wait`] blocks until it is applied on this replica (or
/// failed): call it after releasing the writer lock.
#[must_use = "a proposal's outcome must be waited for"]
pub(crate) struct Proposal(Receiver<Result<Response>>);

impl Proposal {
    /// The engine sequence number of the change's first operation once applied here.
    pub(crate) fn wait(self) -> Result<u64> {
        let applied = self.0.recv().map_err(|_| {
            QueryError::Replication("the shard stopped during the proposal".into())
        })??;
        match (applied.error, applied.duplicate) {
            (Some(why), _) => Err(QueryError::invalid(why)),
            (None, true) => Err(QueryError::Completed),
            (None, false) => Ok(applied.seq),
        }
    }
}

impl RaftReplicator {
    /// Submits `cmd` to the group without waiting for it.
    pub(crate) fn submit(&self, cmd: Command) -> Result<Proposal> {
        let raft = self
            .raft
            .get()
            .ok_or_else(|| QueryError::Replication("the shard is starting".into()))?
            .clone();
        let (tx, rx) = sync_channel(1);
        *self.in_flight.n.lock() += 1;
        let tracked = Tracked(self.in_flight.clone());
        self.rt.spawn(async move {
            let res = tokio::time::timeout(PROPOSE_TIMEOUT, raft.client_write(cmd)).await;
            drop(tracked);
            let _ = tx.send(match res {
                Err(_) => Err(QueryError::Replication(format!(
                    "not committed within {PROPOSE_TIMEOUT:?} (it may still commit)"
                ))),
                Ok(Ok(r)) => Ok(r.data),
                Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))) => {
                    Err(QueryError::NotLeader(f.leader_id))
                }
                Ok(Err(e)) => Err(QueryError::Replication(e.to_string())),
            });
        });
        Ok(Proposal(rx))
    }

    /// Proposes write batch `batch`, issued at `issued_at_ms` unless it carries its own issue
    /// time.
    pub(crate) fn propose(&self, batch: &WriteBatch, issued_at_ms: u64) -> Result<Proposal> {
        if batch.len() > MAX_BATCH_OPS {
            return Err(QueryError::invalid(format!(
                "a request of {} operations exceeds the {MAX_BATCH_OPS} one shard write may hold; \
                 split it",
                batch.len()
            )));
        }
        self.submit(Command::write_batch(batch.to_bytes_issued(issued_at_ms)))
    }

    /// Waits until this replica has applied everything its group committed before the call (a
    /// read barrier); fails with [`QueryError::NotLeader`] if it does not lead the group.
    pub(crate) fn barrier(&self) -> Result<()> {
        let raft = self
            .raft
            .get()
            .ok_or_else(|| QueryError::Replication("the shard is starting".into()))?
            .clone();
        let (tx, rx) = sync_channel(1);
        self.rt.spawn(async move {
            let res = tokio::time::timeout(PROPOSE_TIMEOUT, raft.ensure_linearizable()).await;
            let _ = tx.send(match res {
                Err(_) => Err(QueryError::Replication("read barrier timed out".into())),
                Ok(Ok(_)) => Ok(()),
                Ok(Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f)))) => {
                    Err(QueryError::NotLeader(f.leader_id))
                }
                Ok(Err(e)) => Err(QueryError::Replication(e.to_string())),
            });
        });
        rx.recv().map_err(|_| {
            QueryError::Replication("the shard stopped during a read barrier".into())
        })?
    }

    /// Proposes a retention change for keys starting with `prefix` and waits until it is
    /// applied here.
    fn propose_retention(&self, prefix: Vec<u8>, retention: Option<Duration>) -> Result<()> {
        let retention_ms = retention.map(|d| d.as_millis().min(u64::MAX as u128) as u64);
        self.submit(Command::SetRetention { prefix, retention_ms })?.wait().map(|_| ())
    }

    /// Waits until no proposal of this replica is in flight (each ends within
    /// [`PROPOSE_TIMEOUT`]). Called under the writer lock, so none starts meanwhile.
    pub(crate) fn drain(&self) {
        let mut n = self.in_flight.n.lock();
        while *n > 0 {
            self.in_flight.idle.wait(&mut n);
        }
    }
}

/// Applies what a shard's group commits to the replica's database. Weak: the database holds
/// the group (through its replicator), so a strong reference would keep both alive forever.
struct ReplicaApplier(Weak<Database>);

impl Applier for ReplicaApplier {
    fn apply(
        &self,
        engine: &Arc<Engine>,
        batch: &WriteBatch,
        seq: u64,
    ) -> std::result::Result<(), ebb_storage::Error> {
        match self.0.upgrade() {
            Some(db) => {
                let change = Change::read_from(batch, db.catalog());
                match db.apply(engine, change, seq)? {
                    Some(staged) => staged.durable(),
                    None => Ok(()),
                }
            }
            None => engine.write(batch, seq),
        }
    }

    fn admit(
        &self,
        engine: &Arc<Engine>,
        batch: &mut WriteBatch,
    ) -> std::result::Result<Admitted, ebb_storage::Error> {
        super::admit(engine, batch)
    }

    fn replaced(&self, engine: &Arc<Engine>) {
        if let Some(db) = self.0.upgrade() {
            if let Err(e) = db.on_replaced(engine) {
                tracing::error!(%e, "reloading the catalog after a snapshot install");
            }
        }
    }
}

impl Database {
    /// The database of shard replica `replica`, which applies what the replica's group commits
    /// from now on. Its changes go through the group once [`Database::replicate_through`] names
    /// it; proposals run on `rt`.
    pub fn replicated(replica: &Arc<Replica>, rt: tokio::runtime::Handle) -> Result<Arc<Database>> {
        let engine = replica.engine();
        let catalog = Catalog::load(&engine)?;
        let next_seq = engine.last_seq() + 1;
        let replicator =
            Arc::new(RaftReplicator { raft: OnceLock::new(), rt, in_flight: Default::default() });
        let db = Arc::new(Database {
            engine: RwLock::new(engine),
            catalog,
            writer: Mutex::new(Writer { next_seq, written_forgotten_ms: 0, groups_in_flight: 0 }),
            queue: Default::default(),
            removals: Default::default(),
            statements: Default::default(),
            replicator: Some(replicator),
            default_retention: RwLock::new(None),
            write_limits: RwLock::new(super::write::WriteLimits::default()),
            access: RwLock::new(Default::default()),
            reserve: RwLock::new(None),
            rows_written: Default::default(),
        });
        replica.set_applier(Arc::new(ReplicaApplier(Arc::downgrade(&db))));
        Ok(db)
    }

    /// Sends this database's changes through `raft`, its shard's group, from now on.
    pub fn replicate_through(&self, raft: Raft<TypeConfig>) {
        if let Some(rep) = &self.replicator {
            let _ = rep.raft.set(raft);
        }
    }

    /// True if changes go through a Raft group.
    pub fn is_replicated(&self) -> bool {
        self.replicator.is_some()
    }

    /// Sets a retention rule: on the engine, or through the group.
    pub(super) fn set_rule(&self, prefix: Vec<u8>, retention: Option<Duration>) -> Result<()> {
        match &self.replicator {
            Some(rep) => rep.propose_retention(prefix, retention),
            None => Ok(self.engine().set_retention(prefix, retention)?),
        }
    }

    /// Switches to `engine` (a snapshot replaced the replica's) and reloads the catalog from it.
    pub fn on_replaced(&self, engine: &Arc<Engine>) -> Result<()> {
        let _w = self.writer.lock();
        self.removals.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        *self.engine.write() = engine.clone();
        self.catalog.reload(engine)
    }
}
