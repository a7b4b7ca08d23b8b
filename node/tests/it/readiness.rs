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
    // A while later: it has not created a cluster of its own.
    tokio::time::sleep(Duration::from_secs(8)).await;
    if starting.is_finished() {
        // How it ended: an error, or a node that joined without a quorum to take it in.
        let ended = starting.await.map(|r| r.map(|n| n.id));
        panic!("the initial node gave up on its seeds: {ended:?}");
    }
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

/// The initial node creates the cluster only once every seed has said no cluster exists, and
/// with its volume lost while its peers are paused (they accept connections and answer nothing)
/// it waits for them, however long, then joins the cluster they serve.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_initial_node_creates_a_cluster_only_when_every_seed_says_none_exists() {
    let mut h = Harness::new();
    // Three empty nodes start together, each with the others as seeds; node 0 is the initial one.
    let mut prepared = Vec::new();
    for i in 0..3 {
        prepared.push(h.prepare(i, &[], i == 0).await);
    }
    let mut starting = Vec::new();
    for (i, (mut cfg, listener)) in prepared.into_iter().enumerate() {
        cfg.join = (0..3).filter(|j| *j != i).map(|j| h.addrs[&j].clone()).collect();
        let faults = h.faults.clone();
        starting.push(tokio::spawn(async move {
            ebb_node::cluster::ClusterNode::start(&cfg, listener, faults).await
        }));
    }
    for (i, s) in starting.into_iter().enumerate() {
        let node = tokio::time::timeout(Duration::from_secs(120), s).await.unwrap().unwrap();
        h.nodes.insert(i, node.unwrap_or_else(|e| panic!("node {i}: {e}")));
    }
    let id_file = |h: &Harness, i: usize, f: &str| {
        std::fs::read_to_string(h.dir.path().join(format!("n{i}/{f}"))).unwrap()
    };
    let cluster = id_file(&h, 0, "cluster_id");
    for i in 1..3 {
        assert_eq!(id_file(&h, i, "cluster_id"), cluster, "node {i} is in another cluster");
    }
    assert_eq!(h.nodes[&0].id, 1, "the initial node created the cluster");
    crate::cluster::wait_settled(&h, 3).await;

    // Node 0 loses its volume while nodes 1 and 2 are paused: their ports take connections
    // (the kernel's backlog) and answer nothing.
    h.stop(0).await;
    let paused: Vec<String> = (1..3).map(|i| h.addrs[&i].clone()).collect();
    h.stop(1).await;
    h.stop(2).await;
    let mut held = Vec::new();
    for a in &paused {
        held.push(tokio::net::TcpListener::bind(a).await.unwrap());
    }
    std::fs::remove_dir_all(h.dir.path().join("n0")).unwrap();
    let (cfg, listener) = h.prepare(0, &[1, 2], true).await;
    let faults = h.faults.clone();
    let restarting =
        tokio::spawn(
            async move { ebb_node::cluster::ClusterNode::start(&cfg, listener, faults).await },
        );
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert!(!restarting.is_finished(), "the initial node gave up on its silent seeds");
    assert!(
        !h.dir.path().join("n0/node_id").exists(),
        "the initial node created a cluster of its own beside the paused one"
    );
    // The peers resume: the initial node joins their cluster under a new id.
    drop(held);
    h.start(1, &[]).await;
    h.start(2, &[]).await;
    let node = tokio::time::timeout(Duration::from_secs(120), restarting).await.unwrap().unwrap();
    let node = node.unwrap();
    assert_ne!(node.id, 1, "an empty node must not take over its lost id");
    assert_eq!(id_file(&h, 0, "cluster_id"), cluster);
    h.nodes.insert(0, node);
    wait_ready(&h, 0, Duration::from_secs(60)).await;
    for i in h.nodes.keys().copied().collect::<Vec<_>>() {
        h.stop(i).await;
    }
}
