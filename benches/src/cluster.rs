//! `ebb-bench cluster`: line-protocol ingest (the TSBS devops load of `ebb-bench ingest`) into a
//! single node against a one-node cluster and a three-node cluster with every shard on all
//! three nodes, all on this machine; then the time and bytes to move shard replicas onto a
//! fourth node, once by Raft log replay and once by snapshot, against copying the same files
//! locally.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::cluster_nodes::{Cluster, ClusterSettings, MoveRate, ShardRow};
use crate::peers::{dir_bytes, start, System};
use crate::report::{median, Better, Comparison};
use crate::tsbs::{generate, load, load_spread, Dataset};

/// What `ebb-bench cluster` runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The data set.
    pub dataset: Dataset,
    /// Concurrent writers.
    pub clients: usize,
    /// Shards of the clusters.
    pub shards: u32,
    /// Raft log entries between snapshots in the snapshot-move run.
    pub snapshot_every: u64,
    /// An earlier `ebb` build to compare three-node ingest against (`before` in `RESULT`).
    pub baseline_bin: Option<std::path::PathBuf>,
}

/// Runs every part, printing progress and `RESULT` lines.
pub fn run(work: &Path, s: &Settings) -> Result<(), String> {
    let batches = generate(s.dataset, 5000);
    let rows = s.dataset.rows() as f64;
    let label = s.dataset.label();
    println!(
        "cluster {label}: {} rows in {} batches, {} clients, {} shards",
        s.dataset.rows(),
        batches.len(),
        s.clients,
        s.shards
    );

    // Single node: the baseline.
    let dir = work.join("single");
    let single = start(System::Ebb, &dir)?;
    let secs = load(&single, &batches, s.clients)?;
    let base = rows / secs;
    drop(single);
    println!("  single node          {base:>10.0} rows/s ({secs:.2} s)");
    let _ = std::fs::remove_dir_all(&dir);

    let default_settings = ClusterSettings {
        shards: s.shards,
        replication: 3,
        snapshot_every: 10_000,
        move_rate: MoveRate::Default,
    };
    let mut moves = Vec::new();
    for (nodes, rf) in [(1usize, 1u32), (3, 3)] {
        let dir = work.join(format!("cluster-{nodes}"));
        let cs = ClusterSettings { replication: rf, ..default_settings };
        let mut c = Cluster::start(&dir, nodes, cs)?;
        let secs = load_spread(&c.urls(), "ebb cluster", &batches, s.clients)?;
        let rate = rows / secs;
        check_count(&c, s.dataset.rows())?;
        println!(
            "  {nodes} node(s), RF={rf}      {rate:>10.0} rows/s ({secs:.2} s), {} MiB on disk",
            dir_bytes(&dir) >> 20
        );
        println!(
            "{}",
            Comparison {
                bench: "cluster".into(),
                metric: "ingest_rows_per_sec".into(),
                params: vec![
                    ("nodes".into(), nodes.to_string()),
                    ("rf".into(), rf.to_string()),
                    ("dataset".into(), label.clone()),
                ],
                ebb: rate,
                baseline: "single".into(),
                base,
                better: Better::Higher,
            }
            .line()
        );
        if nodes == 3 {
            moves.push(("log", rebalance(&mut c, work)?));
            check_count(&c, s.dataset.rows())?;
        }
        drop(c);
        let _ = std::fs::remove_dir_all(&dir);
    }

    if let Some(bin) = &s.baseline_bin {
        compare_builds(work, s, &batches, bin, default_settings)?;
    }

    // The same again with snapshots every few entries, so the log a new replica would need is
    // gone and it is sent a snapshot.
    let dir = work.join("cluster-snap");
    let cs = ClusterSettings { snapshot_every: s.snapshot_every, ..default_settings };
    let mut c = Cluster::start(&dir, 3, cs)?;
    let secs = load_spread(&c.urls(), "ebb cluster", &batches, s.clients)?;
    println!(
        "  3 nodes, RF=3, a snapshot every {} entries: {:.0} rows/s ({secs:.2} s)",
        s.snapshot_every,
        rows / secs
    );
    moves.push(("snapshot", rebalance(&mut c, work)?));
    check_count(&c, s.dataset.rows())?;
    drop(c);
    let _ = std::fs::remove_dir_all(&dir);

    for (via, m) in moves {
        let params = vec![("via".into(), via.to_string()), ("dataset".into(), label.clone())];
        println!(
            "{}",
            Comparison {
                bench: "cluster".into(),
                metric: "move_seconds".into(),
                params: params.clone(),
                ebb: m.seconds,
                baseline: "local_copy".into(),
                base: m.copy_seconds,
                better: Better::Lower,
            }
            .line()
        );
        println!(
            "{}",
            Comparison {
                bench: "cluster".into(),
                metric: "move_bytes".into(),
                params,
                ebb: m.bytes,
                baseline: "replica_on_disk".into(),
                base: m.replica_bytes,
                better: Better::Lower,
            }
            .line()
        );
    }
    Ok(())
}

