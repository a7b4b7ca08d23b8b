//! The readiness checks of a cluster node (see [`crate::health`]).

use std::collections::BTreeMap;
use std::time::Duration;

use super::proto::cluster_client::ClusterClient;
use super::proto::LeadersReply;
use super::proto::LeadersRequest;
use super::router::Router;
use crate::health::{Readiness, MAX_LAG};

/// How long a leader has to say how far its log reaches.
const LAG_QUESTION: Duration = Duration::from_secs(2);

/// Checks the node: joined, metadata leader known, every replica placed here open, led and
/// caught up, engines healthy, free space above the reserve.
pub async fn check(router: &Router, reserve: &ebb_storage::disk::Reserve) -> Readiness {
    let mut out = Readiness::ready();
    let meta = router.meta();
    if meta.view().settings.is_none() {
        out.fail("has not received the cluster metadata yet");
    }
    if meta.raft().metrics().borrow().current_leader.is_none() {
        out.fail("the metadata group has no leader");
    }
    let me = meta.node();
    if let Some(why) = router.left() {
        out.fail(why);
        return out;
    }
    if meta.view().nodes.get(&me).is_some_and(|n| n.state == super::view::NodeState::Draining) {
        out.fail("decommissioning: its replicas are moving to other nodes");
    }
    let shards = router.shards().all();
    // Replicas the metadata places here (or moves here) that this node has not opened yet.
    for info in meta.view().shards.values().filter(|i| i.involves(me)) {
        if !shards.iter().any(|s| s.id == info.id) {
            out.fail(format!("shard {}: placed here, not opened yet", info.id));
        }
    }
    // Leaders on other nodes: how far their logs reach, asked once per node.
    let mut ask: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut applied: BTreeMap<u64, u64> = BTreeMap::new();
    for s in &shards {
        let m = s.group.raft.metrics().borrow().clone();
        if let Err(e) = &m.running_state {
            out.fail(format!("shard {}: Raft stopped: {e}", s.id));
            continue;
        }
        let Some(leader) = m.current_leader else {
            out.fail(format!("shard {}: no leader", s.id));
            continue;
        };
        if leader == me {
            continue;
        }
        match m.membership_config.membership().get_node(&leader) {
            Some(n) => ask.entry(n.addr.clone()).or_default().push(s.id),
            None => out.fail(format!("shard {}: leader {leader} unknown", s.id)),
        }
        applied.insert(s.id, m.last_applied.map_or(0, |l| l.index));
    }
    let calls = ask.into_iter().map(|(addr, ids)| async move {
        let reply = async {
            let ch = router.conns().channel(&addr).ok()?;
            let mut client = ClusterClient::new(ch);
            let r = client.leaders(LeadersRequest {});
            Some(tokio::time::timeout(LAG_QUESTION, r).await.ok()?.ok()?.into_inner())
        }
        .await;
        (addr, ids, reply)
    });
    for (addr, ids, reply) in futures::future::join_all(calls).await {
        for why in lag(&addr, &ids, &applied, reply.as_ref()) {
            out.fail(why);
        }
    }
    let engines: Vec<_> = shards.iter().map(|s| (s.id, s.group.replica.engine())).collect();
    crate::health::check_storage(
        engines.iter().map(|(id, e)| (format!("shard {id}"), e.as_ref())),
        reserve,
        &mut out,
    );
    out
}

/// Why the replicas `ids`, whose leaders are at `addr`, are not caught up, given what each has
/// applied here (`applied`) and the leader node's `reply` (`None`: it did not answer within
/// [`LAG_QUESTION`], so nothing shows the replicas caught up: they are not counted ready).
fn lag(
    addr: &str,
    ids: &[u64],
    applied: &BTreeMap<u64, u64>,
    reply: Option<&LeadersReply>,
) -> Vec<String> {
    let Some(reply) = reply else {
        return ids
            .iter()
            .map(|id| {
                format!(
                    "shard {id}: its leader at {addr} did not say how far its log reaches \
                     within {} s",
                    LAG_QUESTION.as_secs()
                )
            })
            .collect();
    };
    ids.iter()
        .filter_map(|&id| {
            let mine = applied.get(&id).copied().unwrap_or(0);
            // Against what the leader has committed and applied, not its whole log (entries in
            // flight under heavy ingest are not lag).
            match reply.leaders.iter().find(|l| l.shard == id) {
                Some(l) if l.applied_index.saturating_sub(mine) > MAX_LAG => Some(format!(
                    "shard {id}: catching up, {mine} of its leader's {} entries applied",
                    l.applied_index
                )),
                Some(_) => None,
                None => Some(format!("shard {id}: its leader at {addr} does not hold it")),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::proto::ShardLeader;

    #[test]
    fn a_replica_is_caught_up_only_by_its_leaders_answer() {
        let applied = BTreeMap::from([(1, 5_000), (2, 100), (3, 7)]);
        let leader =
            |shard, applied_index| ShardLeader { shard, applied_index, ..Default::default() };
        let reply = LeadersReply {
            leaders: vec![leader(1, 5_500), leader(2, 9_000)],
            ..Default::default()
        };
        let why = lag("n2:7090", &[1, 2, 3], &applied, Some(&reply));
        assert_eq!(why.len(), 2, "{why:?}");
        assert!(why[0].starts_with("shard 2: catching up, 100 of"), "{why:?}");
        assert!(why[1].contains("shard 3: its leader at n2:7090 does not hold it"), "{why:?}");
        // No answer: no replica of that leader counts as caught up.
        let why = lag("n2:7090", &[1, 2], &applied, None);
        assert_eq!(why.len(), 2, "{why:?}");
        assert!(why.iter().all(|w| w.contains("did not say how far its log reaches")), "{why:?}");
    }
}
