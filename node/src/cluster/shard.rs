//! A shard replica on a node: the shard's Raft group and the replicated [`Database`] over its
//! engine. Writes on the leader's database are proposed to the group; every replica's
//! database follows what the group applies (catalog changes, snapshot installs).

use std::path::Path;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use ebb_query::{Database, QueryError, Replicator};
use ebb_raft::sm::MAX_BATCH_OPS;
use ebb_raft::transport::{Connections, GroupHandle, Groups};
use ebb_raft::{open_group, run_group, ApplyHook, Command, GroupOptions, NodeId, TypeConfig};
use ebb_storage::{Engine, WriteBatch};
use openraft::error::{ClientWriteError, RaftError};
use openraft::Raft;

use crate::error::{NodeError, Result};

/// How long a proposal may wait for commit before the write fails (it may still commit).
pub const PROPOSE_TIMEOUT: Duration = Duration::from_secs(30);

/// Proposes a database's changes through its shard's Raft group.
pub struct RaftReplicator {
    raft: OnceLock<Raft<TypeConfig>>,
    rt: tokio::runtime::Handle,
}

impl std::fmt::Debug for RaftReplicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftReplicator").field("started", &self.raft.get().is_some()).finish()
    }
}

impl RaftReplicator {
    fn new(rt: tokio::runtime::Handle) -> Arc<RaftReplicator> {
        Arc::new(RaftReplicator { raft: OnceLock::new(), rt })
    }

    fn write(&self, cmd: Command) -> std::result::Result<ebb_raft::Response, QueryError> {
        let raft = self
            .raft
            .get()
            .ok_or_else(|| QueryError::Replication("the shard is starting".into()))?
            .clone();
        let res = self.rt.block_on(tokio::time::timeout(PROPOSE_TIMEOUT, raft.client_write(cmd)));
        match res {
            Err(_) => Err(QueryError::Replication(format!(
                "not committed within {PROPOSE_TIMEOUT:?} (it may still commit)"
            ))),
            Ok(Ok(r)) => match r.data.error {
                None => Ok(r.data),
                Some(why) => Err(QueryError::invalid(why)),
            },
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))) => {
                Err(QueryError::NotLeader(f.leader_id))
            }
            Ok(Err(e)) => Err(QueryError::Replication(e.to_string())),
        }
    }
}

impl Replicator for RaftReplicator {
    fn propose(
        &self,
        batch: &WriteBatch,
        issued_at_ms: u64,
    ) -> std::result::Result<u64, QueryError> {
        if batch.len() > MAX_BATCH_OPS {
            return Err(QueryError::invalid(format!(
                "a request of {} operations exceeds the {MAX_BATCH_OPS} one shard write may hold; \
                 split it",
                batch.len()
            )));
        }
        let applied = self.write(Command::Batch(batch.to_bytes_issued(issued_at_ms)))?;
        match applied.duplicate {
            true => Err(QueryError::Completed),
            false => Ok(applied.seq),
        }
    }

    fn propose_retention(
        &self,
        prefix: Vec<u8>,
        retention: Option<Duration>,
    ) -> std::result::Result<(), QueryError> {
        let retention_ms = retention.map(|d| d.as_millis().min(u64::MAX as u128) as u64);
        self.write(Command::SetRetention { prefix, retention_ms }).map(|_| ())
    }
}

/// Keeps a replicated database in step with what its group applies. Weak: the database holds
/// the group (through its replicator), so a strong reference would keep both alive forever.
struct DatabaseHook(Weak<Database>);

impl ApplyHook for DatabaseHook {
    fn applied(&self, _engine: &Arc<Engine>, batch: &WriteBatch, _seq: u64) {
        if let Some(db) = self.0.upgrade() {
            db.on_applied(batch);
        }
    }

    fn admits(
        &self,
        engine: &Arc<Engine>,
        batch: &WriteBatch,
    ) -> std::result::Result<bool, ebb_storage::Error> {
        ebb_query::db::admits(engine, batch)
    }

    fn replaced(&self, engine: &Arc<Engine>) {
        if let Some(db) = self.0.upgrade() {
            if let Err(e) = db.on_replaced(engine) {
                tracing::error!(%e, "reloading the catalog after a snapshot install");
            }
        }
    }
}

/// One shard replica on this node.
#[derive(Clone)]
pub struct Shard {
    /// The shard (Raft group) id.
    pub id: u64,
    /// Its Raft group.
    pub group: GroupHandle,
    /// The replicated database over its engine.
    pub db: Arc<Database>,
}

impl std::fmt::Debug for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shard").field("id", &self.id).finish()
    }
}

impl Shard {
    /// Opens shard `id` of node `node` under `dir` and starts its group.
    pub async fn open(
        node: NodeId,
        id: u64,
        dir: &Path,
        opts: &GroupOptions,
        conns: Arc<Connections>,
        groups: &Groups,
    ) -> Result<Shard> {
        let start = |e: ebb_raft::StartError| NodeError::Cluster(format!("shard {id}: {e}"));
        let (log, replica) = open_group(dir, opts).await.map_err(start)?;
        let rep = RaftReplicator::new(tokio::runtime::Handle::current());
        let db = Arc::new(
            Database::replicated(replica.engine(), rep.clone())
                .map_err(|source| NodeError::Open { dir: dir.to_path_buf(), source })?,
        );
        replica.set_hook(Arc::new(DatabaseHook(Arc::downgrade(&db))));
        let group = run_group(node, id, log, replica, opts, conns, groups).await.map_err(start)?;
        let _ = rep.raft.set(group.raft.clone());
        Ok(Shard { id, group, db })
    }

    /// True if this replica leads its group.
    pub fn is_leader(&self) -> bool {
        self.group.raft.metrics().borrow().state.is_leader()
    }
}
