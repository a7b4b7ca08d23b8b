//! What a cluster says of itself for `system.nodes`, `system.shards` and `system.queries`
//! (the tables themselves are `ebb_query::sql::system`'s): the nodes with their state, role
//! in the metadata group and load (replicas, shards led, bytes their replicas hold), every
//! shard's placement, leader, move in progress and span of the series hash space, and the
//! statements each node's front door ran lately.

use std::collections::{BTreeMap, BTreeSet};

use ebb_query::sql::shard::{NodeRow, ShardRow};

use super::router::Router;

/// What a node says of itself: why it is not ready (empty: ready), and per shard replica it
/// holds, the bytes it holds (files and active memtable).
struct NodeReport {
    not_ready: Vec<String>,
    bytes: BTreeMap<u64, u64>,
    /// Its binary and commit, if it answered.
    version: Option<(super::version::PeerVersion, String)>,
}

/// The report of each of `nodes`, from the node itself ([`crate::health`]).
async fn reports(router: &Router, nodes: &[&super::view::NodeInfo]) -> Vec<NodeReport> {
    let me = router.meta().node();
    let calls = nodes.iter().map(|n| async move {
        if n.id == me {
            let shards = router.shards().all();
            let bytes = shards.iter().map(|s| (s.id, super::service::replica_bytes(s))).collect();
            let version = Some((router.meta().versions().me(), crate::COMMIT.to_string()));
            return NodeReport { not_ready: router.health().get().reasons, bytes, version };
        }
        let wait = std::time::Duration::from_secs(1);
        match super::upgrade::ask(router.conns(), &n.grpc_addr, wait).await {
            Some(r) => NodeReport {
                version: Some((super::upgrade::reply_version(&r), r.commit.clone())),
                bytes: r.leaders.iter().map(|l| (l.shard, l.bytes)).collect(),
                not_ready: match (r.ready, r.not_ready.is_empty()) {
                    (true, _) => Vec::new(),
                    (false, true) => vec!["not ready".into()],
                    (false, false) => r.not_ready,
                },
            },
            None => NodeReport {
                not_ready: vec!["does not answer".into()],
                bytes: BTreeMap::new(),
                version: None,
            },
        }
    });
    futures::future::join_all(calls).await
}

/// The member nodes, with their state, role in the metadata group and load.
pub async fn nodes(router: &Router) -> Vec<NodeRow> {
    let view = router.meta().view();
    let m = router.meta().raft().metrics().borrow().clone();
    let membership = m.membership_config.membership().clone();
    let voters: BTreeSet<u64> = membership.voter_ids().collect();
    let learners: BTreeSet<u64> = membership.learner_ids().collect();
    let nodes: Vec<_> = view.nodes.values().collect();
    let role = |id: u64| {
        if m.current_leader == Some(id) {
            "leader"
        } else if voters.contains(&id) {
            "voter"
        } else if learners.contains(&id) {
            "learner"
        } else {
            "none"
        }
    };
    let reports = reports(router, &nodes).await;
    let leaders = router.leaders().await;
    let led = |id: u64| leaders.values().filter(|l| **l == id).count() as u64;
    let replicas =
        |id: u64| view.shards.values().filter(|s| s.replicas.contains(&id)).count() as u64;
    nodes
        .iter()
        .zip(reports)
        .map(|(n, r)| NodeRow {
            id: n.id,
            state: format!("{:?}", n.state).to_lowercase(),
            metadata_role: role(n.id).to_string(),
            grpc_addr: n.grpc_addr.clone(),
            http_addr: n.http_addr.clone(),
            pg_addr: n.pg_addr.clone(),
            replicas: replicas(n.id),
            leaders: led(n.id),
            bytes: (!r.bytes.is_empty()).then(|| r.bytes.values().sum()),
            not_ready: r.not_ready,
            version: r.version.as_ref().map(|(v, _)| v.binary.clone().unwrap_or("0.1.0".into())),
            commit: r.version.as_ref().and_then(|(_, c)| (!c.is_empty()).then(|| c.clone())),
            cluster_versions: r.version.as_ref().map(|(v, _)| v.range.to_string()),
        })
        .collect()
}

/// Every shard's placement, leader, move in progress and span of the series hash space.
pub async fn shards(router: &Router) -> Vec<ShardRow> {
    let view = router.meta().view();
    let leaders = router.leaders().await;
    view.shards
        .values()
        .map(|s| {
            let span = s.span();
            ShardRow {
                shard: s.id,
                replicas: s.replicas.clone(),
                leader: leaders.get(&s.id).copied(),
                moving_to: s.target.clone(),
                root: u64::from(span.root),
                hash_lo: span.lo,
                hash_end: span.end,
                split: split_state(s),
            }
        })
        .collect()
}

/// The statements every node ran lately, oldest first; a node that does not answer within a
/// second is left out.
pub async fn statements(
    router: &Router,
) -> Vec<(Option<u64>, ebb_query::statements::StatementRecord)> {
    let view = router.meta().view();
    use super::proto::cluster_client::ClusterClient;
    use ebb_query::statements::StatementRecord;
    let me = router.meta().node();
    let calls = view.nodes.values().map(|n| async move {
        if n.id == me {
            return router.statement_log().recent().into_iter().map(|r| (Some(me), r)).collect();
        }
        let reply = async {
            let ch = router.conns().channel(&n.grpc_addr).ok()?;
            let mut client = ClusterClient::new(ch);
            let call = client.statements(super::proto::StatementsRequest {});
            tokio::time::timeout(std::time::Duration::from_secs(1), call).await.ok()?.ok()
        }
        .await;
        let list = reply.map(|r| r.into_inner().statements).unwrap_or_default();
        list.into_iter()
            .map(|s| {
                let r = StatementRecord {
                    started_ns: s.started_ns,
                    protocol: s.protocol,
                    user: s.user,
                    database: s.database,
                    kind: s.kind,
                    duration_us: s.duration_us,
                    rows: s.rows,
                    ok: s.ok,
                };
                (Some(n.id), r)
            })
            .collect::<Vec<_>>()
    });
    let mut all: Vec<_> = futures::future::join_all(calls).await.into_iter().flatten().collect();
    all.sort_by_key(|(_, r)| r.started_ns);
    all
}

/// Where a shard stands in a split: `splitting from N` while it is being split off shard N,
/// `trimming` until it has dropped the rows of the other half, else nothing.
fn split_state(s: &super::view::ShardInfo) -> Option<String> {
    match (&s.split_from, s.untrimmed) {
        (Some(f), _) => Some(format!("splitting from {}", f.parent)),
        (None, true) => Some("trimming".into()),
        (None, false) => None,
    }
}
