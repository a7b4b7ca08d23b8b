//! The rebalancer, run by the metadata leader: compares where shard replicas are with where
//! [`super::placement::target`] wants them and moves one shard at a time: it records the
//! target (the new nodes open the replica), changes the shard group's voters (new replicas are
//! caught up as learners first), then records the move as done.

use std::collections::BTreeSet;
use std::sync::Arc;

use ebb_storage::WriteBatch;

use super::meta::Meta;
use super::placement;
use super::service::set_shard_members;
use super::view::{self, ShardInfo};

/// One step of rebalancing. Returns true if it changed something (call again soon).
pub async fn step(meta: &Arc<Meta>) -> bool {
    if !meta.is_leader() {
        return false;
    }
    let v = meta.view();
    // A move in progress is finished first.
    if let Some(s) = v.shards.values().find(|s| s.target.is_some()) {
        let target = s.target.clone().unwrap_or_default();
        match set_shard_members(meta.conns(), &v, s.id, &target).await {
            Ok(()) => {
                let mut b = WriteBatch::new();
                view::put_shard(&mut b, &ShardInfo { replicas: target, target: None, ..s.clone() });
                if let Err(e) = meta.propose(b).await {
                    tracing::warn!(shard = s.id, %e, "recording a finished move");
                    return false;
                }
                tracing::info!(shard = s.id, "shard move finished");
                return true;
            }
            Err(e) => {
                tracing::warn!(shard = s.id, %e, "shard move not finished yet");
                return false;
            }
        }
    }
    let want = placement::target(&v);
    for (id, replicas) in want {
        let Some(s) = v.shards.get(&id) else { continue };
        let now: BTreeSet<u64> = s.replicas.iter().copied().collect();
        let next: BTreeSet<u64> = replicas.iter().copied().collect();
        if now == next {
            continue;
        }
        tracing::info!(shard = id, from = ?s.replicas, to = ?replicas, "moving shard");
        let mut b = WriteBatch::new();
        view::put_shard(&mut b, &ShardInfo { target: Some(replicas), ..s.clone() });
        if let Err(e) = meta.propose(b).await {
            tracing::warn!(shard = id, %e, "recording a move");
            return false;
        }
        return true;
    }
    false
}
