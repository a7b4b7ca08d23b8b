//! A shard directory left on a node the metadata places that shard elsewhere (the fork a
//! parent replica makes when it replays a split after the child moved away) is removed; one
//! of a shard the metadata does not know is left alone.

use std::time::Duration;

use crate::common::{loopback, start_cluster, until, Http};
use ebb_node::config::Config;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forks_of_shards_held_elsewhere_are_removed() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("tempdir")).collect();
    let servers =
        start_cluster(&dirs, |d| Config { shards: 4, replication: 2, ..loopback(d) }).await;
    let h = Http::new(servers[0].http_addr);
    tokio::task::spawn_blocking(move || {
        until(60, "the cluster ready", || h.get("/ready").0 == 200)
    })
    .await
    .expect("ready");
    // Replicas placed: two of each of the four shards, over the three nodes.
    let held = |i: usize| servers[i].cluster().expect("cluster").shards.ids();
    let start = std::time::Instant::now();
    while (0..3).map(|i| held(i).len()).sum::<usize>() != 8 {
        assert!(start.elapsed() < Duration::from_secs(60), "replicas never placed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let node = (0..3).find(|&i| held(i).len() < 4).expect("a node lacking a shard");
    let mine = held(node);
    let all: std::collections::BTreeSet<u64> = (0..3).flat_map(held).collect();
    let elsewhere = *all.iter().find(|s| !mine.contains(s)).expect("a shard it lacks");
    let stray = dirs[node].path().join(format!("shard-{elsewhere}"));
    let unknown = dirs[node].path().join("shard-9999");
    for d in [&stray, &unknown] {
        std::fs::create_dir_all(d.join("shard")).expect("mkdir");
        std::fs::write(d.join("shard").join("CURRENT"), b"MANIFEST-000001\n").expect("write");
    }
    let start = std::time::Instant::now();
    while stray.exists() {
        assert!(start.elapsed() < Duration::from_secs(20), "the stray fork stayed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(unknown.exists(), "a shard the metadata does not know is left alone");
    assert_eq!(held(node), mine, "held shards kept");
}
