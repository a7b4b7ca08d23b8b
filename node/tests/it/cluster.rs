//! A cluster in one process (nodes on loopback gRPC): nodes join through any node and get ids
//! from the cluster (kept in their data directories); the first three vote in the metadata
//! group and the rest follow it as learners; the metadata survives losing its leader; shards
//! spread over the nodes as they join and keep their rows; writes through any node reach their
//! shard's leader and survive losing a node; SQL on any node reads and deletes across every
//! shard; a decommissioned node drains and leaves; scale-out from three to five nodes under
//! continuous writes and deletes loses nothing.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ebb_node::cluster::view::Settings;
use ebb_node::cluster::{ClusterNode, NODE_ID_FILE};

use crate::cluster_harness::Harness;

fn voters(n: &ClusterNode) -> BTreeSet<u64> {
    n.meta.raft().metrics().borrow().membership_config.membership().voter_ids().collect()
}

fn learners(n: &ClusterNode) -> BTreeSet<u64> {
    n.meta.raft().metrics().borrow().membership_config.membership().learner_ids().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nodes_join_get_ids_and_share_the_metadata() {
    let mut h = Harness::new();
    h.start(0, &[]).await;
    assert_eq!(h.nodes[&0].id, 1);
    let v = h.nodes[&0].meta.view();
    assert_eq!(v.settings, Some(Settings { shards: 4, replication: 3 }));
    assert_eq!(v.shards.len(), 4);
    assert!(v.shards.values().all(|s| s.replicas == vec![1]));

    // Three more join, through different nodes (a learner forwards to the leader).
    h.start(1, &[0]).await;
    h.start(2, &[1, 0]).await;
    h.start(3, &[2]).await;
    let ids: Vec<u64> = h.nodes.values().map(|n| n.id).collect();
    assert_eq!(ids, vec![1, 2, 3, 4]);
    h.wait("every node sees four nodes", |n| n.meta.view().nodes.len() == 4).await;
    h.wait("the first three vote", |n| voters(n) == BTreeSet::from([1, 2, 3])).await;
    h.wait("the fourth follows as a learner", |n| learners(n) == BTreeSet::from([4])).await;
    for i in 0..4 {
        let stored = std::fs::read_to_string(h.dir.path().join(format!("n{i}")).join(NODE_ID_FILE));
        assert_eq!(stored.unwrap().trim(), h.nodes[&i].id.to_string());
    }

    // Losing the metadata leader: the other voters elect one; joins keep working.
    let leader = h.nodes[&0].meta.leader().unwrap().0;
    let idx = *h.nodes.iter().find(|(_, n)| n.id == leader).unwrap().0;
    h.stop(idx).await;
    h.start(4, &[3]).await;
    assert_eq!(h.nodes[&4].id, 5);
    h.wait("every running node sees five nodes", |n| n.meta.view().nodes.len() == 5).await;

    // The stopped node restarts with its stored id, without joining again, and catches up.
    h.start(idx, &[]).await;
    assert_eq!(h.nodes[&idx].id, leader);
    h.wait("the restarted node sees five nodes", |n| n.meta.view().nodes.len() == 5).await;
    h.wait("the voters stay the first three", |n| voters(n) == BTreeSet::from([1, 2, 3])).await;
    h.wait("the rest learn", |n| learners(n) == BTreeSet::from([4, 5])).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let views: Vec<_> = h.nodes.values().map(|n| n.meta.view()).collect();
        if views.iter().all(|v| *v == views[0]) {
            break;
        }
        assert!(Instant::now() < deadline, "views differ");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for i in h.nodes.keys().copied().collect::<Vec<_>>() {
        h.stop(i).await;
    }
}

/// For every shard: its replicas according to the metadata, and the voters of its group on
/// every node that holds it, which must agree.
pub(crate) fn placement(h: &Harness) -> BTreeMap<u64, BTreeSet<u64>> {
    let view = h.nodes.values().next().unwrap().meta.view();
    view.shards.values().map(|s| (s.id, s.replicas.iter().copied().collect())).collect()
}

pub(crate) fn settled(h: &Harness, want_rf: usize) -> bool {
    let p = placement(h);
    let view = h.nodes.values().next().unwrap().meta.view();
    if view.active().count() != h.nodes.len() || view.shards.values().any(|s| s.target.is_some()) {
        return false;
    }
    // Where the placement wants every shard.
    let balanced = ebb_node::cluster::placement::target(&view)
        .iter()
        .all(|(id, want)| p.get(id) == Some(&want.iter().copied().collect::<BTreeSet<u64>>()));
    if !balanced {
        return false;
    }
    for (shard, replicas) in &p {
        if replicas.len() != want_rf {
            return false;
        }
        for n in h.nodes.values() {
            let holds = n.shards.get(*shard);
            if replicas.contains(&n.id) != holds.is_some() {
                return false;
            }
            if let Some(s) = holds {
                let voters: BTreeSet<u64> = s
                    .group
                    .raft
                    .metrics()
                    .borrow()
                    .membership_config
                    .membership()
                    .voter_ids()
                    .collect();
                if &voters != replicas {
                    return false;
                }
            }
        }
    }
    true
}

pub(crate) async fn wait_settled(h: &Harness, rf: usize) {
    h.watchdog.step(format!("waiting for shards to settle at {rf} replicas"));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !settled(h, rf) {
        assert!(Instant::now() < deadline, "shards did not settle: {:?}", placement(h));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Rows of `cpu` in one shard replica (0 if the table never reached that shard).
async fn replica_rows(s: &ebb_node::cluster::Shard) -> usize {
    if s.db.catalog().table("db", "cpu").is_none() {
        return 0;
    }
    let session = ebb_query::SqlSession::new(s.db.clone(), "db");
    let b = session.query("SELECT count(*) AS n FROM cpu").await.unwrap();
    let n = b[0].column(0).as_any().downcast_ref::<datafusion::arrow::array::Int64Array>().unwrap();
    n.value(0) as usize
}

/// Rows of `cpu` on every replica of every shard, by shard: all replicas of a shard agree.
async fn rows_per_shard(h: &Harness) -> BTreeMap<u64, usize> {
    try_rows_per_shard(h).await.unwrap_or_else(|e| panic!("{e}"))
}

/// Rows of `cpu` by shard, or which shard's replicas disagree.
async fn try_rows_per_shard(h: &Harness) -> Result<BTreeMap<u64, usize>, String> {
    let mut out = BTreeMap::new();
    for n in h.nodes.values() {
        for s in n.shards.all() {
            let rows = replica_rows(&s).await;
            if let Some(prev) = out.insert(s.id, rows) {
                if prev != rows {
                    return Err(format!("replicas of shard {} differ: {prev} vs {rows}", s.id));
                }
            }
        }
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shards_spread_over_nodes_as_they_join_and_keep_their_data() {
    let mut h = Harness::new();
    h.start(0, &[]).await;
    wait_settled(&h, 1).await;
    // Data in every shard before anyone joins.
    for s in h.nodes[&0].shards.all() {
        let db = s.db.clone();
        let body: String =
            (0..100).map(|t| format!("cpu,host=s{} v={t} {}\n", s.id, 1_000 + t)).collect();
        tokio::task::spawn_blocking(move || {
            db.write_lines("db", &body, ebb_query::lp::Precision::Seconds, 0).unwrap()
        })
        .await
        .unwrap();
    }
    h.start(1, &[0]).await;
    h.start(2, &[0]).await;
    wait_settled(&h, 3).await;
    let before = rows_per_shard(&h).await;
    assert_eq!(before.len(), 4);
    assert!(before.values().all(|&n| n == 100), "{before:?}");

    // Two more nodes: shards rebalance so each node holds a fair share, and nothing is lost.
    h.start(3, &[0]).await;
    h.start(4, &[1]).await;
    wait_settled(&h, 3).await;
    let mut load: BTreeMap<u64, usize> = BTreeMap::new();
    for replicas in placement(&h).values() {
        for n in replicas {
            *load.entry(*n).or_default() += 1;
        }
    }
    assert_eq!(load.len(), 5, "every node should hold replicas: {load:?}");
    assert!(load.values().max().unwrap() - load.values().min().unwrap() <= 1, "{load:?}");
    assert_eq!(rows_per_shard(&h).await, before);
    for i in h.nodes.keys().copied().collect::<Vec<_>>() {
        h.stop(i).await;
    }
}

fn cpu_lines(series: u32, from: u32, to: u32) -> String {
    let mut s = String::new();
    for t in from..to {
        for h in 0..series {
            s.push_str(&format!("cpu,host=h{h},dc=d{} v={t} {}\n", h % 3, 1_000 + t));
        }
    }
    s
}

/// Rows each shard should hold after `points` points of each of `series` series.
fn expected(series: u32, points: usize, shards: u32) -> BTreeMap<u64, usize> {
    let mut out: BTreeMap<u64, usize> = (1..=shards as u64).map(|s| (s, 0)).collect();
    for h in 0..series {
        let tags =
            [("host".to_string(), format!("h{h}")), ("dc".to_string(), format!("d{}", h % 3))];
        let hash = ebb_node::cluster::hashspace::series_hash("cpu", &tags);
        let map = ebb_node::cluster::hashspace::ShardMap::unsplit(shards);
        *out.entry(map.shard_of(hash)).or_default() += points;
    }
    out
}

async fn wait_rows(h: &Harness, want: &BTreeMap<u64, usize>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // Every running replica of every shard, once caught up, holds exactly its rows.
        let mut all_match = true;
        for n in h.nodes.values() {
            for s in n.shards.all() {
                let got = replica_rows(&s).await;
                all_match &= got == want[&s.id];
            }
        }
        if all_match {
            return;
        }
        assert!(Instant::now() < deadline, "replicas did not reach {want:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_through_any_node_reach_their_shards_and_survive_losing_a_node() {
    let mut h = Harness::new();
    h.start(0, &[]).await;
    h.start(1, &[0]).await;
    h.start(2, &[0]).await;
    wait_settled(&h, 3).await;
    let p = ebb_query::lp::Precision::Seconds;
    // Through a node that may lead nothing: every shard's part goes to its leader.
    let s = h.nodes[&1].router.write_lines("db", &cpu_lines(60, 0, 10), p, 0).await.unwrap();
    assert_eq!((s.lines, s.rows), (600, 600));
    wait_rows(&h, &expected(60, 10, 4)).await;

    // A bad line rejects the request before anything is written.
    let bad = format!("{}cpu,host=x v=\n", cpu_lines(60, 10, 11));
    let err = h.nodes[&2].router.write_lines("db", &bad, p, 0).await.unwrap_err();
    assert!(matches!(err, ebb_node::cluster::RouteError::Rejected(_)), "{err}");

    // Kill a node: every shard keeps a quorum (2 of 3), writes go on through the others.
    h.stop(2).await;
    let s = h.nodes[&0].router.write_lines("db", &cpu_lines(60, 10, 20), p, 0).await.unwrap();
    assert_eq!(s.rows, 600);
    wait_rows(&h, &expected(60, 20, 4)).await;
    // It comes back and catches up.
    h.start(2, &[]).await;
    wait_rows(&h, &expected(60, 20, 4)).await;
    for i in h.nodes.keys().copied().collect::<Vec<_>>() {
        h.stop(i).await;
    }
}

pub(crate) async fn sql(h: &Harness, i: usize, q: &str) -> String {
    h.watchdog.step(format!("node {i}: {q}"));
    let s = ebb_query::SqlSession::on(h.nodes[&i].router.clone(), h.nodes[&i].meta.clone(), "db");
    let b = s.query(q).await.unwrap_or_else(|e| panic!("{q}: {e}"));
    datafusion::arrow::util::pretty::pretty_format_batches(&b).unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sql_on_any_node_reads_and_deletes_across_every_shard() {
    let mut h = Harness::new();
    h.start(0, &[]).await;
    h.start(1, &[0]).await;
    h.start(2, &[0]).await;
    wait_settled(&h, 3).await;
    let p = ebb_query::lp::Precision::Seconds;
    h.nodes[&0].router.write_lines("db", &cpu_lines(60, 0, 10), p, 0).await.unwrap();

    let all = sql(&h, 1, "SELECT count(*) AS n FROM cpu").await;
    assert!(all.contains("| 600 |"), "{all}");
    let by_dc =
        sql(&h, 2, "SELECT dc, count(*) AS n, sum(v) AS s FROM cpu GROUP BY dc ORDER BY dc").await;
    assert!(
        by_dc.contains("| d0 | 200 | 900.0 |") && by_dc.contains("| d2 | 200 | 900.0 |"),
        "{by_dc}"
    );
    let one = sql(
        &h,
        0,
        "SELECT count(*) AS n FROM cpu WHERE host = 'h5' AND time >= '1970-01-01T00:16:45Z'",
    )
    .await;
    assert!(one.contains("| 5 |"), "{one}");

    // A delete runs on every shard (one log entry each) and reports, per shard, the rows it
    // removed and its ledger id there.
    let s = ebb_query::SqlSession::on(h.nodes[&2].router.clone(), h.nodes[&2].meta.clone(), "db");
    let del = s.query("DELETE FROM cpu WHERE time < '1970-01-01T00:16:45Z'").await.unwrap();
    let removed: u64 = del
        .iter()
        .map(|b| {
            let i = b.schema().index_of("rows_deleted").unwrap();
            datafusion::arrow::compute::sum(
                b.column(i)
                    .as_any()
                    .downcast_ref::<datafusion::arrow::array::UInt64Array>()
                    .unwrap(),
            )
            .unwrap_or(0)
        })
        .sum();
    assert_eq!(removed, 300);
    assert_eq!(del.iter().map(|b| b.num_rows()).sum::<usize>(), 4, "one row per shard");
    let left = sql(&h, 0, "SELECT count(*) AS n, min(v) AS lo FROM cpu").await;
    assert!(left.contains("| 300 | 5.0 |"), "{left}");

    // A column only some shards have reads as NULL elsewhere.
    h.nodes[&1]
        .router
        .write_lines("db", "cpu,host=h1,dc=d1 v=1,extra=7i 3000\n", p, 0)
        .await
        .unwrap();
    let extra = sql(&h, 2, "SELECT host, extra FROM cpu WHERE extra IS NOT NULL").await;
    assert!(extra.contains("| h1   | 7     |"), "{extra}");

    // Placement as SQL.
    let nodes =
        sql(&h, 0, "SELECT id, state, metadata_role, replicas FROM system.nodes ORDER BY id").await;
    assert!(nodes.contains("| 3  | active |") && nodes.contains("| 4        |"), "{nodes}");
    let shards =
        sql(&h, 1, "SELECT shard, replicas, moving FROM system.shards ORDER BY shard").await;
    assert!(shards.contains("| 4     | 1,2,3    | false  |"), "{shards}");
    let leaders =
        sql(&h, 2, "SELECT count(*) AS n FROM system.shards WHERE leader IS NOT NULL").await;
    assert!(leaders.contains("| 4 |"), "{leaders}");
    // Each shard leader's KiWi+ layout: the tables have the default retention, so h > 1 from
    // level 1 on every shard.
    let layout = sql(
        &h,
        0,
        "SELECT count(DISTINCT shard) AS s, min(reason) AS r FROM system.layout \
                             WHERE level = 1 AND tile_pages > 1",
    )
    .await;
    assert!(layout.contains("| 4 | time-series default |"), "{layout}");

    // The newest row per group: each shard sends its first row per group only, and the
    // cluster's answer is the first of those.
    h.nodes[&1].router.write_lines("db", "cpu,host=h4,dc=d1 v=77 4000\n", p, 0).await.unwrap();
    let newest = "SELECT DISTINCT ON (dc) dc, host, time, v FROM cpu ORDER BY dc, time DESC";
    let got = sql(&h, 2, newest).await;
    for row in ["| d0 | h", "| d1 | h4   | 1970-01-01T01:06:40 | 77.0 |", "| d2 | h"] {
        assert!(got.contains(row), "{row} not in {got}");
    }
    assert!(got.contains("00:16:49 | 9.0  |") && got.lines().count() == 7, "{got}");
    let state =
        ebb_query::SqlSession::on(h.nodes[&2].router.clone(), h.nodes[&2].meta.clone(), "db");
    let plan = state.context().state().create_logical_plan(newest).await.unwrap();
    let plan = state.context().state().optimize(&plan).unwrap();
    let mut pushed = false;
    datafusion::common::tree_node::TreeNode::apply(&plan, |p| {
        if let datafusion::logical_expr::LogicalPlan::TableScan(t) = p {
            let provider = datafusion::datasource::source_as_provider(&t.source).unwrap();
            pushed |= provider
                .downcast_ref::<ebb_query::sql::ShardTable>()
                .is_some_and(|t| t.newest_only());
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    })
    .unwrap();
    assert!(pushed, "the scan should ask the shards for their newest rows");

    // With a node down, every shard still has a leader and a quorum.
    h.stop(1).await;
    let n = sql(&h, 0, "SELECT count(*) AS n FROM cpu").await;
    assert!(n.contains("| 302 |"), "{n}");
    for i in h.nodes.keys().copied().collect::<Vec<_>>() {
        h.stop(i).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_table_on_some_shards_only_reads_from_those() {
    let mut h = Harness::new();
    h.start(0, &[]).await;
    wait_settled(&h, 1).await;
    let p = ebb_query::lp::Precision::Seconds;
    // One series: one shard has the table, the other three never heard of it.
    h.nodes[&0].router.write_lines("db", "solo,host=a v=1 1000\n", p, 0).await.unwrap();
    let one = sql(&h, 0, "SELECT host, v FROM solo").await;
    assert!(one.contains("| a    | 1.0 |"), "{one}");
    let s = ebb_query::SqlSession::on(h.nodes[&0].router.clone(), h.nodes[&0].meta.clone(), "db");
    let err = s.query("SELECT * FROM nowhere").await.unwrap_err().to_string();
    assert_eq!(err, "table db.nowhere does not exist");
    h.stop(0).await;
}

/// Waits until node `id` is removed from the metadata and no shard is placed on it.
async fn wait_removed(h: &Harness, id: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v = h.nodes[&0].meta.view();
        let gone = v.nodes[&id].state == ebb_node::cluster::view::NodeState::Removed
            && !v.shards.values().any(|s| s.involves(id));
        if gone {
            return;
        }
        assert!(Instant::now() < deadline, "node {id} was not drained: {:?}", v.shards);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_decommissioned_node_is_drained_and_leaves() {
    let mut h = Harness::new();
    h.start(0, &[]).await;
    for i in 1..4 {
        h.start(i, &[0]).await;
    }
    wait_settled(&h, 3).await;
    let p = ebb_query::lp::Precision::Seconds;
    h.nodes[&2].router.write_lines("db", &cpu_lines(60, 0, 5), p, 0).await.unwrap();
    let victim = h.nodes[&3].id;
    // Through a node that may not lead the metadata group: it forwards to the leader.
    ebb_node::cluster::decommission(&h.nodes[&1].meta, victim).await.unwrap();
    wait_removed(&h, victim).await;
    // Every shard is back on three nodes, none of them the drained one, with all its rows.
    h.wait("the drained node closed its replicas and left the metadata group", |n| {
        if n.id == victim {
            return n.shards.ids().is_empty();
        }
        !n.meta
            .raft()
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .nodes()
            .any(|(id, _)| *id == victim)
    })
    .await;
    // The node that left takes no more requests, and says why.
    let left = h.nodes[&3].router.write_lines("db", &cpu_lines(1, 0, 1), p, 0).await;
    let refused = left.expect_err("a node that left takes no writes").to_string();
    assert!(refused.contains("decommissioned and has left the cluster"), "{refused}");
    assert!(h.nodes[&3].router.left().is_some());
    h.stop(3).await;
    wait_settled(&h, 3).await;
    wait_rows(&h, &expected(60, 5, 4)).await;
    for i in h.nodes.keys().copied().collect::<Vec<_>>() {
        h.stop(i).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_that_lost_its_data_rejoins_under_a_new_id() {
    let mut h = Harness::new();
    h.start(0, &[]).await;
    for i in 1..4 {
        h.start(i, &[0]).await;
    }
    wait_settled(&h, 3).await;
    let p = ebb_query::lp::Precision::Seconds;
    h.nodes[&1].router.write_lines("db", &cpu_lines(60, 0, 5), p, 0).await.unwrap();
    // A node loses its volume and comes back at the same address (a rescheduled pod).
    let old = h.nodes[&3].id;
    h.stop(3).await;
    std::fs::remove_dir_all(h.dir.path().join("n3")).unwrap();
    h.start(3, &[0]).await;
    let new = h.nodes[&3].id;
    assert_ne!(new, old, "an empty node must not take over the id whose replicas it lost");
    wait_removed(&h, old).await;
    wait_settled(&h, 3).await;
    wait_rows(&h, &expected(60, 5, 4)).await;
    for i in h.nodes.keys().copied().collect::<Vec<_>>() {
        h.stop(i).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scale_out_from_three_to_five_under_writes_and_deletes_loses_nothing() {
    let mut h = Harness::new();
    h.start(0, &[]).await;
    h.start(1, &[0]).await;
    h.start(2, &[0]).await;
    wait_settled(&h, 3).await;
    let router = h.nodes[&0].router.clone();
    let meta = h.nodes[&0].meta.clone();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (router, stop) = (router.clone(), stop.clone());
        tokio::spawn(async move {
            let p = ebb_query::lp::Precision::Seconds;
            let sql = ebb_query::SqlSession::on(router.clone(), meta, "db");
            let (mut points, mut deleted) = (0u32, 0u32);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || points < 20 {
                router.write_lines("db", &cpu_lines(60, points, points + 1), p, 0).await.unwrap();
                points += 1;
                if points % 5 == 0 {
                    // Delete one whole earlier point of every series.
                    let t = 1_000 + points - 3;
                    let q = format!("DELETE FROM cpu WHERE time = to_timestamp_seconds({t})");
                    sql.query(&q).await.unwrap();
                    deleted += 1;
                }
            }
            (points, deleted)
        })
    };
    h.start(3, &[0]).await;
    h.start(4, &[1]).await;
    wait_settled(&h, 3).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (points, deleted) = writer.await.unwrap();
    assert!(deleted > 0);
    let want = 60 * (points - deleted) as usize;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // Replicas of every shard agree, and the total is exact.
        let per_shard = try_rows_per_shard(&h).await;
        if per_shard.as_ref().is_ok_and(|p| p.values().sum::<usize>() == want) {
            break;
        }
        assert!(Instant::now() < deadline, "{per_shard:?}, want {want} rows in total");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let total = sql(&h, 4, "SELECT count(*) AS n FROM cpu").await;
    assert!(total.contains(&format!("| {want} ")), "{total}, want {want}");

    // Lose a node: a node that holds only some shards still reaches every shard's leader,
    // whichever replica it asks first.
    h.stop(1).await;
    let p = ebb_query::lp::Precision::Seconds;
    let s = h.nodes[&4].router.write_lines("db", &cpu_lines(60, 500, 502), p, 0).await.unwrap();
    assert_eq!(s.rows, 120);
    let total = sql(&h, 3, "SELECT count(*) AS n FROM cpu").await;
    assert!(total.contains(&format!("| {} ", want + 120)), "{total}");
    for i in h.nodes.keys().copied().collect::<Vec<_>>() {
        h.stop(i).await;
    }
}