/// Three-node RF=3 ingest with this build and with `bin`, alternating, three rounds each;
/// prints the medians.
fn compare_builds(
    work: &Path,
    s: &Settings,
    batches: &[String],
    bin: &Path,
    settings: ClusterSettings,
) -> Result<(), String> {
    let rows = s.dataset.rows() as f64;
    let mut rates = [Vec::new(), Vec::new()];
    for round in 0..3 {
        for (i, which) in [(0, None), (1, Some(bin))] {
            let dir = work.join(format!("compare-{round}-{i}"));
            let c = Cluster::start_with(&dir, 3, settings, which)?;
            let secs = load_spread(&c.urls(), "ebb cluster", batches, s.clients)?;
            check_count(&c, s.dataset.rows())?;
            let name = if i == 0 { "this build" } else { "baseline build" };
            println!("  round {round} {name:<15} 3 nodes RF=3 {:>10.0} rows/s", rows / secs);
            rates[i].push(rows / secs);
            drop(c);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    let (ebb, base) = (median(&rates[0]), median(&rates[1]));
    println!(
        "{}",
        Comparison {
            bench: "cluster".into(),
            metric: "ingest_rows_per_sec".into(),
            params: vec![
                ("nodes".into(), "3".into()),
                ("rf".into(), "3".into()),
                ("dataset".into(), s.dataset.label()),
            ],
            ebb,
            baseline: "before".into(),
            base,
            better: Better::Higher,
        }
        .line()
    );
    Ok(())
}

fn check_count(c: &Cluster, rows: usize) -> Result<(), String> {
    let got = c.sql(0, "SELECT count(*) FROM cpu")?;
    let n: usize = got.first().and_then(|r| r.first()).and_then(|v| v.parse().ok()).unwrap_or(0);
    if n != rows {
        return Err(format!("the cluster holds {n} rows, {rows} were written"));
    }
    Ok(())
}

/// One shard replica move, averaged over the moves of a rebalance.
#[derive(Debug, Clone, Copy)]
struct Move {
    /// Seconds from the move's start (in `system.shards`) until the new replica has applied
    /// all the old ones have (median).
    seconds: f64,
    /// Bytes the new node received per move (snapshots and appended entries).
    bytes: f64,
    /// Bytes of a moved replica on a node that already held it (mean).
    replica_bytes: f64,
    /// Seconds to copy such a replica's files locally and sync them (median).
    copy_seconds: f64,
}

fn node_id(c: &Cluster, i: usize) -> Result<u64, String> {
    c.metric(i, "ebb_cluster_node_id")
}

/// Adds a fourth node and waits until it holds its share; times each move.
fn rebalance(c: &mut Cluster, work: &Path) -> Result<Move, String> {
    let before = c.shards()?;
    let replicas: usize = before.iter().map(|r| r.replicas.len()).sum();
    let share = replicas / (c.nodes.len() + 1);
    let t0 = Instant::now();
    c.add()?;
    let new = c.nodes.len() - 1;
    let id = node_id(c, new)?;
    let mut started: Vec<Option<Instant>> = vec![None; before.len()];
    let holds = |rows: &[ShardRow]| rows.iter().filter(|r| r.replicas.contains(&id)).count();
    let mut observe = |rows: &[ShardRow]| {
        let now = Instant::now();
        for (i, r) in rows.iter().enumerate().take(started.len()) {
            if r.moving && started[i].is_none() {
                started[i] = Some(now);
            }
        }
    };
    let rows = c.wait_until(Duration::from_secs(600), "rebalance onto the new node", |rows| {
        observe(rows);
        holds(rows) >= share && rows.iter().all(|r| !r.moving)
    })?;
    let placed = t0.elapsed().as_secs_f64();
    let moved: Vec<u64> =
        rows.iter().filter(|r| r.replicas.contains(&id)).map(|r| r.shard).collect();
    // The map records a move once the new replica has the log and votes; it is caught up
    // once it has applied everything the old replicas have.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut caught: Vec<Option<Instant>> = vec![None; before.len()];
    loop {
        let mut pending = false;
        for shard in &moved {
            let slot = before.iter().position(|r| r.shard == *shard).unwrap_or(0);
            if caught[slot].is_some() {
                continue;
            }
            let name = format!("ebb_last_seq{{shard=\"{shard}\"}}");
            let mut want = 0;
            for i in 0..new {
                want = want.max(c.try_metric(i, &name)?.unwrap_or(0));
            }
            if c.try_metric(new, &name)?.unwrap_or(0) >= want {
                caught[slot] = Some(Instant::now());
            } else {
                pending = true;
            }
        }
        if !pending {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("node {id} never caught up on shards {moved:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let total = t0.elapsed().as_secs_f64();
    let snap_bytes = c.metric(new, "ebb_raft_snapshot_bytes_received_total")?;
    let snaps = c.metric(new, "ebb_raft_snapshots_received_total")?;
    let append_bytes = c.metric(new, "ebb_raft_append_bytes_received_total")?;
    println!(
        "    node {id} joined and took shards {moved:?} in {placed:.2} s, caught up in {total:.2} \
         s: {snaps} snapshot(s) of {} KiB, {} KiB of appended entries",
        snap_bytes >> 10,
        append_bytes >> 10
    );
    if moved.is_empty() {
        return Err("the new node took no shard".into());
    }
    // Each move from its start in the map (or the join, if it started between two polls) to
    // the new replica caught up.
    let times: Vec<f64> = moved
        .iter()
        .filter_map(|shard| {
            let slot = before.iter().position(|r| r.shard == *shard)?;
            let done = caught[slot]?;
            Some(done.duration_since(started[slot].unwrap_or(t0)).as_secs_f64())
        })
        .collect();
    // Each moved replica as one of the old nodes still holds it.
    let mut replica_bytes = Vec::new();
    let mut copies = Vec::new();
    for shard in &moved {
        let src = c.nodes[..new]
            .iter()
            .map(|n| n.dir.join(format!("shard-{shard}")))
            .find(|d| d.is_dir())
            .ok_or_else(|| format!("no old node holds shard {shard} any more"))?;
        replica_bytes.push(dir_bytes(&src) as f64);
        let dst = work.join(format!("copy-{shard}"));
        let t = Instant::now();
        copy_tree(&src, &dst).map_err(|e| format!("copying {}: {e}", src.display()))?;
        copies.push(t.elapsed().as_secs_f64());
        let _ = std::fs::remove_dir_all(&dst);
    }
    let m = Move {
        seconds: median(&times),
        bytes: (snap_bytes + append_bytes) as f64 / moved.len() as f64,
        replica_bytes: replica_bytes.iter().sum::<f64>() / replica_bytes.len() as f64,
        copy_seconds: median(&copies),
    };
    println!(
        "    per move: {:.2} s, {} KiB received; a replica is {} KiB on disk, copied locally in \
         {:.3} s",
        m.seconds,
        m.bytes as u64 >> 10,
        m.replica_bytes as u64 >> 10,
        m.copy_seconds
    );
    Ok(m)
}

/// Copies the files under `src` to `dst` and syncs each, as a bare file transfer would.
fn copy_tree(src: &Path, dst: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dst)?;
    for e in std::fs::read_dir(src)? {
        let e = e?;
        let to = dst.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_tree(&e.path(), &to)?;
        } else {
            std::fs::copy(e.path(), &to)?;
            std::fs::File::open(&to)?.sync_all()?;
        }
    }
    Ok(())
}
