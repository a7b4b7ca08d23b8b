//! Leaders spread over the nodes: a cluster whose shards were all created (and led) on its
//! first node ends with every node leading its share, and writes keep working through it.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cluster::{sql, wait_settled};
use crate::cluster_harness::Harness;

/// Shards each node leads, as the node's own replicas see it (every node in the map).
fn led(h: &Harness) -> BTreeMap<u64, usize> {
    let mut out: BTreeMap<u64, usize> = h.nodes.values().map(|n| (n.id, 0)).collect();
    for n in h.nodes.values() {
        for s in n.shards.all() {
            if s.group.raft.metrics().borrow().current_leader == Some(n.id) {
                *out.entry(n.id).or_default() += 1;
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leaders_spread_over_the_nodes() {
    let mut h = Harness::new();
    h.settings.shards = 6;
    h.start(0, &[]).await;
    wait_settled(&h, 1).await;
    let first = h.nodes[&0].id;
    assert_eq!(led(&h)[&first], 6, "the first node leads every shard it made");
    h.start(1, &[0]).await;
    h.start(2, &[0]).await;
    wait_settled(&h, 3).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let l = led(&h);
        let (max, min) = (l.values().max().unwrap(), l.values().min().unwrap());
        if l.values().sum::<usize>() == 6 && max - min <= 1 {
            break; // 2, 2, 2
        }
        assert!(Instant::now() < deadline, "leaders did not spread: {l:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // `system.nodes` shows the load: two shards led and six replicas each, and their bytes;
    // `system.shards` each shard's span (all of its root: none has split).
    let q = "SELECT id, replicas, leaders, bytes IS NOT NULL AS b FROM system.nodes ORDER BY id";
    let t = sql(&h, 1, q).await;
    let rows: Vec<Vec<String>> = t
        .lines()
        .filter(|l| l.starts_with('|'))
        .skip(1)
        .map(|l| l.split('|').map(|c| c.trim().to_string()).filter(|c| !c.is_empty()).collect())
        .collect();
    assert_eq!(rows.len(), 3, "{t}");
    assert!(rows.iter().all(|r| r[1..] == ["6", "2", "true"]), "{t}");
    let t =
        sql(&h, 2, "SELECT shard, root, hash_lo, hash_end FROM system.shards ORDER BY shard").await;
    for s in 1..=6u64 {
        assert!(t.contains(&format!("| {s}     | {}    | 0       |          |", s - 1)), "{t}");
    }
    // Writes through every node still reach every shard.
    for (i, n) in &h.nodes {
        let body: String =
            (0..60).map(|s| format!("cpu,host=h{s} v={i} {}\n", 1_000 + i)).collect();
        n.router
            .write_lines("db", &body, ebb_query::lp::Precision::Seconds, 0)
            .await
            .unwrap_or_else(|e| panic!("write through node {i}: {e}"));
    }
    for i in h.nodes.keys().copied().collect::<Vec<_>>() {
        h.stop(i).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shard_over_its_size_limit_splits_by_itself() {
    let mut h = Harness::new();
    h.settings = ebb_node::cluster::view::Settings { shards: 1, replication: 1 };
    // A shard over 64 KiB splits: the one the cluster starts with, once written to.
    h.scaling.split_bytes = Some(64 << 10);
    h.scaling.split_rows_per_sec = None;
    h.start(0, &[]).await;
    wait_settled(&h, 1).await;
    let body: String =
        (0..20_000).map(|i| format!("cpu,host=h{} v={i} {}\n", i % 200, 1_000 + i)).collect();
    h.nodes[&0]
        .router
        .write_lines("db", &body, ebb_query::lp::Precision::Seconds, 0)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let t = sql(&h, 0, "SELECT count(*) AS n FROM system.shards WHERE split IS NULL").await;
        if t.contains("| 2 |") {
            break;
        }
        assert!(Instant::now() < deadline, "the shard did not split: {t}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let t = sql(&h, 0, "SELECT count(*) AS n, count(DISTINCT host) AS h FROM cpu").await;
    assert!(t.contains("| 20000 | 200 |"), "every row once after the split: {t}");
    h.stop(0).await;
}

/// Shards on every node and nothing moving, splitting or untrimmed.
async fn quiet(h: &Harness, shards: usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let t = sql(
            h,
            0,
            "SELECT count(*) AS n FROM system.shards WHERE split IS NULL AND NOT moving AND \
             leader IS NOT NULL",
        )
        .await;
        if t.contains(&format!("| {shards} |")) && crate::cluster::settled(h, 3) {
            return;
        }
        assert!(Instant::now() < deadline, "not settled: {t}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn splits_after_a_scale_out_under_writes_lose_nothing() {
    let mut h = Harness::new();
    h.start(0, &[]).await;
    h.start(1, &[0]).await;
    h.start(2, &[0]).await;
    wait_settled(&h, 3).await;
    let p = ebb_query::lp::Precision::Nanoseconds;
    let write = move |r: Arc<ebb_node::cluster::Router>, b: u64| async move {
        let body: String = (0..500)
            .map(|i| format!("cpu,host=h{} usage={i}.5 {}\n", (b * 7 + i) % 50, b * 1000 + i))
            .collect();
        r.write_lines("db", &body, p, 0).await.map(|_| 500u64)
    };
    let mut acked = 0;
    h.watchdog.step("writing 20 batches");
    for b in 0..20 {
        acked += write(h.nodes[&(b as usize % 3)].router.clone(), b).await.unwrap();
    }
    h.start(3, &[0]).await;
    h.start(4, &[0]).await;
    h.start(5, &[0]).await;
    quiet(&h, 4).await;
    let stop = Arc::new(AtomicBool::new(false));
    let routers: Vec<_> = (0..3).map(|i| h.nodes[&i].router.clone()).collect();
    let writer = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let (mut b, mut n) = (1000u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                n += write(routers[b as usize % 3].clone(), b).await.expect("a write failed");
                b += 1;
            }
            n
        })
    };
    for (shard, child) in [(1u64, 5u64), (2, 6)] {
        let q = format!("ALTER CLUSTER SPLIT SHARD {shard}");
        let s = ebb_query::SqlSession::on(
            h.nodes[&5].router.clone(),
            h.nodes[&5].meta.clone(),
            "public",
        );
        h.watchdog.step(&q);
        let out = s.execute(&q).await.unwrap();
        drop(out);
        quiet(&h, child as usize).await;
    }
    stop.store(true, Ordering::Relaxed);
    h.watchdog.step("stopping the writer");
    acked += writer.await.unwrap();
    for i in 0..6 {
        let t = sql(&h, i, "SELECT count(*) AS n FROM cpu").await;
        assert!(t.contains(&format!("| {acked} |")), "node {i}: {t} of {acked}");
    }
    for i in h.nodes.keys().copied().collect::<Vec<_>>() {
        h.stop(i).await;
    }
}
