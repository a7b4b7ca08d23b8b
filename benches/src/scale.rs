//! `ebb-bench scale`: does a cluster gain capacity as it gains nodes? Nodes run as processes on
//! loopback, each held to the same CPU share (a cgroup per node: cgroup v2 `cpu.max` where the
//! `cpu` controller is available there, else cgroup v1 `cpu.cfs_quota_us`), so adding nodes adds
//! CPU as adding machines would. The TSBS load runs at saturation on 3 nodes, then 3 more join;
//! while shards and leaders rebalance, a writer keeps writing (every failed write is counted);
//! then the load runs again on 6 nodes. With `--split-to N`, the shards are split
//! (`ALTER CLUSTER SPLIT SHARD`) after the join until there are N, while the writer goes on: the
//! growth of a cluster created with fewer shards.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::cluster_nodes::{Cluster, ClusterSettings, MoveRate};
use crate::peers::ebb_binary;
use crate::report::{Better, Comparison};
use crate::tsbs::{agent, generate, load_spread, Dataset};

/// What `ebb-bench scale` runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The data set loaded at each size.
    pub dataset: Dataset,
    /// Concurrent writers per node.
    pub clients_per_node: usize,
    /// Shards of the cluster.
    pub shards: u32,
    /// CPU share of each node, in CPUs (0.25: a quarter of one).
    pub share: f64,
    /// Time given the cluster once it is balanced, before a load is measured (replicas that
    /// just arrived finish installing snapshots, earlier writes finish compacting).
    pub settle: Duration,
    /// Shards to split to once the six nodes are in (no splits if not above `shards`).
    pub split_to: u32,
    /// Whether each node starts inside its cgroup (as in a container: its runtime sizes its
    /// thread pools from the limit) rather than being put there once running.
    pub limit_at_start: bool,
    /// Whether every node flushes its memtables before each load (`POST /v1/admin/flush`), so
    /// each load starts from empty memtables and pays for its own rows' flushes.
    pub flush: bool,
    /// Whether the writer that runs while nodes join and shards split rewrites the first load's
    /// rows (new versions of rows that exist) rather than writing new ones.
    pub join_rewrites: bool,
}

/// `ebb-bench scale`.
#[derive(Debug, clap::Args)]
pub struct ScaleArgs {
    /// Data set as HOSTSxHOURS.
    #[arg(long, default_value = "1000x2")]
    pub set: String,
    /// Concurrent writers per node.
    #[arg(long, default_value_t = 2)]
    pub clients_per_node: usize,
    /// Shards of the cluster.
    #[arg(long, default_value_t = 12)]
    pub shards: u32,
    /// CPU share of each node, in CPUs.
    #[arg(long, default_value_t = 0.2)]
    pub share: f64,
    /// Seconds the cluster is given once balanced, before each load.
    #[arg(long, default_value_t = 10)]
    pub settle: u64,
    /// Split shards once the six nodes are in until the cluster has this many.
    #[arg(long, default_value_t = 0)]
    pub split_to: u32,
    /// Start each node inside its CPU-limited cgroup, as a container starts (`false`: put it
    /// there once it runs, so it sizes its threads from the whole machine).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub limit_at_start: bool,
    /// Flush every node's memtables before each load, so each starts from empty memtables
    /// (`false`: the 6-node load inserts into, and flushes, what the 3-node load left there).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub flush: bool,
    /// The writer that runs while nodes join and shards split rewrites the first load's rows
    /// (`false`: it writes new rows, later than both loads', as a time series grows).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub join_rewrites: bool,
    /// Working directory (default: a temporary directory, removed afterwards).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

impl ScaleArgs {
    /// The smallest run (`--quick`): 20 hosts for an hour, 4 shards, a second to settle, each
    /// node at half a CPU.
    pub fn quick(&mut self) {
        self.set = "20x1".into();
        self.shards = 4;
        self.settle = 1;
        self.share = 0.5;
    }

