//! GDPR erasure on a three-node cluster (every shard on every node) while writes go on: the
//! user's rows vanish from queries at once; every replica persists the erasure before its
//! deadline (engine files, WAL, Raft log and snapshots); `ebb audit verify` finds nothing on
//! any replica; and no file in any node's data directory, SST pages decompressed, holds any of
//! the user's marker values.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{loopback, start_cluster, Http, BASE};
use ebb_node::cli::audit::verify;
use ebb_node::config::Config;

fn config(dir: &Path) -> Config {
    Config {
        shards: 4,
        replication: 3,
        delete_deadline: Some(Duration::from_secs(3600)),
        ..loopback(dir)
    }
}

/// Lines for `user`, points `from..to`, each with a marker value naming the user and point.
pub(crate) fn lines(user: &str, from: i64, to: i64) -> String {
    let mut s = String::new();
    for p in from..to {
        for dev in 0..3 {
            let t = BASE + p * 1_000_000_000;
            s.push_str(&format!(
                "temp,user={user},device=d{dev} c={p}.5,note=\"secret-{user}-{dev}-{p}\" {t}\n"
            ));
        }
    }
    s
}

/// Files under `dir` (recursively) whose bytes, SST pages decompressed, contain `needle`.
pub(crate) fn files_with(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            // A file may be replaced while read (compaction): retry, then it must read.
            let mut text = None;
            for _ in 0..20 {
                match ebb_storage::audit::plaintext(&p) {
                    Ok(t) => {
                        text = Some(t);
                        break;
                    }
                    Err(_) if !p.exists() => break,
                    Err(_) => std::thread::sleep(Duration::from_millis(100)),
                }
            }
            let Some(text) = text else {
                assert!(!p.exists(), "cannot read {}", p.display());
                continue;
            };
            if text.windows(needle.len()).any(|w| w == needle) {
                out.push(p.display().to_string());
            }
        }
    }
    out
}

