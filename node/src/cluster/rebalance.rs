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
        if v.in_split(id) {
            continue; // moved once the split is done
        }
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

/// On the metadata leader, with no replica move and no split under way: asks one replica to
/// take over a shard's leadership if the leaders are uneven; returns whether it asked (the
/// election takes a moment, so the caller waits before asking again). A split changes the
/// shards whose leaders are balanced, and its steps (fork, switch, trims) each need the
/// parent's leader: an election it did not need would only stall them, and every `DELETE` or
/// `ERASE` waiting for the shard.
pub async fn balance_leaders(meta: &Arc<Meta>, tries: &mut LeaderTries) -> bool {
    let v = meta.view();
    let busy = |s: &view::ShardInfo| s.target.is_some() || s.splitting() || s.untrimmed;
    if !meta.is_leader() || v.shards.values().any(busy) {
        return false;
    }
    let v = &v;
    let nodes: Vec<u64> = v.active().map(|n| n.id).collect();
    // Only replicas close behind their leader are asked to lead (and only voters).
    let (leaders, caught_up) = known_leaders(meta, v, &nodes).await;
    let replicas: BTreeMap<u64, Vec<u64>> = v
        .shards
        .values()
        .map(|s| {
            let ready = caught_up.get(&s.id).map(Vec::as_slice).unwrap_or_default();
            (s.id, s.replicas.iter().copied().filter(|n| ready.contains(n)).collect())
        })
        .collect();
    let moves = placement::leader_moves(&replicas, &leaders, &nodes);
    tries.keep(&moves);
    let now = std::time::Instant::now();
    let Some(&(shard, to)) = moves.iter().find(|(shard, _)| tries.may_ask(*shard, now)) else {
        return false;
    };
    tries.asked(shard, now);
    let Some(addr) = v.nodes.get(&to).map(|n| n.grpc_addr.clone()) else { return false };
    let ask = async {
        let mut c = connect(meta.conns(), &addr).await?;
        c.campaign(CampaignRequest { shard }).await
    };
    match tokio::time::timeout(ASK_TIMEOUT * 5, ask).await {
        Ok(Ok(_)) => {
            tracing::info!(shard, to, "moving a shard's leadership");
            true
        }
        Ok(Err(e)) => {
            tracing::warn!(shard, to, e = %e.message(), "asking a replica to lead");
            false
        }
        Err(_) => {
            tracing::warn!(shard, to, "asking a replica to lead: no answer in time");
            false
        }
    }
}

/// When each shard's leadership was last asked to move, and how long to wait before asking
/// again. A replica that stood for election and lost (its log was behind the leader's under
/// writes, say) still costs the shard an election, so each failed move of a shard doubles the
/// wait before the next (from [`FIRST_RETRY`] up to [`LAST_RETRY`]); a shard whose leader is
/// where the balance wants it is forgotten.
#[derive(Debug, Default)]
pub struct LeaderTries {
    next: BTreeMap<u64, (std::time::Instant, std::time::Duration)>,
}

/// The wait after a shard's first move.
const FIRST_RETRY: std::time::Duration = std::time::Duration::from_secs(2);

/// The longest wait between moves of one shard's leadership.
const LAST_RETRY: std::time::Duration = std::time::Duration::from_secs(120);

impl LeaderTries {
    fn may_ask(&self, shard: u64, now: std::time::Instant) -> bool {
        self.next.get(&shard).is_none_or(|(at, _)| now >= *at)
    }

    fn asked(&mut self, shard: u64, now: std::time::Instant) {
        let wait = self.next.get(&shard).map_or(FIRST_RETRY, |(_, w)| (*w * 2).min(LAST_RETRY));
        self.next.insert(shard, (now + wait, wait));
    }

    /// Forgets the shards not in `wanted` (their leaders are balanced).
    fn keep(&mut self, wanted: &[(u64, u64)]) {
        self.next.retain(|shard, _| wanted.iter().any(|(s, _)| s == shard));
    }
}