    /// Runs the benchmark in `work`.
    pub fn run(&self, work: &Path) -> Result<(), String> {
        let s = Settings {
            dataset: self.set.parse()?,
            clients_per_node: self.clients_per_node.max(1),
            shards: self.shards.max(1),
            share: self.share.clamp(0.05, 64.0),
            settle: Duration::from_secs(self.settle),
            split_to: self.split_to,
            limit_at_start: self.limit_at_start,
            flush: self.flush,
            join_rewrites: self.join_rewrites,
        };
        run(work, &s)
    }
}

/// A cgroup holding one node's process at a CPU share; removed when dropped.
struct CpuShare {
    dir: PathBuf,
}

impl CpuShare {
    /// A new cgroup `name` limited to `share` CPUs.
    fn new(name: &str, share: f64) -> Result<CpuShare, String> {
        // A short period: a node out of quota freezes until the next one, and Raft heartbeats
        // must not wait out a long freeze.
        let period = 10_000u64;
        let quota = ((share * period as f64) as u64).max(1_000);
        let v2 = Path::new("/sys/fs/cgroup");
        let v2_cpu = std::fs::read_to_string(v2.join("cgroup.controllers"))
            .is_ok_and(|c| c.split_whitespace().any(|c| c == "cpu"));
        let (dir, limit) = if v2_cpu {
            let _ = std::fs::write(v2.join("cgroup.subtree_control"), "+cpu");
            (v2.join(name), vec![("cpu.max", format!("{quota} {period}"))])
        } else {
            let v1 = Path::new("/sys/fs/cgroup/cpu");
            let limit = vec![
                ("cpu.cfs_period_us", period.to_string()),
                ("cpu.cfs_quota_us", quota.to_string()),
            ];
            (v1.join(name), limit)
        };
        let shown = dir.display().to_string();
        let fail = |what: &str, e: std::io::Error| {
            format!("cgroup {shown}: {what}: {e} (run as root with the cpu controller)")
        };
        std::fs::create_dir_all(&dir).map_err(|e| fail("create", e))?;
        let share = CpuShare { dir };
        for (file, value) in limit {
            std::fs::write(share.dir.join(file), value).map_err(|e| fail(file, e))?;
        }
        Ok(share)
    }

    /// Moves process `pid` into the cgroup.
    fn join(&self, pid: u32) -> Result<(), String> {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string())
            .map_err(|e| format!("cgroup {}: cgroup.procs: {e}", self.dir.display()))
    }
}

