//! Rollups on a three-node cluster: created on every shard by one statement, filled from the
//! rows already written, read through any node as the same aggregate computed from the
//! source (partials merged across shards), kept up to date through late writes, a `DELETE`
//! and an `ERASE` whose one request also erases the rollup's partials of the erased user, and
//! still read once per series after a shard split.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{loopback, start_cluster, until, Http, BASE};
use ebb_node::config::Config;

const M: i64 = 60_000_000_000;
const CREATE: &str = "CREATE MATERIALIZED VIEW cpu_10m AS SELECT date_bin(INTERVAL '10 minutes', \
                      time) AS time, region, count(*) AS n, sum(v) AS total, min(v) AS lo, \
                      max(v) AS hi, avg(v) AS mean FROM cpu GROUP BY 1, region";
const ORACLE: &str = "SELECT date_bin(INTERVAL '10 minutes', time) AS time, region, count(*) AS \
                      n, sum(v) AS total, min(v) AS lo, max(v) AS hi, avg(v) AS mean FROM cpu \
                      GROUP BY 1, region ORDER BY 1, 2";
const READ: &str = "SELECT * FROM cpu_10m ORDER BY 1, 2";

fn config(dir: &Path) -> Config {
    Config {
        shards: 2,
        replication: 3,
        delete_deadline: Some(Duration::from_secs(3600)),
        ..loopback(dir)
    }
}

fn lines(users: std::ops::Range<usize>, minutes: std::ops::Range<i64>, salt: i64) -> String {
    let mut s = String::new();
    for u in users {
        for m in minutes.clone() {
            let region = ["eu", "us", "ap"][u % 3];
            let v = (u as i64 * 13 + m * 7 + salt) % 41;
            s.push_str(&format!("cpu,user=u{u},region={region} v={v} {}\n", BASE + m * M));
        }
    }
    s
}

/// Waits until the rollup read through `h` equals the oracle; returns its rows.
fn converges(h: &Http, what: &str) -> serde_json::Value {
    converges_to(h, ORACLE, READ, what)
}

/// Waits until `read` through `h` answers what `oracle` does; returns its rows.
fn converges_to(h: &Http, oracle: &str, read: &str, what: &str) -> serde_json::Value {
    let start = Instant::now();
    loop {
        let (want, got) = (h.json(oracle), h.sql(read));
        if got.0 == 200
            && serde_json::from_str::<serde_json::Value>(&got.1).ok() == Some(want.clone())
        {
            return want;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{what}: the rollup never matched its source\nwant {want}\ngot {}",
            got.1
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rollups_on_a_cluster_follow_deletes_erasure_and_splits() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("tempdir")).collect();
    let servers = start_cluster(&dirs, config).await;
    let hs: Vec<Http> = servers.iter().map(|s| Http::new(s.http_addr)).collect();
    tokio::task::spawn_blocking(move || {
        until(60, "the cluster ready", || hs[0].get("/ready").0 == 200);
        assert_eq!(hs[0].post("/write?db=public", &lines(0..9, 0..60, 0)).0, 204);
        hs[1].json(CREATE);
        let first = converges(&hs[2], "backfill");
        assert_eq!(first.as_array().map(Vec::len), Some(7 * 3), "{first}");

        // A source that only one shard holds when its rollup is created: the other shards get
        // the table and the rollup too, so series written to them later are rolled up.
        assert_eq!(hs[0].post("/write?db=public", &format!("solo,dev=a v=1 {BASE}\n")).0, 204);
        hs[1].json(
            "CREATE MATERIALIZED VIEW solo_1h AS SELECT date_bin(INTERVAL '1 hour', time) AS \
             time, count(*) AS n FROM solo GROUP BY 1",
        );
        let more: String = (0..40).map(|u| format!("solo,dev=d{u} v=2 {BASE}\n")).collect();
        assert_eq!(hs[2].post("/write?db=public", &more).0, 204);
        let solo = converges_to(
            &hs[0],
            "SELECT date_bin(INTERVAL '1 hour', time) AS time, count(*) AS n FROM solo GROUP BY 1",
            "SELECT * FROM solo_1h",
            "a source on one shard",
        );
        assert_eq!(solo[0]["n"], 41, "{solo}");

        // Late data, replaced points and new series.
        assert_eq!(hs[2].post("/write?db=public", &lines(0..12, 55..70, 5)).0, 204);
        converges(&hs[0], "late and replaced points");

        // A delete cutting buckets in two.
        let del = format!(
            "DELETE FROM cpu WHERE user = 'u4' AND time >= to_timestamp_nanos({}) AND time < \
             to_timestamp_nanos({})",
            BASE + 13 * M,
            BASE + 47 * M
        );
        hs[0].json(&del);
        converges(&hs[1], "a delete");

        // The erasure of u2 removes its rows and its rollup partials (one per series and
        // bucket) under one request.
        let rows = hs[0].count("SELECT count(*) AS c FROM cpu WHERE user = 'u2'");
        let partials = hs[0].count(
            "SELECT count(*) AS c FROM (SELECT DISTINCT region, date_bin(INTERVAL '10 minutes', \
             time) FROM cpu WHERE user = 'u2')",
        );
        let e = hs[1].json("ERASE WHERE user = 'u2' DEADLINE '30s'");
        let answers = e.as_array().expect("rows");
        let sum = |c: &str| answers.iter().map(|r| r[c].as_u64().unwrap_or(0)).sum::<u64>();
        assert_eq!(sum("rows_erased"), rows + partials, "source and rollup rows: {e}");
        assert_eq!(sum("tables"), 2, "{e}");
        let ids: std::collections::BTreeSet<u64> =
            answers.iter().filter_map(|r| r["erasure_id"].as_u64()).collect();
        assert_eq!(ids.len(), 1, "one erasure id: {e}");
        converges(&hs[2], "an erasure");

        // A split: the rollup's partials move with their source series, and are read once.
        let v = hs[2].json("ALTER CLUSTER SPLIT SHARD 1");
        let child = v[0]["new_shard"].as_u64().expect("new shard");
        until(120, "the split done", || {
            let q = "SELECT count(*) AS c FROM system.shards WHERE split IS NULL AND leader IS NOT NULL";
            hs[0].count(q) == 3
        });
        assert_eq!(hs[0].post("/write?db=public", &lines(0..12, 70..80, 9)).0, 204);
        converges(&hs[0], &format!("after splitting shard 1 into {child}"));
    })
    .await
    .expect("test");
}
