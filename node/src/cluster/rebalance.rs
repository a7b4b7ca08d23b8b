//! The rebalancer, run by the metadata leader: compares where shard replicas are with where
//! [`super::placement::target`] wants them and moves one shard at a time: it records the
//! target (the new nodes open the replica), changes the shard group's voters (new replicas are
//! caught up as learners first), then records the move as done. Once every replica is in
//! place it spreads the shards' leaders ([`super::placement::leader_moves`]): one replica at a
//! time is asked to stand for election, so no node leads (and takes the writes of) more than
//! one shard above another where the replicas allow it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ebb_storage::WriteBatch;

use super::meta::Meta;
use super::placement;
use super::proto::{CampaignRequest, LeadersRequest};
use super::service::{connect, set_shard_members};
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

/// On the metadata leader, with no replica move under way: asks one replica to take over a
/// shard's leadership if the leaders are uneven; returns whether it asked (the election takes
/// a moment, so the caller waits before asking again).
pub async fn balance_leaders(meta: &Arc<Meta>) -> bool {
    let v = meta.view();
    if !meta.is_leader() || v.shards.values().any(|s| s.target.is_some()) {
        return false;
    }
    let v = &v;
    let nodes: Vec<u64> = v.active().map(|n| n.id).collect();
    let leaders = known_leaders(meta, v, &nodes).await;
    let replicas: BTreeMap<u64, Vec<u64>> =
        v.shards.values().map(|s| (s.id, s.replicas.clone())).collect();
    let Some(&(shard, to)) = placement::leader_moves(&replicas, &leaders, &nodes).first() else {
        return false;
    };
    let Some(addr) = v.nodes.get(&to).map(|n| n.grpc_addr.clone()) else { return false };
    match connect(meta.conns(), &addr).await {
        Ok(mut c) => match c.campaign(CampaignRequest { shard }).await {
            Ok(_) => {
                tracing::info!(shard, to, "moving a shard's leadership");
                true
            }
            Err(e) => {
                tracing::warn!(shard, to, %e, "asking a replica to lead");
                false
            }
        },
        Err(e) => {
            tracing::warn!(shard, to, %e, "reaching a replica to lead");
            false
        }
    }
}

/// The leader of each shard as the replicas on `nodes` know it (the answer of the highest term
/// wins); shards no reachable replica knows a leader of are absent.
async fn known_leaders(meta: &Arc<Meta>, v: &view::MetaView, nodes: &[u64]) -> BTreeMap<u64, u64> {
    let mut best: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for n in nodes {
        let Some(addr) = v.nodes.get(n).map(|n| n.grpc_addr.clone()) else { continue };
        let Ok(mut c) = connect(meta.conns(), &addr).await else { continue };
        let Ok(reply) = c.leaders(LeadersRequest {}).await else { continue };
        for l in reply.into_inner().leaders {
            if l.leader != 0 && best.get(&l.shard).is_none_or(|(term, _)| l.term > *term) {
                best.insert(l.shard, (l.term, l.leader));
            }
        }
    }
    best.into_iter().map(|(s, (_, leader))| (s, leader)).collect()
}