/// Waits until every node holds all four shards and each shard has a leader and is not moving.
async fn placement_settled(servers: &[ebb_node::server::Server], h: &Http) {
    let start = Instant::now();
    loop {
        let held = servers.iter().all(|s| s.cluster().expect("cluster").shards.ids().len() == 4);
        let (status, body) = h
            .sql("SELECT count(*) AS c FROM system.shards WHERE leader IS NOT NULL AND NOT moving");
        if held && status == 200 && body.contains("\"c\":4") {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "placement never settled: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn erasure_under_writes_is_persisted_everywhere_and_proven() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("tempdir")).collect();
    let servers = start_cluster(&dirs, config).await;
    let hs: Vec<Http> = servers.iter().map(|s| Http::new(s.http_addr)).collect();
    placement_settled(&servers, &hs[0]).await;

    // Ten users' data, then writes of the others go on throughout.
    let mut expected = 0;
    for u in 0..10 {
        let body = lines(&format!("u{u}"), 0, 100);
        expected += body.lines().count() as u64 * u64::from(u == 0);
        let (status, b) = hs[u as usize % 3].post("/write?db=public", &body);
        assert_eq!(status, 204, "{b}");
    }
    let marker = b"secret-u0-";
    let before: usize = dirs.iter().map(|d| files_with(d.path(), marker).len()).sum();
    assert!(before > 0, "the markers are on disk before the erasure (the check can see them)");
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let writer = {
        let (stop, written, addr) = (stop.clone(), written.clone(), servers[1].http_addr);
        std::thread::spawn(move || {
            let h = Http::new(addr);
            let mut p = 100;
            while !stop.load(Ordering::Relaxed) {
                let body = lines(&format!("u{}", 1 + p % 9), p, p + 5);
                let (status, b) = h.post("/write?db=public", &body);
                assert_eq!(status, 204, "{b}");
                written.fetch_add(1, Ordering::Relaxed);
                p += 5;
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };

    // The erasure, through another node, with a deadline far shorter than the configured one.
    let v = hs[2].json("ERASE WHERE user = 'u0' DEADLINE '30s'");
    let rows: u64 =
        v.as_array().expect("rows").iter().map(|r| r["rows_erased"].as_u64().unwrap_or(0)).sum();
    assert_eq!(rows, expected, "{v}");
    let id = v[0]["erasure_id"].as_u64().expect("erasure id");
    assert!(v.as_array().expect("rows").iter().all(|r| r["erasure_id"] == id), "one id: {v}");
    for h in &hs {
        assert_eq!(h.count("SELECT count(*) AS c FROM temp WHERE user = 'u0'"), 0);
    }
    // Persisted on every replica of every shard that held the user, before the deadline.
    let q = format!(
        "SELECT shard, node, replica_status, status, CAST(persisted_at AS BIGINT) AS p, \
         CAST(deadline AS BIGINT) AS d, CAST(issued_at AS BIGINT) AS i FROM system.deletions \
         WHERE id = {id}"
    );
    let start = Instant::now();
    let rows = loop {
        let rows = hs[0].json(&q);
        let rows = rows.as_array().expect("rows").clone();
        if !rows.is_empty() && rows.iter().all(|r| r["status"] == "persisted") {
            break rows;
        }
        assert!(rows.iter().all(|r| r["status"] != "late"), "the erasure went late: {rows:?}");
        assert!(start.elapsed() < Duration::from_secs(60), "not persisted: {rows:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let shards: std::collections::BTreeSet<u64> =
        rows.iter().map(|r| r["shard"].as_u64().expect("shard")).collect();
    assert_eq!(rows.len(), shards.len() * 3, "every replica of every shard: {rows:?}");
    for r in &rows {
        assert_eq!(r["replica_status"], "persisted", "{r}");
        assert!(r["p"].as_i64() <= r["d"].as_i64(), "persisted before the deadline: {r}");
        let took = (r["p"].as_i64().unwrap_or(0) - r["i"].as_i64().unwrap_or(0)) / 1_000_000;
        eprintln!("shard {} node {}: persisted {took} ms after issue", r["shard"], r["node"]);
    }
    assert!(written.load(Ordering::Relaxed) > 0, "writes went on meanwhile");

    // The audit: every replica scanned, nothing found.
    let url = hs[1].base.clone();
    let (out, pass) = tokio::task::spawn_blocking(move || verify(&url, id, false))
        .await
        .expect("task")
        .expect("verify");
    assert!(pass, "{out}");
    eprintln!("{out}");
    assert_eq!(out.matches("): 0 found; ").count(), shards.len() * 3, "{out}");

    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer");
    // No file on any node holds a marker of the erased user.
    for d in &dirs {
        let left = files_with(d.path(), marker);
        assert!(left.is_empty(), "erased values still in {left:?}");
    }
    // Others are all there.
    assert_eq!(hs[0].count("SELECT count(*) AS c FROM temp WHERE user = 'u1' AND time < to_timestamp_nanos(1700000100000000000)"), 300);
    for s in servers {
        s.shutdown().await.expect("shutdown");
    }
}

/// An erasure answers with the rows it removed, writes in flight when it was issued included:
/// those proposals precede its entry in every shard's log, so it removes their rows too. With
/// several writers of the erased user's series going on throughout, every acknowledged row is
/// either counted by the erasure or still there (in a series created after it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_erasure_counts_the_rows_of_writes_in_flight() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("tempdir")).collect();
    let servers = start_cluster(&dirs, config).await;
    let hs: Vec<Http> = servers.iter().map(|s| Http::new(s.http_addr)).collect();
    placement_settled(&servers, &hs[0]).await;
    let (status, b) = hs[0].post("/write?db=public", &lines("w", 0, 10));
    assert_eq!(status, 204, "{b}");
    let acked = Arc::new(AtomicU64::new(30));
    let stop = Arc::new(AtomicBool::new(false));
    // Four writers, each on its own points (no row merges), through every node.
    let writers: Vec<_> = (0..4i64)
        .map(|k| {
            let (stop, acked) = (stop.clone(), acked.clone());
            let addr = servers[k as usize % 3].http_addr;
            std::thread::spawn(move || {
                let h = Http::new(addr);
                let mut p = 1_000 + k * 1_000_000;
                while !stop.load(Ordering::Relaxed) {
                    let body = lines("w", p, p + 20);
                    let (status, b) = h.post("/write?db=public", &body);
                    assert_eq!(status, 204, "{b}");
                    acked.fetch_add(body.lines().count() as u64, Ordering::Relaxed);
                    p += 20;
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let v = hs[2].json("ERASE WHERE user = 'w' DEADLINE '30s'");
    let erased: u64 =
        v.as_array().expect("rows").iter().map(|r| r["rows_erased"].as_u64().unwrap_or(0)).sum();
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().expect("writer");
    }
    let left = hs[0].count("SELECT count(*) AS c FROM temp WHERE user = 'w'");
    let acked = acked.load(Ordering::Relaxed);
    assert!(erased > 30, "the erasure removed the rows written before it: {v}");
    assert_eq!(left + erased, acked, "{left} left + {erased} erased against {acked} acknowledged");
    for s in servers {
        s.shutdown().await.expect("shutdown");
    }
}
