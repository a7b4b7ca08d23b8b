//! `ebb-bench erasure`: what erasures cost a cluster under ingest, and how soon their data is
//! physically gone. A three-node cluster (every shard on every node) loads the TSBS devops data
//! set twice, on fresh nodes each time: once alone (the baseline), and once while an
//! `ERASE WHERE hostname = ... DEADLINE ...` is issued every interval. Reported: the ingest rate
//! against the baseline; each erasure's persistence latency (from its issue until its last
//! replica persisted it, as `system.deletions` records) against its deadline; and how long
//! `/v1/audit/verify` takes to scan every replica for one erasure, with its verdict.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::cluster_nodes::{Cluster, ClusterSettings, MoveRate};
use crate::report::{Better, Comparison};
use crate::tsbs::{agent, generate, load_spread, Dataset};

/// What `ebb-bench erasure` runs.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// The data set.
    pub dataset: Dataset,
    /// Concurrent writers (spread over the nodes).
    pub clients: usize,
    /// Shards of the cluster.
    pub shards: u32,
    /// Erasures issued during the load (fewer if the load ends first).
    pub erasures: usize,
    /// Time between erasures.
    pub interval: Duration,
    /// Each erasure's deadline.
    pub deadline: Duration,
}

/// One erasure as issued.
#[derive(Debug, Clone)]
struct Issued {
    id: u64,
    host: usize,
    rows: u64,
    /// Seconds the `ERASE` statement took to answer.
    answer_secs: f64,
}

/// Runs both loads, printing progress and `RESULT` lines.
pub fn run(work: &Path, s: &Settings) -> Result<(), String> {
    let batches = generate(s.dataset, 5000);
    let rows = s.dataset.rows() as f64;
    let label = s.dataset.label();
    let deadline_s = s.deadline.as_secs().max(1);
    println!(
        "erasure {label}: {} rows in {} batches, {} clients, 3 nodes, {} shards x 3 replicas; \
         an erasure every {:?} with DEADLINE '{deadline_s}s'",
        s.dataset.rows(),
        batches.len(),
        s.clients,
        s.shards,
        s.interval
    );
    let cs = ClusterSettings {
        shards: s.shards,
        replication: 3,
        snapshot_every: 10_000,
        move_rate: MoveRate::Default,
    };

    let dir = work.join("baseline");
    let c = Cluster::start(&dir, 3, cs)?;
    let secs = load_spread(&c.urls(), "ebb cluster", &batches, s.clients)?;
    let base = rows / secs;
    let base_mib = compacted_mib(&c)?;
    println!("  no erasures          {base:>10.0} rows/s ({secs:.2} s), compactions wrote {base_mib} MiB");
    drop(c);
    let _ = std::fs::remove_dir_all(&dir);

    let dir = work.join("erasures");
    let c = Cluster::start(&dir, 3, cs)?;
    let loading = AtomicBool::new(true);
    let (secs, issued) = std::thread::scope(|sc| {
        let eraser = sc.spawn(|| erase_while(&c, s, &loading));
        let secs = load_spread(&c.urls(), "ebb cluster", &batches, s.clients);
        loading.store(false, Ordering::Relaxed);
        let issued = eraser.join().unwrap_or_else(|_| Err("the eraser panicked".into()));
        (secs, issued)
    });
    let (secs, issued) = (secs?, issued?);
    let rate = rows / secs;
    let mib = compacted_mib(&c)?;
    let erased: u64 = issued.iter().map(|e| e.rows).sum();
    println!(
        "  with {} erasures      {rate:>10.0} rows/s ({secs:.2} s), compactions wrote {mib} MiB, \
         {erased} rows erased",
        issued.len()
    );
    if issued.is_empty() {
        return Err("the load ended before the first erasure; use a larger data set".into());
    }
    let left = count(&c, "SELECT count(*) FROM cpu")?;
    let expect = s.dataset.rows() as u64 - erased;
    println!(
        "  rows left {left} (written {} - erased {erased} = {expect}): {}",
        s.dataset.rows(),
        if left == expect { "agree" } else { "DISAGREE" }
    );
    let answers: Vec<f64> = issued.iter().map(|e| e.answer_secs).collect();
    println!("  ERASE answered in {:.3} s (median)", median(&answers));

    let latencies = wait_persisted(&c, &issued, s.deadline)?;
    let late = latencies.iter().filter(|l| **l > deadline_s as f64).count();
    println!(
        "  persisted on every replica: median {:.2} s, max {:.2} s after issue; {late} of {} late",
        median(&latencies),
        max(&latencies),
        latencies.len()
    );

    let mut verify = Vec::new();
    let mut passed = 0;
    for e in &issued {
        let t = Instant::now();
        let mut r = agent()
            .get(&format!("{}/v1/audit/verify", c.nodes[0].url))
            .query("id", e.id.to_string())
            .call()
            .map_err(|e| e.to_string())?;
        let body = r.body_mut().read_to_string().map_err(|e| e.to_string())?;
        if !r.status().is_success() {
            return Err(format!("verify {}: {} {body}", e.id, r.status()));
        }
        verify.push(t.elapsed().as_secs_f64());
        passed += usize::from(body.contains("\"pass\":true"));
    }
    println!(
        "  audit verify (3 replicas scanned): median {:.2} s, max {:.2} s; {passed} of {} pass, \
         {} MiB on disk per node",
        median(&verify),
        max(&verify),
        verify.len(),
        crate::peers::dir_bytes(&c.nodes[0].dir) >> 20
    );
    let data: Vec<_> = c.nodes.iter().map(|n| n.dir.clone()).collect();
    drop(c);
    // The node logs (`n1.log`, ...) stay for a look at what the nodes did.
    for d in data {
        let _ = std::fs::remove_dir_all(d);
    }

    let params = |extra: &[(&str, String)]| {
        let mut p = vec![("dataset".to_string(), label.clone())];
        p.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
        p
    };
    let n = issued.len().to_string();
    let lines = [
        Comparison {
            bench: "erasure".into(),
            metric: "ingest_rows_per_sec".into(),
            params: params(&[("erasures", n.clone())]),
            ebb: rate,
            baseline: "no_erasures".into(),
            base,
            better: Better::Higher,
        },
        Comparison {
            bench: "erasure".into(),
            metric: "persist_seconds_max".into(),
            params: params(&[("erasures", n.clone())]),
            ebb: max(&latencies),
            baseline: "deadline".into(),
            base: deadline_s as f64,
            better: Better::Lower,
        },
        Comparison {
            bench: "erasure".into(),
            metric: "persist_seconds_median".into(),
            params: params(&[("erasures", n)]),
            ebb: median(&latencies),
            baseline: "deadline".into(),
            base: deadline_s as f64,
            better: Better::Lower,
        },
    ];
    for l in lines {
        println!("{}", l.line());
    }
    Ok(())
}

