//! The shard replicas a node holds, kept in step with the metadata: a node opens the replicas
//! the metadata places on it (or is moving to it) and closes and deletes the ones moved away.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ebb_raft::transport::{Connections, Groups};
use ebb_raft::GroupOptions;
use openraft::BasicNode;
use parking_lot::RwLock;

use super::shard::Shard;
use super::view::MetaView;
use crate::error::{NodeError, Result};

/// The shard replicas on one node.
#[derive(Debug, Default)]
pub struct Shards {
    map: RwLock<BTreeMap<u64, Shard>>,
}

impl Shards {
    /// Shard `id`, if this node holds it.
    pub fn get(&self, id: u64) -> Option<Shard> {
        self.map.read().get(&id).cloned()
    }

    /// Ids of the shards this node holds.
    pub fn ids(&self) -> Vec<u64> {
        self.map.read().keys().copied().collect()
    }

    /// Every shard this node holds.
    pub fn all(&self) -> Vec<Shard> {
        self.map.read().values().cloned().collect()
    }
}

/// What a node needs to open shard replicas.
#[derive(Debug, Clone)]
pub struct ShardEnv {
    /// This node.
    pub node: u64,
    /// Where shard replicas live (`shard-{id}/` each).
    pub dir: PathBuf,
    /// Group options.
    pub opts: GroupOptions,
    /// Connections to other nodes.
    pub conns: Arc<Connections>,
    /// The node's Raft groups.
    pub groups: Arc<Groups>,
    /// Retention of tables created without one.
    pub default_retention: Option<std::time::Duration>,
    /// What one write request may add.
    pub write_limits: ebb_query::WriteLimits,
    /// The free space reserve of the data directory (writes are refused below it).
    pub reserve: Arc<ebb_storage::disk::Reserve>,
}

fn shard_dir(dir: &Path, id: u64) -> PathBuf {
    dir.join(ebb_raft::sm::group_dir_name(id))
}

/// Opens the replicas `view` places on this node and closes those it no longer does. A shard
/// placed on this node alone and never started is created here.
pub async fn sync(env: &ShardEnv, view: &MetaView, shards: &Shards) -> Result<()> {
    for s in view.shards.values() {
        if !s.involves(env.node) || shards.get(s.id).is_some() {
            continue;
        }
        let dir = shard_dir(&env.dir, s.id);
        // A shard being split off starts from the fork its parent's replica here makes (and
        // is not opened while that fork is being made).
        let forking = dir.with_extension("forking").exists();
        if (s.splitting() || forking) && !dir.exists() {
            continue;
        }
        let shard =
            Shard::open(env.node, s.id, &dir, &env.opts, env.conns.clone(), &env.groups).await?;
        shard.db.set_default_retention(env.default_retention);
        shard.db.set_write_limits(env.write_limits);
        shard.db.set_disk_reserve(env.reserve.clone());
        let fresh = !shard
            .group
            .raft
            .is_initialized()
            .await
            .map_err(|e| NodeError::Cluster(format!("shard {}: {e}", s.id)))?;
        if fresh && s.replicas == [env.node] && s.target.is_none() && s.span.is_none() {
            let addr = view.nodes.get(&env.node).map(|n| n.grpc_addr.clone()).unwrap_or_default();
            let members = BTreeMap::from([(env.node, BasicNode::new(addr))]);
            if let Err(e) = shard.group.raft.initialize(members).await {
                tracing::warn!(shard = s.id, %e, "initializing a shard");
            }
        }
        tracing::info!(shard = s.id, node = env.node, "opened shard replica");
        shards.map.write().insert(s.id, shard);
    }
    for id in shards.ids() {
        if view.shards.get(&id).is_some_and(|s| s.involves(env.node)) {
            continue;
        }
        // The metadata records a move as done only once the group's membership change has
        // committed, so the group no longer needs this replica. (A removed replica never hears
        // of its own removal, so its local membership cannot be waited for.)
        let Some(shard) = shards.get(id) else { continue };
        shards.map.write().remove(&id);
        env.groups.remove(id);
        let _ = shard.group.raft.shutdown().await;
        drop(shard);
        let dir = shard_dir(&env.dir, id);
        tracing::info!(shard = id, node = env.node, "removed shard replica moved away");
        if let Err(e) = tokio::fs::remove_dir_all(&dir).await {
            tracing::warn!(dir = %dir.display(), %e, "removing a moved shard's files");
        }
    }
    Ok(())
}
