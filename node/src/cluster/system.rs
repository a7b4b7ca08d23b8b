//! `system.nodes`, `system.shards` and `system.queries` of cluster SQL: the nodes with their
//! state, role in the metadata group and load (replicas, shards led, bytes their replicas
//! hold), every shard's placement, leader, move in progress and span of the series hash
//! space, and the statements each node's front door ran lately.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BooleanArray, StringArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use ebb_query::{QueryError, Result};

use super::router::Router;

/// Names of the system tables the cluster describes.
pub const NAMES: &[&str] = &["nodes", "queries", "shards"];

fn join(ids: &[u64]) -> String {
    ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",")
}

fn arrow(e: datafusion::arrow::error::ArrowError) -> QueryError {
    QueryError::Internal(e.to_string())
}

/// What a node says of itself: why it is not ready (empty: ready), and per shard replica it
/// holds, the bytes it holds (files and active memtable).
struct NodeReport {
    not_ready: Vec<String>,
    bytes: BTreeMap<u64, u64>,
}

/// The report of each of `nodes`, from the node itself ([`crate::health`]).
async fn reports(router: &Router, nodes: &[&super::view::NodeInfo]) -> Vec<NodeReport> {
    use super::proto::cluster_client::ClusterClient;
    let me = router.meta().node();
    let calls = nodes.iter().map(|n| async move {
        if n.id == me {
            let shards = router.shards().all();
            let bytes = shards.iter().map(|s| (s.id, super::service::replica_bytes(s))).collect();
            return NodeReport { not_ready: router.health().get().reasons, bytes };
        }
        let reply = async {
            let ch = router.conns().channel(&n.grpc_addr).ok()?;
            let mut client = ClusterClient::new(ch);
            let call = client.leaders(super::proto::LeadersRequest {});
            tokio::time::timeout(std::time::Duration::from_secs(1), call).await.ok()?.ok()
        }
        .await;
        match reply.map(|r| r.into_inner()) {
            Some(r) => NodeReport {
                bytes: r.leaders.iter().map(|l| (l.shard, l.bytes)).collect(),
                not_ready: match (r.ready, r.not_ready.is_empty()) {
                    (true, _) => Vec::new(),
                    (false, true) => vec!["not ready".into()],
                    (false, false) => r.not_ready,
                },
            },
            None => {
                NodeReport { not_ready: vec!["does not answer".into()], bytes: BTreeMap::new() }
            }
        }
    });
    futures::future::join_all(calls).await
}

/// System table `name`, as of now.
pub async fn table(router: &Router, name: &str) -> Result<Option<RecordBatch>> {
    let view = router.meta().view();
    let batch = match name {
        "nodes" => {
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
            let schema = Arc::new(Schema::new(vec![
                Field::new("id", DataType::UInt64, false),
                Field::new("state", DataType::Utf8, false),
                Field::new("metadata_role", DataType::Utf8, false),
                Field::new("grpc_addr", DataType::Utf8, false),
                Field::new("http_addr", DataType::Utf8, false),
                Field::new("pg_addr", DataType::Utf8, false),
                Field::new("replicas", DataType::UInt64, false),
                Field::new("leaders", DataType::UInt64, false),
                Field::new("bytes", DataType::UInt64, true),
                Field::new("ready", DataType::Boolean, false),
                Field::new("not_ready", DataType::Utf8, true),
            ]));
            let replicas =
                |id: u64| view.shards.values().filter(|s| s.replicas.contains(&id)).count() as u64;
            let cols: Vec<ArrayRef> = vec![
                Arc::new(UInt64Array::from_iter_values(nodes.iter().map(|n| n.id))),
                Arc::new(StringArray::from_iter_values(
                    nodes.iter().map(|n| format!("{:?}", n.state).to_lowercase()),
                )),
                Arc::new(StringArray::from_iter_values(nodes.iter().map(|n| role(n.id)))),
                Arc::new(StringArray::from_iter_values(nodes.iter().map(|n| n.grpc_addr.clone()))),
                Arc::new(StringArray::from_iter_values(nodes.iter().map(|n| n.http_addr.clone()))),
                Arc::new(StringArray::from_iter_values(nodes.iter().map(|n| n.pg_addr.clone()))),
                Arc::new(UInt64Array::from_iter_values(nodes.iter().map(|n| replicas(n.id)))),
                Arc::new(UInt64Array::from_iter_values(nodes.iter().map(|n| led(n.id)))),
                Arc::new(UInt64Array::from_iter(
                    reports.iter().map(|r| (!r.bytes.is_empty()).then(|| r.bytes.values().sum())),
                )),
                Arc::new(BooleanArray::from_iter(
                    reports.iter().map(|r| Some(r.not_ready.is_empty())),
                )),
                Arc::new(StringArray::from_iter(
                    reports
                        .iter()
                        .map(|r| (!r.not_ready.is_empty()).then(|| r.not_ready.join("; "))),
                )),
            ];
            RecordBatch::try_new(schema, cols).map_err(arrow)?
        }
        "shards" => {
            let shards: Vec<_> = view.shards.values().collect();
            let leaders = router.leaders().await;
            let leader = |id: u64| leaders.get(&id).copied();
            let schema = Arc::new(Schema::new(vec![
                Field::new("shard", DataType::UInt64, false),
                Field::new("replicas", DataType::Utf8, false),
                Field::new("leader", DataType::UInt64, true),
                Field::new("moving", DataType::Boolean, false),
                Field::new("moving_to", DataType::Utf8, true),
                Field::new("root", DataType::UInt64, false),
                Field::new("hash_lo", DataType::UInt64, false),
                Field::new("hash_end", DataType::UInt64, true),
                Field::new("split", DataType::Utf8, true),
            ]));
            let spans: Vec<_> = shards.iter().map(|s| s.span()).collect();
            let cols: Vec<ArrayRef> = vec![
                Arc::new(UInt64Array::from_iter_values(shards.iter().map(|s| s.id))),
                Arc::new(StringArray::from_iter_values(shards.iter().map(|s| join(&s.replicas)))),
                Arc::new(UInt64Array::from(
                    shards.iter().map(|s| leader(s.id)).collect::<Vec<_>>(),
                )),
                Arc::new(BooleanArray::from(
                    shards.iter().map(|s| s.target.is_some()).collect::<Vec<_>>(),
                )),
                Arc::new(StringArray::from(
                    shards.iter().map(|s| s.target.as_deref().map(join)).collect::<Vec<_>>(),
                )),
                Arc::new(UInt64Array::from_iter_values(spans.iter().map(|s| u64::from(s.root)))),
                Arc::new(UInt64Array::from_iter_values(spans.iter().map(|s| s.lo))),
                Arc::new(UInt64Array::from_iter(spans.iter().map(|s| s.end))),
                Arc::new(StringArray::from(
                    shards.iter().map(|s| split_state(s)).collect::<Vec<_>>(),
                )),
            ];
            RecordBatch::try_new(schema, cols).map_err(arrow)?
        }
        "queries" => ebb_query::statements::batch(&statements(router, &view).await)?,
        _ => return Ok(None),
    };
    Ok(Some(batch))
}

/// The statements every node ran lately, oldest first; a node that does not answer within a
/// second is left out.
async fn statements(
    router: &Router,
    view: &super::view::MetaView,
) -> Vec<(Option<u64>, ebb_query::statements::StatementRecord)> {
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
