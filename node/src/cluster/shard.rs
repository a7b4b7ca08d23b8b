//! A shard replica on a node: the shard's Raft group and the replicated [`Database`] over its
//! engine. Writes on the leader's database are proposed to the group; every replica's
//! database applies what the group commits (`super::replication` joins the two).

use std::path::Path;
use std::sync::Arc;

use ebb_query::Database;
use ebb_raft::transport::{Connections, GroupHandle, Groups};
use ebb_raft::{open_group, run_group, GroupOptions, NodeId};

use crate::error::{NodeError, Result};

use super::replication::{GroupReplicator, ReplicaApplier};

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
        let db = Database::replicated(replica.engine())
            .map_err(|source| NodeError::Open { dir: dir.to_path_buf(), source })?;
        replica.set_applier(Arc::new(ReplicaApplier::new(&db)));
        let group = run_group(node, id, log, replica, opts, conns, groups).await.map_err(start)?;
        let rt = tokio::runtime::Handle::current();
        db.replicate_through(Arc::new(GroupReplicator::new(group.raft.clone(), rt)));
        Ok(Shard { id, group, db })
    }

    /// True if this replica leads its group.
    pub fn is_leader(&self) -> bool {
        self.group.raft.metrics().borrow().state.is_leader()
    }
}
