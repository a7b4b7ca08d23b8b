//! A [`Database`] whose changes are replicated: the leader's writer proposes every change
//! through a [`Replicator`] (in a cluster, the shard's Raft group, which `ebb-node` wires in),
//! and every replica (the leader included) applies what the group commits through
//! [`Database::apply_committed`], the path a single node applies its changes by. This crate
//! knows nothing of Raft: the replicator is a trait, and the node maps its answers.
//!
//! Proposals are pipelined: a write whose batch changes no catalog record is proposed under the
//! writer lock and waited for after it is released. Such writes are committed in groups
//! (`write_group`): concurrent writes become one proposal, with at most two groups in flight
//! per shard, so a busy shard makes few, large log entries. What must see earlier writes waits for them: a
//! change to the catalog is applied before the writer lock is released (later plans see it),
//! and a write that merges with stored rows of a series that a proposal in flight writes waits
//! until none is in flight ([`Replication::drain`]).

use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ebb_storage::{Engine, WriteBatch};
use parking_lot::{Condvar, Mutex, RwLock};

use super::apply::Change;
use super::{Database, Writer};
use crate::error::{QueryError, Result};
use crate::model::catalog::Catalog;

/// A change a replicated database proposes to its group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proposed {
    /// Write batch `batch` (encoded, with its issue time).
    Write {
        /// The encoded batch.
        batch: Vec<u8>,
        /// How many operations it holds.
        ops: usize,
    },
    /// Sets (or with `None` removes) the retention of keys starting with `prefix`.
    Retention {
        /// The key prefix the rule covers.
        prefix: Vec<u8>,
        /// How long rows are kept.
        retention: Option<Duration>,
    },
    /// Forks every replica's data into group `child`: this group keeps `parent` applied, the
    /// child `child_batch` (both encoded batches).
    Split {
        /// The child group.
        child: u64,
        /// What this group applies with the split.
        parent: Vec<u8>,
        /// What the child group applies with it.
        child_batch: Vec<u8>,
    },
}

/// What a committed proposal did on this replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// Applied; its first operation got engine sequence number `seq`, its entry log index
    /// `index`.
    At {
        /// The engine sequence number of the change's first operation.
        seq: u64,
        /// The index of the entry in the group's log.
        index: u64,
    },
    /// Applied as a no-op on every replica alike, for this reason (an invalid change).
    Refused(String),
    /// Applied as a no-op: it completes a request an earlier attempt completed.
    Duplicate,
}

/// Delivers the outcome of one proposal: called exactly once.
pub type Done = Box<dyn FnOnce(Result<Applied>) + Send>;

/// Proposes a replicated database's changes to its group and answers for their commits.
pub trait Replicator: Send + Sync + std::fmt::Debug {
    /// Submits `change` without waiting; `done` gets its outcome once this replica has applied
    /// it (or it failed: not the leader, a timeout, a stopped group).
    fn submit(&self, change: Proposed, done: Done);
    /// Waits until this replica has applied everything its group committed before the call (a
    /// read barrier); fails with [`QueryError::NotLeader`] if it does not lead the group.
    fn barrier(&self) -> Result<()>;
}

/// How a replica's admission check let a committed batch through ([`super::admit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// All of it.
    All,
    /// Some of it: other parts had been applied already.
    Part,
    /// None of it: the entry is applied as a no-op and answered as a duplicate.
    Nothing,
}

/// A replicated database's side of its group: the replicator once the group runs, and the
/// proposals in flight.
#[derive(Debug, Default)]
pub(super) struct Replication {
    via: OnceLock<Arc<dyn Replicator>>,
    in_flight: Arc<InFlight>,
}

/// Proposals submitted and not yet answered.
#[derive(Debug, Default)]
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
pub(crate) struct Proposal(Receiver<Result<Applied>>);

impl Proposal {
    /// What the change did once applied here: its engine sequence number and log index.
    fn applied(self) -> Result<(u64, u64)> {
        let applied = self.0.recv().map_err(|_| {
            QueryError::Replication("the shard stopped during the proposal".into())
        })??;
        match applied {
            Applied::At { seq, index } => Ok((seq, index)),
            Applied::Refused(why) => Err(QueryError::invalid(why)),
            Applied::Duplicate => Err(QueryError::Completed),
        }
    }

    /// The engine sequence number of the change's first operation once applied here.
    pub(crate) fn wait(self) -> Result<u64> {
        self.applied().map(|(seq, _)| seq)
    }
}

impl Replication {
    fn via(&self) -> Result<&Arc<dyn Replicator>> {
        self.via.get().ok_or_else(|| QueryError::Replication("the shard is starting".into()))
    }