/// Log entries a replica may trail its leader by and still be asked to lead: one further
/// behind would lose the election, or win it only after catching up, and the shard would
/// stall meanwhile.
const CAUGHT_UP: u64 = 64;

/// How long one node may take to say which shards it holds and who leads them.
const ASK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// What every node of `nodes` says of the replicas it holds, asked at once, each for at most
/// [`ASK_TIMEOUT`] (nodes that do not answer in time are left out).
pub(super) async fn ask_replicas(
    meta: &Arc<Meta>,
    v: &view::MetaView,
    nodes: &[u64],
) -> Vec<(u64, Vec<super::proto::ShardLeader>)> {
    let asks = nodes.iter().map(|&n| async move {
        let addr = v.nodes.get(&n).map(|i| i.grpc_addr.clone())?;
        let ask = async {
            let mut c = connect(meta.conns(), &addr).await.ok()?;
            c.leaders(LeadersRequest {}).await.ok()
        };
        let reply = tokio::time::timeout(ASK_TIMEOUT, ask).await.ok()??;
        Some((n, reply.into_inner().leaders))
    });
    futures::future::join_all(asks).await.into_iter().flatten().collect()
}

/// Per shard, its leader as the replicas on `nodes` know it (the answer of the highest term
/// wins) and the replicas whose logs are within [`CAUGHT_UP`] entries of the leader's. Nodes
/// are asked at once, each for at most [`ASK_TIMEOUT`]; shards no reachable replica knows a
/// leader of are absent.
async fn known_leaders(
    meta: &Arc<Meta>,
    v: &view::MetaView,
    nodes: &[u64],
) -> (BTreeMap<u64, u64>, BTreeMap<u64, Vec<u64>>) {
    let replies = ask_replicas(meta, v, nodes).await;
    let mut best: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for (_, shards) in &replies {
        for l in shards {
            let Some(leader) = l.leader else { continue };
            if best.get(&l.shard).is_none_or(|(term, _)| l.term > *term) {
                best.insert(l.shard, (l.term, leader));
            }
        }
    }
    let leaders: BTreeMap<u64, u64> = best.into_iter().map(|(s, (_, l))| (s, l)).collect();
    // The leader's own last log index, as its replica reports it.
    let mut head: BTreeMap<u64, u64> = BTreeMap::new();
    for (n, shards) in &replies {
        for l in shards.iter().filter(|l| leaders.get(&l.shard) == Some(n)) {
            head.insert(l.shard, l.last_log_index);
        }
    }
    let mut caught_up: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for (n, shards) in &replies {
        for l in shards {
            if head.get(&l.shard).is_some_and(|h| l.last_log_index + CAUGHT_UP >= *h) {
                caught_up.entry(l.shard).or_default().push(*n);
            }
        }
    }
    (leaders, caught_up)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_shard_whose_leader_will_not_move_is_asked_ever_less_often_and_forgotten_once_balanced() {
        let mut tries = LeaderTries::default();
        let t0 = Instant::now();
        assert!(tries.may_ask(1, t0));
        tries.asked(1, t0);
        assert!(!tries.may_ask(1, t0 + Duration::from_secs(1)));
        assert!(tries.may_ask(2, t0), "other shards are not held back");
        assert!(tries.may_ask(1, t0 + FIRST_RETRY));
        // Each failed move doubles the wait, up to the longest.
        let mut at = t0 + FIRST_RETRY;
        let mut waits = Vec::new();
        for _ in 0..8 {
            tries.asked(1, at);
            let (next, wait) = tries.next[&1];
            waits.push(wait.as_secs());
            at = next;
        }
        assert_eq!(waits, [4, 8, 16, 32, 64, 120, 120, 120]);
        // Balanced (no move wanted for it): the next imbalance starts from the first wait.
        tries.keep(&[(2, 3)]);
        assert!(tries.may_ask(1, at - Duration::from_secs(1)));
        tries.asked(1, at);
        assert_eq!(tries.next[&1].1, FIRST_RETRY);
    }
}