/// Issues erasures of hosts spread over the data set, one per interval, while `loading`.
fn erase_while(c: &Cluster, s: &Settings, loading: &AtomicBool) -> Result<Vec<Issued>, String> {
    let mut out = Vec::new();
    for k in 0..s.erasures {
        let until = Instant::now() + s.interval;
        while Instant::now() < until {
            if !loading.load(Ordering::Relaxed) {
                return Ok(out);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let host = k * s.dataset.hosts / s.erasures.max(1);
        let sql = format!(
            "ERASE WHERE hostname = 'host_{host}' DEADLINE '{}s'",
            s.deadline.as_secs().max(1)
        );
        let t = Instant::now();
        // One row per shard the table is on, each naming the shard, the rows it erased and
        // the erasure id (the same on every shard).
        let (header, rows) = c.sql_with_header(k % c.nodes.len(), &sql)?;
        let answer_secs = t.elapsed().as_secs_f64();
        let col = |name: &str| {
            header.iter().position(|h| h == name).ok_or(format!("{sql}: no column {name}"))
        };
        let (id_col, rows_col) = (col("erasure_id")?, col("rows_erased")?);
        let num = |r: &Vec<String>, i: usize| r.get(i).and_then(|v| v.parse::<u64>().ok());
        let id = rows.first().and_then(|r| num(r, id_col)).ok_or(format!("{sql}: {rows:?}"))?;
        let erased = rows.iter().filter_map(|r| num(r, rows_col)).sum();
        out.push(Issued { id, host, rows: erased, answer_secs });
        println!("  erased host_{host}: {erased} rows ({answer_secs:.3} s)");
    }
    Ok(out)
}

/// Waits until every replica of every erasure has persisted it (or the deadline has passed by a
/// minute); each erasure's seconds from issue to its last replica's persistence.
fn wait_persisted(c: &Cluster, issued: &[Issued], deadline: Duration) -> Result<Vec<f64>, String> {
    let ids: Vec<String> = issued.iter().map(|e| e.id.to_string()).collect();
    let sql = format!(
        "SELECT id, CAST(issued_at AS BIGINT), CAST(persisted_at AS BIGINT) \
         FROM system.deletions WHERE id IN ({})",
        ids.join(",")
    );
    let give_up = Instant::now() + deadline + Duration::from_secs(60);
    loop {
        let rows = c.sql(0, &sql)?;
        let done = !rows.is_empty() && rows.iter().all(|r| r.get(2).is_some_and(|v| !v.is_empty()));
        let seen: std::collections::BTreeSet<&str> =
            rows.iter().filter_map(|r| r.first().map(String::as_str)).collect();
        if done && seen.len() == issued.len() {
            let mut out = Vec::new();
            for (id, e) in ids.iter().zip(issued) {
                let ns = |r: &Vec<String>, i: usize| r[i].parse::<i64>().unwrap_or(0);
                let mut took: Vec<f64> = rows
                    .iter()
                    .filter(|r| r.first() == Some(id))
                    .map(|r| (ns(r, 2) - ns(r, 1)) as f64 / 1e9)
                    .collect();
                took.sort_by(f64::total_cmp);
                let list: Vec<String> = took.iter().map(|t| format!("{t:.1}")).collect();
                println!("  host_{}: replicas persisted after {} s", e.host, list.join(", "));
                out.push(max(&took));
            }
            return Ok(out);
        }
        if Instant::now() > give_up {
            return Err(format!("erasures not persisted a minute past their deadline: {rows:?}"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn count(c: &Cluster, sql: &str) -> Result<u64, String> {
    let rows = c.sql(0, sql)?;
    rows.first()
        .and_then(|r| r.first())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("{sql}: {rows:?}"))
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(0.0, f64::max)
}

/// What the compactions of all nodes have written so far, in MiB.
fn compacted_mib(c: &Cluster) -> Result<u64, String> {
    let mut bytes = 0;
    for i in 0..c.nodes.len() {
        bytes += c.metric(i, "ebb_bytes_compacted_total")?;
    }
    Ok(bytes >> 20)
}