    /// Submits `change` to the group without waiting for it.
    fn submit(&self, change: Proposed) -> Result<Proposal> {
        let via = self.via()?;
        let (tx, rx) = sync_channel(1);
        *self.in_flight.n.lock() += 1;
        let tracked = Tracked(self.in_flight.clone());
        via.submit(
            change,
            Box::new(move |res| {
                drop(tracked);
                let _ = tx.send(res);
            }),
        );
        Ok(Proposal(rx))
    }

    /// Proposes write batch `batch`, issued at `issued_at_ms` unless it carries its own issue
    /// time.
    pub(super) fn propose(&self, batch: &WriteBatch, issued_at_ms: u64) -> Result<Proposal> {
        let ops = batch.len();
        self.submit(Proposed::Write { batch: batch.to_bytes_issued(issued_at_ms), ops })
    }

    /// Proposes a split (see [`Proposed::Split`]) and waits until it is applied here; returns
    /// its log index.
    pub(super) fn split(
        &self,
        child: u64,
        parent: &WriteBatch,
        child_batch: &WriteBatch,
    ) -> Result<u64> {
        let change = Proposed::Split {
            child,
            parent: parent.to_bytes(),
            child_batch: child_batch.to_bytes(),
        };
        self.submit(change)?.applied().map(|(_, index)| index)
    }

    /// A read barrier (see [`Replicator::barrier`]).
    pub(super) fn barrier(&self) -> Result<()> {
        self.via()?.barrier()
    }

    /// Proposes a retention change for keys starting with `prefix` and waits until it is
    /// applied here.
    fn propose_retention(&self, prefix: Vec<u8>, retention: Option<Duration>) -> Result<()> {
        self.submit(Proposed::Retention { prefix, retention })?.wait().map(|_| ())
    }

    /// Waits until no proposal of this replica is in flight (the replicator answers each
    /// within its timeout). Called under the writer lock, so none starts meanwhile.
    pub(super) fn drain(&self) {
        let mut n = self.in_flight.n.lock();
        while *n > 0 {
            self.in_flight.idle.wait(&mut n);
        }
    }
}

impl Database {
    /// A snapshot holding every write the database has accepted, to count what a delete or
    /// an erasure issued next removes. Taken under the writer lock: on a shard replica, the
    /// proposals in flight are applied first, since the delete's entry follows theirs in the
    /// log and removes their rows too.
    pub(super) fn counting_snapshot(&self) -> ebb_storage::Snapshot {
        if let Some(rep) = &self.replication {
            rep.drain();
        }
        self.engine().staged_snapshot()
    }

    /// The database of a shard replica over `engine`, which applies what the replica's group
    /// commits (through [`Database::apply_committed`]) from now on. Its changes go through the
    /// group once [`Database::replicate_through`] names the group's replicator.
    pub fn replicated(engine: Arc<Engine>) -> Result<Arc<Database>> {
        let catalog = Catalog::load(&engine)?;
        let next_seq = engine.last_seq() + 1;
        Ok(Arc::new(Database {
            engine: RwLock::new(engine),
            catalog,
            writer: Mutex::new(Writer { next_seq, written_forgotten_ms: 0, groups_in_flight: 0 }),
            queue: Default::default(),
            removals: Default::default(),
            statements: Default::default(),
            replication: Some(Replication::default()),
            default_retention: RwLock::new(None),
            write_limits: RwLock::new(super::write::WriteLimits::default()),
            access: RwLock::new(Default::default()),
            reserve: RwLock::new(None),
            rows_written: Default::default(),
        }))
    }

    /// Sends this database's changes through `replicator`, its shard's group, from now on.
    pub fn replicate_through(&self, replicator: Arc<dyn Replicator>) {
        if let Some(rep) = &self.replication {
            let _ = rep.via.set(replicator);
        }
    }

    /// True if changes go through a group.
    pub fn is_replicated(&self) -> bool {
        self.replication.is_some()
    }

    /// Applies `batch`, which the group committed, at engine sequence number `seq` on `engine`
    /// (this replica's), with what it changes in the catalog, and waits until it is durable.
    /// An error every replica meets alike leaves the catalog as it was.
    pub fn apply_committed(
        &self,
        engine: &Arc<Engine>,
        batch: &WriteBatch,
        seq: u64,
    ) -> std::result::Result<(), ebb_storage::Error> {
        let change = Change::read_from(batch, self.catalog());
        match self.apply(engine, change, seq)? {
            Some(staged) => staged.durable(),
            None => Ok(()),
        }
    }

    /// Sets a retention rule: on the engine, or through the group.
    pub(super) fn set_rule(&self, prefix: Vec<u8>, retention: Option<Duration>) -> Result<()> {
        match &self.replication {
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
