//! Shard splits on a three-node cluster: `ALTER CLUSTER SPLIT SHARD` while writes go on and a
//! `DELETE` and an `ERASE` with a deadline run. No write fails, no row is lost, counted twice
//! or brought back; the erasure is persisted on every replica of both halves by its deadline
//! and no file on any node holds the erased values; each half ends holding only its own
//! series. And a split whose nodes are restarted midway completes.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cluster_erasure::{files_with, lines};
use crate::common::{loopback, start_cluster, Http, BASE};
use ebb_node::config::Config;
use ebb_query::model::hashspace::series_hash;

fn config(dir: &Path) -> Config {
    Config {
        shards: 2,
        replication: 3,
        delete_deadline: Some(Duration::from_secs(3600)),
        ..loopback(dir)
    }
}

/// Waits until `sql` on `h` answers JSON rows for which `done` holds; returns them.
async fn until_rows(
    h: &Http,
    sql: &str,
    secs: u64,
    done: impl Fn(&[serde_json::Value]) -> bool,
) -> Vec<serde_json::Value> {
    let start = Instant::now();
    loop {
        let (status, body) = h.sql(sql);
        if status == 200 {
            let rows: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap_or_default();
            if done(&rows) {
                return rows;
            }
        }
        assert!(start.elapsed() < Duration::from_secs(secs), "{sql}: {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until the cluster has `n` shards, each with a leader, none moving or mid-split.
async fn settled(h: &Http, n: usize, secs: u64) -> Vec<serde_json::Value> {
    let q =
        "SELECT shard, leader, split, hash_lo, hash_end, root FROM system.shards ORDER BY shard";
    until_rows(h, q, secs, |rows| {
        rows.len() == n && rows.iter().all(|r| !r["leader"].is_null() && r["split"].is_null())
    })
    .await
}

/// Rows per user, summed over the cluster.
fn per_user(h: &Http) -> BTreeMap<String, u64> {
    let v = h.json("SELECT user, count(*) AS c FROM temp GROUP BY user");
    v.as_array()
        .expect("rows")
        .iter()
        .map(|r| (r["user"].as_str().unwrap_or("").to_string(), r["c"].as_u64().unwrap_or(0)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_split_under_writes_deletes_and_an_erasure_loses_and_resurrects_nothing() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("tempdir")).collect();
    let servers = start_cluster(&dirs, config).await;
    let hs: Vec<Http> = servers.iter().map(|s| Http::new(s.http_addr)).collect();
    settled(&hs[0], 2, 60).await;
    let held = |i: usize| servers[i].cluster().expect("cluster").shards.ids().len();
    crate::common::until(60, "every node holds both shards", || (0..3).all(|i| held(i) == 2));

    // The user to erase has all of its series on the shard that splits (root 0 of 2).
    let root0 = |u: &str| {
        (0..3).all(|d| {
            let dev = format!("d{d}");
            series_hash("temp", &[("user", u), ("device", dev.as_str())]).is_multiple_of(2)
        })
    };
    let gone = (0..200).map(|i| format!("e{i}")).find(|u| root0(u)).expect("a user on root 0");
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    let users: Vec<String> = (0..10).map(|u| format!("u{u}")).chain([gone.clone()]).collect();
    for (i, u) in users.iter().enumerate() {
        let body = lines(u, 0, 100);
        *want.entry(u.clone()).or_default() += body.lines().count() as u64;
        let (status, b) = hs[i % 3].post("/write?db=public", &body);
        assert_eq!(status, 204, "{b}");
    }
    // Writers of users 1..=9 go on throughout; every write must succeed.
    let stop = Arc::new(AtomicBool::new(false));
    let batches = Arc::new(AtomicU64::new(0));
    let writer = {
        let (stop, batches, addr) = (stop.clone(), batches.clone(), servers[1].http_addr);
        std::thread::spawn(move || {
            let h = Http::new(addr);
            let mut written: BTreeMap<String, u64> = BTreeMap::new();
            let mut p = 100;
            while !stop.load(Ordering::Relaxed) {
                for u in 1..10 {
                    let body = lines(&format!("u{u}"), p, p + 2);
                    let (status, b) = h.post("/write?db=public", &body);
                    assert_eq!(status, 204, "a write failed during the split: {b}");
                    *written.entry(format!("u{u}")).or_default() += body.lines().count() as u64;
                }
                batches.fetch_add(1, Ordering::Relaxed);
                p += 2;
            }
            written
        })
    };
    while batches.load(Ordering::Relaxed) < 3 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let v = hs[2].json("ALTER CLUSTER SPLIT SHARD 1");
    assert_eq!(v[0]["shard"], 1, "{v}");
    let child = v[0]["new_shard"].as_u64().expect("new shard");
    assert_eq!(child, 3);
    // A second split of the same shard is refused while this one runs.
    let (status, body) = hs[0].sql("ALTER CLUSTER SPLIT SHARD 1");
    assert_eq!(status, 400, "{body}");
    // A delete and an erasure while the split runs.
    let cut = BASE + 50 * 1_000_000_000;
    let d = hs[0]
        .json(&format!("DELETE FROM temp WHERE user = 'u5' AND time < to_timestamp_nanos({cut})"));
    assert!(d.as_array().is_some_and(|a| !a.is_empty()), "{d}");
    *want.get_mut("u5").expect("u5") -= 150;
    let e = hs[1].json(&format!("ERASE WHERE user = '{gone}' DEADLINE '30s'"));
    let erased: u64 =
        e.as_array().expect("rows").iter().map(|r| r["rows_erased"].as_u64().unwrap_or(0)).sum();
    assert!(erased >= 300, "{e}");
    let erasure = e[0]["erasure_id"].as_u64().expect("erasure id");
    want.remove(&gone);

    // While the split runs, rows written before it are each read once, whatever the
    // routing of the moment: before the switch, between it and the trims, after.
    let mut fixed: BTreeMap<String, u64> =
        (0..10).map(|u| (format!("u{u}"), if u == 5 { 150 } else { 300 })).collect();
    fixed.remove(&gone);
    let early = format!(
        "SELECT user, count(*) AS c FROM temp WHERE time < to_timestamp_nanos({}) GROUP BY user",
        BASE + 100 * 1_000_000_000
    );
    let state = "SELECT split FROM system.shards WHERE shard = 3";
    let (mut looks, mut trimming) = (0, 0);
    let start = Instant::now();
    loop {
        let phase = hs[looks % 3].json(state);
        let phase = phase.get(0).map(|r| r["split"].clone()).unwrap_or_default();
        let v = hs[looks % 3].json(&early);
        let seen: BTreeMap<String, u64> = v
            .as_array()
            .expect("rows")
            .iter()
            .map(|r| (r["user"].as_str().unwrap_or("").to_string(), r["c"].as_u64().unwrap_or(0)))
            .collect();
        assert_eq!(seen, fixed, "rows read during the split ({phase})");
        looks += 1;
        trimming += usize::from(phase == "trimming");
        if phase.is_null() && looks > 1 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(120), "the split did not complete");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(trimming > 0, "some reads ran after the switch and before the trims");

    // The split completes: three shards routed, both halves trimmed.
    let shards = settled(&hs[0], 3, 120).await;
    let one = &shards[0];
    let three = shards.iter().find(|r| r["shard"] == child).expect("the new shard");
    assert_eq!(one["hash_end"], three["hash_lo"], "the halves meet: {shards:?}");
    assert!(one["hash_end"].as_u64().is_some() && three["hash_end"].is_null(), "{shards:?}");
    assert_eq!(one["root"], three["root"]);

    stop.store(true, Ordering::Relaxed);
    let written = writer.join().expect("writer");
    for (u, n) in written {
        *want.entry(u).or_default() += n;
    }
    // Every acknowledged row once, through every node; nothing deleted or erased came back.
    for h in &hs {
        assert_eq!(per_user(h), want);
        assert_eq!(h.count(&format!("SELECT count(*) AS c FROM temp WHERE user = 'u5' AND time < to_timestamp_nanos({cut})")), 0);
    }
    // Each half holds only its own series: rows on shard 1 and 3 add up to the rows of root 0.
    let total: u64 = want.values().sum();
    let by_shard = |s: u64| -> u64 {
        servers[0].cluster().expect("cluster").shards.get(s).map_or(0, |sh| {
            let db = sh.db.clone();
            let t = db.catalog().table("public", "temp");
            t.map_or(0, |t| db.catalog().with_series(t.id, |idx| idx.len() as u64))
        })
    };
    let series: u64 = [1, 2, child].iter().map(|s| by_shard(*s)).sum();
    assert_eq!(series, 30, "30 series (10 users x 3 devices) held once over the shards");
    assert!(total > 0);

    // The erasure is persisted on every replica of every shard that held the user, the new
    // shard among them, before its deadline.
    let q = format!(
        "SELECT shard, node, status, CAST(persisted_at AS BIGINT) AS p, \
         CAST(deadline AS BIGINT) AS d FROM system.deletions WHERE id = {erasure}"
    );
    let rows = until_rows(&hs[0], &q, 60, |rows| {
        assert!(rows.iter().all(|r| r["status"] != "late"), "late: {rows:?}");
        !rows.is_empty() && rows.iter().all(|r| r["status"] == "persisted")
    })
    .await;
    let mut replicas: BTreeMap<u64, usize> = BTreeMap::new();
    for r in &rows {
        *replicas.entry(r["shard"].as_u64().expect("shard")).or_default() += 1;
        assert!(r["p"].as_i64() <= r["d"].as_i64(), "persisted after its deadline: {r}");
    }
    assert!(replicas.contains_key(&child), "the new shard's replicas: {rows:?}");
    assert!(replicas.values().all(|n| *n == 3), "every replica: {rows:?}");
    // Each half's trim is a delete request of its own, on every replica, with a deadline.
    let trims = hs[0].json(
        "SELECT shard, count(*) AS n FROM system.deletions WHERE kind = 'trim' GROUP BY shard",
    );
    let trimmed: BTreeMap<u64, u64> = trims
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| (r["shard"].as_u64().unwrap_or(0), r["n"].as_u64().unwrap_or(0)))
        .collect();
    assert_eq!(trimmed, BTreeMap::from([(1, 3), (child, 3)]), "{trims}");
    for d in &dirs {
        let left = files_with(d.path(), format!("secret-{gone}-").as_bytes());
        assert!(left.is_empty(), "erased values still in {left:?}");
    }
    for s in servers {
        s.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_split_completes_when_its_leaders_are_killed_midway() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("tempdir")).collect();
    let mut servers = start_cluster(&dirs, config).await;
    let hs: Vec<Http> = servers.iter().map(|s| Http::new(s.http_addr)).collect();
    settled(&hs[0], 2, 60).await;
    let held = |s: &[ebb_node::server::Server], i: usize| {
        s[i].cluster().expect("cluster").shards.ids().len()
    };
    crate::common::until(60, "every node holds both shards", || {
        (0..3).all(|i| held(&servers, i) == 2)
    });
    let mut total = 0;
    for u in 0..6 {
        let body = lines(&format!("u{u}"), 0, 50);
        total += body.lines().count() as u64;
        assert_eq!(hs[u % 3].post("/write?db=public", &body).0, 204);
    }
    // The node leading the metadata group (it carries the split out) and the one leading
    // shard 1 (it proposes the split entry) are stopped right after the split is planned.
    let leaders = hs[1].json("SELECT id, metadata_role FROM system.nodes");
    let meta_leader =
        leaders.as_array().expect("rows").iter().find(|r| r["metadata_role"] == "leader");
    let meta_node = meta_leader.and_then(|r| r["id"].as_u64()).expect("a metadata leader");
    let shard_leader = hs[1].json("SELECT leader FROM system.shards WHERE shard = 1")[0]["leader"]
        .as_u64()
        .expect("shard 1 leader");
    let v = hs[2].json("ALTER CLUSTER SPLIT SHARD 1");
    assert_eq!(v[0]["new_shard"], 3, "{v}");
    let ids: Vec<u64> =
        servers.iter().map(|s| s.cluster().expect("cluster").id).collect::<Vec<_>>();
    let mut stopped = Vec::new();
    for (i, id) in ids.iter().enumerate().rev() {
        if *id == meta_node || *id == shard_leader {
            let s = servers.remove(i);
            let addr = s.grpc_addr;
            s.shutdown().await.expect("shutdown");
            stopped.push((i, addr));
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (i, addr) in stopped.iter().rev() {
        // Back on the same directory (its stored node id and cluster) and gRPC address.
        let seed = servers[0].grpc_addr.to_string();
        let cfg = Config { grpc_addr: *addr, join: vec![seed], ..config(dirs[*i].path()) };
        let s = ebb_node::server::Server::start(&cfg).await.expect("restart");
        servers.insert((*i).min(servers.len()), s);
    }
    let hs: Vec<Http> = servers.iter().map(|s| Http::new(s.http_addr)).collect();
    settled(&hs[0], 3, 180).await;
    for h in &hs {
        assert_eq!(h.count("SELECT count(*) AS c FROM temp"), total);
    }
    // The split shard takes writes on both halves.
    let body = lines("late", 0, 40);
    assert_eq!(hs[0].post("/write?db=public", &body).0, 204);
    assert_eq!(hs[1].count("SELECT count(*) AS c FROM temp"), total + 120);
    for s in servers {
        s.shutdown().await.expect("shutdown");
    }
}