impl Drop for CpuShare {
    fn drop(&mut self) {
        // Empty once its process is gone (the cluster is dropped first).
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Stops the nodes a killed run left in its cgroups (`ebb-scale-<pid>-<i>` of a bench process
/// that is gone) and removes those cgroups: left running, they take CPU from this run's nodes.
fn reap_stale() {
    for root in ["/sys/fs/cgroup", "/sys/fs/cgroup/cpu"] {
        let Ok(dirs) = std::fs::read_dir(root) else { continue };
        for d in dirs.flatten() {
            let name = d.file_name().to_string_lossy().into_owned();
            let owner = name.strip_prefix("ebb-scale-").and_then(|r| r.split('-').next());
            let Some(owner) = owner else { continue };
            if owner.parse::<u32>().is_err() || Path::new("/proc").join(owner).exists() {
                continue;
            }
            let procs = std::fs::read_to_string(d.path().join("cgroup.procs")).unwrap_or_default();
            for pid in procs.split_whitespace() {
                let _ = std::process::Command::new("kill").args(["-9", pid]).status();
                println!("  stopped process {pid}, left in {} by a killed run", d.path().display());
            }
            for _ in 0..50 {
                if std::fs::remove_dir(d.path()).is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// One node's load as `system.nodes` shows it.
#[derive(Debug, Clone, Copy)]
struct NodeLoad {
    id: u64,
    replicas: u64,
    leaders: u64,
    bytes: u64,
}

/// Every node's load.
fn load_per_node(c: &Cluster) -> Result<Vec<NodeLoad>, String> {
    let rows = c.sql(0, "SELECT id, replicas, leaders, bytes FROM system.nodes ORDER BY id")?;
    Ok(rows
        .iter()
        .map(|r| {
            let n = |i: usize| r.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            NodeLoad { id: n(0), replicas: n(1), leaders: n(2), bytes: n(3) }
        })
        .collect())
}

/// Splits shards, lowest id first, until the cluster has `to` (it has `from`), each split
/// waited for until both halves are routed and trimmed.
fn split_to(c: &Cluster, from: u32, to: u32) -> Result<(), String> {
    for n in from..to {
        let shard = u64::from(n - from) + 1;
        let started = Instant::now();
        c.sql(0, &format!("ALTER CLUSTER SPLIT SHARD {shard}"))?;
        loop {
            let q = "SELECT count(*) FROM system.shards WHERE split IS NULL AND leader IS NOT NULL";
            let done = c.sql(0, q)?;
            if done.first().and_then(|r| r.first()).and_then(|v| v.parse::<u32>().ok())
                == Some(n + 1)
            {
                break;
            }
            if started.elapsed() > Duration::from_secs(120) {
                return Err(format!("the split of shard {shard} did not finish in 2 minutes"));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        println!("  split shard {shard} in {:.1} s", started.elapsed().as_secs_f64());
    }
    Ok(())
}

/// Waits until every replica has persisted the deletes of the splits' trims (each half drops
/// the other's rows within a deadline of its own: compactions, then a snapshot that moves the
/// Raft log past them), so the load after a growth measures the grown cluster rather than its
/// cleanup. Prints how long it took, and how many replicas persisted a trim after its
/// deadline; gives up after 5 minutes.
fn wait_trims_persisted(c: &Cluster) -> Result<(), String> {
    let started = Instant::now();
    let count = |q: &str| -> Result<Option<u64>, String> {
        let rows = c.sql(0, q)?;
        Ok(rows.first().and_then(|r| r.first()).and_then(|v| v.parse::<u64>().ok()))
    };
    let q =
        "SELECT count(*) FROM system.deletions WHERE issued_by = 'split' AND persisted_at IS NULL";
    loop {
        let left = count(q)?;
        if left == Some(0) {
            let late = count(
                "SELECT count(*) FROM system.deletions WHERE issued_by = 'split' \
                 AND replica_status = 'late'",
            )?;
            println!(
                "  split trims persisted on every replica after {:.1} s more ({} replicas after \
                 the deadline)",
                started.elapsed().as_secs_f64(),
                late.unwrap_or(0)
            );
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(300) {
            println!("  split trims not all persisted after 5 minutes ({left:?} left); going on");
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// CPU seconds (user and system) each node's process has used so far, from `/proc/PID/stat`
/// (in clock ticks of 1/100 s, Linux's `USER_HZ`); 0 where it cannot be read.
fn cpu_per_node(c: &Cluster) -> Vec<f64> {
    c.nodes
        .iter()
        .map(|n| {
            let stat =
                std::fs::read_to_string(format!("/proc/{}/stat", n.pid())).unwrap_or_default();
            // Fields after the command name, which is in parentheses and may hold spaces.
            let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
            let f: Vec<&str> = rest.split_whitespace().collect();
            let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
            // utime and stime are fields 14 and 15 of the line; 12 and 13 after the name.
            (tick(11) + tick(12)) / 100.0
        })
        .collect()
}

/// Prints how busy each node was during a load of `secs` seconds: its CPU use against its share.
fn report_cpu(before: &[f64], after: &[f64], secs: f64, s: &Settings) {
    let used: Vec<f64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
    let shown: Vec<String> =
        used.iter().map(|u| format!("{:.0}%", 100.0 * u / (secs * s.share).max(1e-9))).collect();
    println!(
        "    CPU of share per node: {}; {:.2} CPU s per million rows",
        shown.join(" "),
        used.iter().sum::<f64>() / (s.dataset.rows() as f64 / 1e6)
    );
}

/// Flushes every node's memtables (if `s.flush`), then gives the cluster `s.settle`.
fn flush_and_settle(c: &Cluster, s: &Settings) -> Result<(), String> {
    if s.flush {
        let started = Instant::now();
        for url in c.urls() {
            agent()
                .post(&format!("{url}/v1/admin/flush"))
                .send_empty()
                .map_err(|e| format!("{url}/v1/admin/flush: {e}"))?;
        }
        println!("  memtables flushed in {:.1} s", started.elapsed().as_secs_f64());
    }
    std::thread::sleep(s.settle);
    Ok(())
}

/// Prints the CPU each node uses while no load runs (heartbeats, background tasks), measured
/// over `secs` seconds, as a share of its quota.
fn report_idle(c: &Cluster, secs: f64, s: &Settings) {
    let before = cpu_per_node(c);
    std::thread::sleep(Duration::from_secs_f64(secs));
    let after = cpu_per_node(c);
    let shown: Vec<String> = after
        .iter()
        .zip(&before)
        .map(|(a, b)| format!("{:.1}%", 100.0 * (a - b) / (secs * s.share).max(1e-9)))
        .collect();
    println!("    idle CPU of share per node: {}", shown.join(" "));
}

/// One node's engine figures from its `/metrics`, summed over its replicas: the active
/// memtables' bytes, SST bytes, bytes compacted and flushes so far, the group commits of its
/// shard leaders so far (groups, and writes in them), and the Raft appends it received.
fn engine_per_node(c: &Cluster) -> Vec<[f64; 7]> {
    let names = [
        "ebb_memtable_bytes",
        "ebb_level_bytes",
        "ebb_bytes_compacted_total",
        "ebb_flushes_total",
        "ebb_write_groups_total",
        "ebb_grouped_writes_total",
        "ebb_raft_appends_received_total",
    ];
    c.urls()
        .iter()
        .map(|url| {
            let text = agent()
                .get(&format!("{url}/metrics"))
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_to_string().ok())
                .unwrap_or_default();
            let mut out = [0.0; 7];
            for line in text.lines().filter(|l| !l.starts_with('#')) {
                let Some((key, value)) = line.rsplit_once(' ') else { continue };
                let name = key.split('{').next().unwrap_or(key);
                if let Some(i) = names.iter().position(|n| *n == name) {
                    out[i] += value.parse::<f64>().unwrap_or(0.0);
                }
            }
            out
        })
        .collect()
}

/// Prints each node's memtable and SST bytes, and what it compacted and flushed and how many
/// shard writes its leaders committed per group, and the Raft appends it received since
/// `before`.
fn report_engine(before: &[[f64; 7]], after: &[[f64; 7]]) {
    for (i, (b, a)) in before.iter().zip(after).enumerate() {
        let groups = a[4] - b[4];
        println!(
            "    node {}: memtables {:.0} MiB, SSTs {:.0} MiB; {:.0} MiB compacted, {:.0} flushes; \
             {:.0} shard writes in {groups:.0} groups; {:.0} Raft appends received",
            i + 1,
            a[0] / 1048576.0,
            a[1] / 1048576.0,
            (a[2] - b[2]) / 1048576.0,
            a[3] - b[3],
            a[5] - b[5],
            a[6] - b[6],
        );
    }
}

/// Prints each node's replicas, leaders and bytes, and how far the bytes are from even.
fn report_bytes(nodes: &[NodeLoad]) {
    let bytes: Vec<u64> = nodes.iter().map(|r| r.bytes).collect();
    let mean = bytes.iter().sum::<u64>() as f64 / bytes.len().max(1) as f64;
    let worst = bytes.iter().map(|&b| (b as f64 - mean).abs() / mean.max(1.0)).fold(0.0, f64::max);
    for n in nodes {
        let (id, replicas, leaders) = (n.id, n.replicas, n.leaders);
        println!("  node {id}: {replicas} replicas, {leaders} leaders, {} MiB", n.bytes >> 20);
    }
    println!("  bytes per node within {:.0}% of even", worst * 100.0);
}

/// True if leaders and replicas are within one of even.
fn balanced(rows: &[NodeLoad]) -> bool {
    let spread = |f: fn(&NodeLoad) -> u64| {
        let v: Vec<u64> = rows.iter().map(f).collect();
        v.iter().max().unwrap_or(&0) - v.iter().min().unwrap_or(&0)
    };
    spread(|r| r.replicas) <= 1 && spread(|r| r.leaders) <= 1
}

/// `batches` with every line's timestamp (its last field, nanoseconds) moved `ns` later: the
/// same load as new rows, where writing the old ones again would overwrite rows that exist.
fn shifted(batches: &[String], ns: i64) -> Vec<String> {
    batches
        .iter()
        .map(|b| {
            let mut out = String::with_capacity(b.len() + b.len() / 16);
            for line in b.lines() {
                match line
                    .rsplit_once(' ')
                    .and_then(|(head, t)| Some((head, t.parse::<i64>().ok()?)))
                {
                    Some((head, t)) => out.push_str(&format!("{head} {}\n", t + ns)),
                    None => out.push_str(&format!("{line}\n")),
                }
            }
            out
        })
        .collect()
}

/// Runs the benchmark in `work`, printing progress and `RESULT` lines.
pub fn run(work: &Path, s: &Settings) -> Result<(), String> {
    let batches = generate(s.dataset, 5000);
    let rows = s.dataset.rows() as f64;
    println!(
        "scale {}: {} rows, {} shards, RF=3, {:.2} CPU per node ({}), {} writers per node{}",
        s.dataset.label(),
        s.dataset.rows(),
        s.shards,
        s.share,
        match s.limit_at_start {
            true => "limited from the start",
            false => "limited once running",
        },
        s.clients_per_node,
        if s.flush { ", memtables flushed before each load" } else { "" }
    );
    let settings = ClusterSettings {
        shards: s.shards,
        replication: 3,
        snapshot_every: 10_000,
        move_rate: MoveRate::Default,
    };
    reap_stale();
    let tag = std::process::id();
    let shares: Vec<CpuShare> = (0..6)
        .map(|i| CpuShare::new(&format!("ebb-scale-{tag}-{i}"), s.share))
        .collect::<Result<_, _>>()?;
    let at_start = |i: usize| Ok(s.limit_at_start.then(|| shares[i].dir.clone()));
    let mut c = Cluster::start_in(&work.join("cluster"), 3, settings, ebb_binary()?, at_start)?;
    if !s.limit_at_start {
        for (share, n) in shares.iter().zip(&c.nodes) {
            share.join(n.pid())?;
        }
    }
    let wait_balanced = |c: &Cluster, what: &str| -> Result<Vec<NodeLoad>, String> {
        let start = Instant::now();
        loop {
            let l = load_per_node(c)?;
            if balanced(&l) && l.iter().all(|r| r.replicas > 0) {
                return Ok(l);
            }
            if start.elapsed() > Duration::from_secs(300) {
                return Err(format!("{what}: not balanced after 5 minutes: {l:?}"));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    };
    wait_balanced(&c, "3 nodes")?;
    flush_and_settle(&c, s)?;
    report_idle(&c, 5.0, s);
    let (before, engine) = (cpu_per_node(&c), engine_per_node(&c));
    let secs = load_spread(&c.urls(), "ebb", &batches, 3 * s.clients_per_node)?;
    let three = rows / secs;
    println!("  3 nodes   {three:>10.0} rows/s ({secs:.2} s)");
    report_cpu(&before, &cpu_per_node(&c), secs, s);
    report_engine(&engine, &engine_per_node(&c));

    // Three more nodes join while a writer keeps writing.
    let stop = AtomicBool::new(false);
    let (written, failed) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let urls = c.urls();
    let started = Instant::now();
    let after = std::thread::scope(|sc| -> Result<_, String> {
        sc.spawn(|| {
            let a = agent();
            let mut k = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let url = format!("{}/write?db=bench", urls[k % urls.len()]);
                let body = match s.join_rewrites {
                    true => batches[k % batches.len()].clone(),
                    // Each pass over the batches after both loads' hours and the passes before.
                    false => {
                        let pass = i64::try_from(k / batches.len()).unwrap_or(0);
                        let hours = i64::try_from(s.dataset.hours).unwrap_or(0) + 1;
                        let ns = (2 + pass) * hours * 3_600_000_000_000;
                        shifted(&batches[k % batches.len()..][..1], ns).swap_remove(0)
                    }
                };
                let why = match a.post(&url).send(body.as_bytes()) {
                    Ok(r) if r.status().is_success() => None,
                    Ok(mut r) => {
                        let text = r.body_mut().read_to_string().unwrap_or_default();
                        Some(format!("{}: {text}", r.status()))
                    }
                    Err(e) => Some(e.to_string()),
                };
                match why {
                    None => written.fetch_add(1, Ordering::Relaxed),
                    Some(why) => {
                        let n = failed.fetch_add(1, Ordering::Relaxed);
                        if n < 5 {
                            let at = started.elapsed().as_secs_f64();
                            println!("  a write to {url} failed after {at:.1} s: {why}");
                        }
                        n
                    }
                };
                k += 1;
            }
        });
        let result = (|| {
            for (i, share) in shares.iter().enumerate().skip(3) {
                c.add_in(at_start(i)?.as_deref())?;
                if !s.limit_at_start {
                    share.join(c.nodes[i].pid())?;
                }
            }
            wait_balanced(&c, "6 nodes")?;
            split_to(&c, s.shards, s.split_to)?;
            let balanced = wait_balanced(&c, "6 nodes, split")?;
            wait_trims_persisted(&c)?;
            Ok(balanced)
        })();
        stop.store(true, Ordering::Relaxed);
        result
    })?;
    let (written, failed) = (written.into_inner(), failed.into_inner());
    println!(
        "  rebalanced onto 6 nodes in {:.1} s: {written} writes during it, {failed} failed",
        started.elapsed().as_secs_f64()
    );
    report_bytes(&after);
    flush_and_settle(&c, s)?;
    println!("  after {:.0} s of settling:", s.settle.as_secs_f64());
    report_bytes(&load_per_node(&c)?);
    report_idle(&c, 5.0, s);
    // The same rows, later: both loads insert rows that do not exist yet.
    let hours = i64::try_from(s.dataset.hours).unwrap_or(0);
    let later = shifted(&batches, (hours + 1) * 3_600_000_000_000);
    let (before, engine) = (cpu_per_node(&c), engine_per_node(&c));
    let secs = load_spread(&c.urls(), "ebb", &later, 6 * s.clients_per_node)?;
    let six = rows / secs;
    println!("  6 nodes   {six:>10.0} rows/s ({secs:.2} s)");
    report_cpu(&before, &cpu_per_node(&c), secs, s);
    report_engine(&engine, &engine_per_node(&c));
    let line = Comparison {
        bench: "scale".into(),
        metric: "rows_per_sec".into(),
        params: vec![
            ("nodes".into(), "6".into()),
            ("dataset".into(), s.dataset.label()),
            (
                "shards".into(),
                match s.split_to > s.shards {
                    true => format!("{}to{}", s.shards, s.split_to),
                    false => s.shards.to_string(),
                },
            ),
        ],
        ebb: six,
        baseline: "nodes3".into(),
        base: three,
        better: Better::Higher,
    };
    println!("{}", line.line());
    drop(c);
    drop(shares);
    if failed > 0 {
        return Err(format!("{failed} writes failed while the cluster rebalanced"));
    }
    Ok(())
}
