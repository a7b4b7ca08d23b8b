//! Where the SQL layer meets Raft: a shard's [`Database`] proposes its changes through
//! [`GroupReplicator`] (its `ebb_query::db::Replicator`), and its group applies what it commits
//! through [`ReplicaApplier`] (the group's `ebb_raft::sm::Applier`). Neither crate knows the
//! other; this module maps between them.

use std::sync::{Arc, Weak};
use std::time::Duration;

use ebb_query::db::{Admission, Applied, Done, Proposed, Replicator};
use ebb_query::{Database, QueryError};
use ebb_raft::sm::{Admitted, Applier, MAX_BATCH_OPS};
use ebb_raft::{Command, TypeConfig};
use ebb_storage::{Engine, WriteBatch};
use openraft::error::{CheckIsLeaderError, ClientWriteError, RaftError};
use openraft::Raft;

/// How long a proposal may wait for commit before the write fails (it may still commit).
pub const PROPOSE_TIMEOUT: Duration = Duration::from_secs(30);

/// Proposes a shard database's changes through the shard's Raft group.
pub struct GroupReplicator {
    raft: Raft<TypeConfig>,
    rt: tokio::runtime::Handle,
}

impl std::fmt::Debug for GroupReplicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupReplicator").finish_non_exhaustive()
    }
}

impl GroupReplicator {
    /// Proposes through `raft`; proposals run on `rt`.
    pub fn new(raft: Raft<TypeConfig>, rt: tokio::runtime::Handle) -> GroupReplicator {
        GroupReplicator { raft, rt }
    }
}

/// The log command of `change`, or why it may not be proposed.
fn command(change: Proposed) -> Result<Command, QueryError> {
    Ok(match change {
        Proposed::Write { batch, ops } => {
            if ops > MAX_BATCH_OPS {
                return Err(QueryError::invalid(format!(
                    "a request of {ops} operations exceeds the {MAX_BATCH_OPS} one shard write \
                     may hold; split it"
                )));
            }
            Command::write_batch(batch)
        }
        Proposed::Retention { prefix, retention } => Command::SetRetention {
            prefix,
            retention_ms: retention.map(|d| d.as_millis().min(u64::MAX as u128) as u64),
        },
        Proposed::Split { child, parent, child_batch } => {
            Command::Split { child, batch: parent, child_batch }
        }
    })
}

impl Replicator for GroupReplicator {
    fn submit(&self, change: Proposed, done: Done) {
        let cmd = match command(change) {
            Ok(cmd) => cmd,
            Err(e) => return done(Err(e)),
        };
        let raft = self.raft.clone();
        self.rt.spawn(async move {
            let res = tokio::time::timeout(PROPOSE_TIMEOUT, raft.client_write(cmd)).await;
            done(match res {
                Err(_) => Err(QueryError::Replication(format!(
                    "not committed within {PROPOSE_TIMEOUT:?} (it may still commit)"
                ))),
                Ok(Ok(r)) => Ok(match (r.data.error, r.data.duplicate) {
                    (Some(why), _) => Applied::Refused(why),
                    (None, true) => Applied::Duplicate,
                    (None, false) => Applied::At { seq: r.data.seq, index: r.log_id.index },
                }),
                Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))) => {
                    Err(QueryError::NotLeader(f.leader_id))
                }
                Ok(Err(e)) => Err(QueryError::Replication(e.to_string())),
            });
        });
    }

    fn barrier(&self) -> Result<(), QueryError> {
        let raft = self.raft.clone();
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
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
}

/// Applies what a shard's group commits to the replica's database. Weak: the database holds
/// the group (through its replicator), so a strong reference would keep both alive forever.
pub struct ReplicaApplier(Weak<Database>);

impl ReplicaApplier {
    /// Applies to `db` while it lives (to the bare engine after).
    pub fn new(db: &Arc<Database>) -> ReplicaApplier {
        ReplicaApplier(Arc::downgrade(db))
    }
}

impl Applier for ReplicaApplier {
    fn apply(
        &self,
        engine: &Arc<Engine>,
        batch: &WriteBatch,
        seq: u64,
    ) -> Result<(), ebb_storage::Error> {
        match self.0.upgrade() {
            Some(db) => db.apply_committed(engine, batch, seq),
            None => engine.write(batch, seq),
        }
    }

    fn admit(
        &self,
        engine: &Arc<Engine>,
        batch: &mut WriteBatch,
    ) -> Result<Admitted, ebb_storage::Error> {
        Ok(match ebb_query::db::admit(engine, batch)? {
            Admission::All => Admitted::All,
            Admission::Part => Admitted::Part,
            Admission::Nothing => Admitted::Nothing,
        })
    }

    fn replaced(&self, engine: &Arc<Engine>) {
        if let Some(db) = self.0.upgrade() {
            if let Err(e) = db.on_replaced(engine) {
                tracing::error!(%e, "reloading the catalog after a snapshot install");
            }
        }
    }
}
