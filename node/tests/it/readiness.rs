//! Starting cluster nodes: a node is ready (`/ready`, `system.nodes`) once it has joined and its
//! replicas have caught up; a node that restarts cut off from the others while they took
//! writes stays not ready, saying why, until it has caught up again. An initial node whose
//! volume was lost joins the cluster its seeds serve, even one without a quorum just then,
//! instead of creating a second cluster.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use crate::cluster_harness::Harness;

async fn wait_ready(h: &Harness, i: usize, limit: Duration) {
    let start = Instant::now();
    loop {
        let r = h.nodes[&i].router.health().get();
        if r.is_ready() {
            return;
        }
        assert!(start.elapsed() < limit, "node {i} not ready within {limit:?}: {:?}", r.reasons);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Three nodes (the first created the cluster), each ready.
async fn three_ready_nodes() -> Harness {
    let mut h = Harness::new();
    h.start(0, &[]).await;
    h.start(1, &[0]).await;
    h.start(2, &[0]).await;
    for i in 0..3 {
        wait_ready(&h, i, Duration::from_secs(60)).await;
    }
    h
}

/// One row in each of 40 series (spread over every shard) at second `t`.
fn lines(t: u64) -> String {
    (0..40).map(|s| format!("cpu,host=h{s} v={t} {t}\n")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_is_ready_only_once_its_replicas_have_caught_up() {
    let mut h = three_ready_nodes().await;
    let p = ebb_query::lp::Precision::Seconds;
    h.nodes[&0].router.write_lines("db", &lines(0), p, 0).await.unwrap();
    // Node 2 goes down; the others take more than MAX_LAG entries on every shard.
    let id2 = h.nodes[&2].id;
    let others: Vec<u64> = [0, 1].iter().map(|i| h.nodes[i].id).collect();
    h.stop(2).await;
    let writes = ebb_node::health::MAX_LAG + 200;
    for t in 1..=writes {
        h.nodes[&(t as usize % 2)].router.write_lines("db", &lines(t), p, 0).await.unwrap();
    }
    // It restarts cut off from them: it cannot catch up, and says so.
    h.faults.isolate(id2, &others);
    h.start(2, &[0]).await;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(4) {
        let r = h.nodes[&2].router.health().get();
        assert!(!r.is_ready(), "ready while cut off and behind");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let reasons = h.nodes[&2].router.health().get().reasons;
    assert!(reasons.iter().any(|r| r.contains("shard") || r.contains("metadata")), "{reasons:?}");
    // The others report it in system.nodes.
    let nodes = crate::cluster::sql(&h, 0, "SELECT id, ready, not_ready FROM system.nodes").await;
    assert!(nodes.contains("false"), "{nodes}");
    // Healed, it catches up and becomes ready; its replicas then hold every row.
    h.faults.heal();
    wait_ready(&h, 2, Duration::from_secs(60)).await;
    for s in h.nodes[&2].router.shards().all() {
        let leader = s.group.raft.metrics().borrow().current_leader;
        let applied = s.group.raft.metrics().borrow().last_applied.map_or(0, |l| l.index);
        assert!(leader.is_some() && applied > writes / 4, "shard {}: applied {applied}", s.id);
    }
    // Every node reports itself ready (asked with a one-second limit: a busy machine may miss
    // it now and then, so this polls).
    let start = Instant::now();
    loop {
        let q = "SELECT id, ready, not_ready FROM system.nodes WHERE NOT ready";
        let nodes = crate::cluster::sql(&h, 1, q).await;
        if !nodes.contains("false") {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{nodes}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_empty_initial_node_joins_the_cluster_its_seeds_serve() {
    let mut h = three_ready_nodes().await;
    let id_file =
        |i: usize, f: &str| std::fs::read_to_string(h.dir.path().join(format!("n{i}/{f}")));
    let cluster = id_file(1, "cluster_id").unwrap();
    let old = h.nodes[&0].id;
    // The initial node loses its volume while another node is down: the one left serves the
    // cluster but has no quorum, so it cannot take the node in.
    h.stop(0).await;
    h.stop(2).await;
    std::fs::remove_dir_all(h.dir.path().join("n0")).unwrap();
    let (cfg, listener) = h.prepare(0, &[1, 2], true).await;
    let faults = h.faults.clone();
    let starting =
        tokio::spawn(
            async move { ebb_node::cluster::ClusterNode::start(&cfg, listener, faults).await },
        );
    // Past the initial node's probe: it has not created a cluster of its own.
    tokio::time::sleep(ebb_node::cluster::INIT_PROBE + Duration::from_secs(3)).await;
    assert!(!starting.is_finished(), "the initial node gave up on its seeds");
    let dir = h.dir.path().join("n0");
    assert!(!dir.join("node_id").exists(), "the initial node created a cluster of its own");
    // The other node comes back: quorum, and the initial node joins under a new id.
    h.start(2, &[1]).await;
    let node = tokio::time::timeout(Duration::from_secs(120), starting).await.unwrap().unwrap();
    let node = node.unwrap();
    assert_ne!(node.id, old, "an empty node must not take over its lost id");
    assert_eq!(std::fs::read_to_string(dir.join("cluster_id")).unwrap(), cluster);
    h.nodes.insert(0, node);
    wait_ready(&h, 0, Duration::from_secs(60)).await;
    for i in h.nodes.keys().copied().collect::<Vec<_>>() {
        h.stop(i).await;
    }
}
