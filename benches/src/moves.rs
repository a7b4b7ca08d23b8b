//! Foreground writes while replicas move: a three-node cluster (every node holds every shard)
//! holding preloaded rows takes a fourth node, which receives its share of replicas as
//! snapshots, while a writer sends small requests at a steady rate. Run with the replicas'
//! senders limited (`--move-rate`) and unlimited, in the same run: the write latency during the
//! moves, and how long they took.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::cluster_nodes::{Cluster, ClusterSettings, MoveRate};
use crate::report::{Better, Comparison};
use crate::tsbs::agent;

/// `ebb-bench moves`.
#[derive(Debug, clap::Args)]
pub struct MovesArgs {
    /// Rows written before the fourth node joins.
    #[arg(long, default_value_t = 2_000_000)]
    pub rows: u64,
    /// The limit, in MiB a second each node sends moving replicas at.
    #[arg(long, default_value_t = 8)]
    pub rate_mib: u64,
    /// Write requests a second during the moves.
    #[arg(long, default_value_t = 50)]
    pub writes_per_sec: u64,
    /// Lines per write request.
    #[arg(long, default_value_t = 100)]
    pub lines: u64,
    /// Working directory (default: a temporary directory, removed afterwards).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// Latencies (ms) of requests sent before the join, and during the moves; the moves' seconds.
struct Run {
    before: Vec<f64>,
    during: Vec<f64>,
    failed: usize,
    move_secs: f64,
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn lines(from: u64, n: u64, t0: i64) -> String {
    (from..from + n)
        .map(|i| {
            format!("m,host=h{},dc=d{} v={}.5,n={i}i {}\n", i % 997, i % 7, i % 1000, t0 + i as i64)
        })
        .collect()
}

impl MovesArgs {
    /// The smallest run (`--quick`): 20,000 rows.
    pub fn quick(&mut self) {
        self.rows = 20_000;
    }

    fn one(&self, work: &Path, rate: MoveRate) -> Result<Run, String> {
        let settings =
            ClusterSettings { shards: 4, replication: 3, snapshot_every: 200, move_rate: rate };
        let mut c = Cluster::start(work, 3, settings)?;
        let urls = c.urls();
        let t0 = 1_700_000_000_000_000_000i64;
        let a = agent();
        let mut sent = 0;
        while sent < self.rows {
            let n = 10_000.min(self.rows - sent);
            let url = format!("{}/write?db=bench", urls[(sent / n) as usize % urls.len()]);
            let r = a.post(&url).send(lines(sent, n, t0).as_bytes()).map_err(|e| e.to_string())?;
            if !r.status().is_success() {
                return Err(format!("preload write: {}", r.status()));
            }
            sent += n;
        }
        let before: Vec<u64> = c.shards()?.iter().flat_map(|r| r.replicas.clone()).collect();
        let stop = AtomicBool::new(false);
        let times: Mutex<Vec<(Instant, f64, bool)>> = Mutex::new(Vec::new());
        let every = Duration::from_secs_f64(1.0 / self.writes_per_sec.max(1) as f64);
        let (join_at, done_at) = std::thread::scope(|sc| -> Result<(Instant, Instant), String> {
            sc.spawn(|| {
                let a = agent();
                let mut k = self.rows;
                let mut next = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    let body = lines(k, self.lines, t0);
                    let url = format!("{}/write?db=bench", urls[0]);
                    let at = Instant::now();
                    let ok = matches!(a.post(&url).send(body.as_bytes()), Ok(r) if r.status().is_success());
                    let ms = at.elapsed().as_secs_f64() * 1000.0;
                    times.lock().map(|mut t| t.push((at, ms, ok))).ok();
                    k += self.lines;
                    next += every;
                    if let Some(wait) = next.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                }
            });
            let result = (|| {
                std::thread::sleep(Duration::from_secs(5));
                let join_at = Instant::now();
                c.add()?;
                let mut new = None;
                c.wait_until(Duration::from_secs(600), "the new node holding its share", |rows| {
                    new = new.or_else(|| {
                        rows.iter()
                            .flat_map(|r| r.replicas.iter())
                            .find(|n| !before.contains(n))
                            .copied()
                    });
                    let held =
                        new.map_or(0, |n| rows.iter().filter(|r| r.replicas.contains(&n)).count());
                    held == 3 && rows.iter().all(|r| !r.moving && r.replicas.len() == 3)
                })?;
                // The map records a move once the new replica has the log and votes; the
                // moves are done once it has applied what the others had then.
                let id = new.ok_or("no new node in the shard map")?;
                let (n, rows) = (c.nodes.len() - 1, c.shards()?);
                let moved: Vec<u64> =
                    rows.iter().filter(|r| r.replicas.contains(&id)).map(|r| r.shard).collect();
                let seq =
                    |i: usize, s: u64| c.try_metric(i, &format!("ebb_last_seq{{shard=\"{s}\"}}"));
                let mut want = Vec::new();
                for s in &moved {
                    let mut w = 0;
                    for i in 0..n {
                        w = w.max(seq(i, *s)?.unwrap_or(0));
                    }
                    want.push((*s, w));
                }
                let deadline = Instant::now() + Duration::from_secs(600);
                for (s, w) in want {
                    while seq(n, s)?.unwrap_or(0) < w {
                        if Instant::now() > deadline {
                            return Err(format!("the new node never caught up on shard {s}"));
                        }
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
                let done_at = Instant::now();
                std::thread::sleep(Duration::from_secs(2));
                Ok((join_at, done_at))
            })();
            stop.store(true, Ordering::Relaxed);
            result
        })?;
        let times = times.into_inner().map_err(|_| "latency log poisoned".to_string())?;
        let pick = |f: &dyn Fn(Instant) -> bool| -> Vec<f64> {
            times.iter().filter(|(at, _, ok)| *ok && f(*at)).map(|(_, ms, _)| *ms).collect()
        };
        Ok(Run {
            before: pick(&|at| at < join_at),
            during: pick(&|at| at >= join_at && at < done_at),
            failed: times.iter().filter(|(_, _, ok)| !ok).count(),
            move_secs: (done_at - join_at).as_secs_f64(),
        })
    }

    /// Runs the benchmark in `work`.
    pub fn run(&self, work: &Path) -> Result<Vec<Comparison>, String> {
        let limit = MoveRate::Limit(self.rate_mib << 20);
        eprintln!("moves limited to {} MiB/s", self.rate_mib);
        let mut limited = self.one(&work.join("limited"), limit)?;
        eprintln!("moves unlimited");
        let mut free = self.one(&work.join("unlimited"), MoveRate::Unlimited)?;
        for (name, r) in [("limited", &mut limited), ("unlimited", &mut free)] {
            eprintln!(
                "{name}: moves took {:.1} s; writes before: p50 {:.1} ms p99 {:.1} ms ({} requests); \
                 during: p50 {:.1} ms p99 {:.1} ms max {:.1} ms ({} requests); {} failed",
                r.move_secs,
                percentile(&mut r.before, 0.5),
                percentile(&mut r.before, 0.99),
                r.before.len(),
                percentile(&mut r.during, 0.5),
                percentile(&mut r.during, 0.99),
                percentile(&mut r.during, 1.0),
                r.during.len(),
                r.failed
            );
        }
        let params = vec![
            ("rows".to_string(), self.rows.to_string()),
            ("rate".to_string(), format!("{}MiB", self.rate_mib)),
        ];
        let cmp = |metric: &str, ebb: f64, base: f64| Comparison {
            bench: "moves".into(),
            metric: metric.into(),
            params: params.clone(),
            ebb,
            baseline: "unlimited".into(),
            base,
            better: Better::Lower,
        };
        Ok(vec![
            cmp(
                "write_p99_ms",
                percentile(&mut limited.during, 0.99),
                percentile(&mut free.during, 0.99),
            ),
            cmp(
                "write_p50_ms",
                percentile(&mut limited.during, 0.5),
                percentile(&mut free.during, 0.5),
            ),
            cmp("move_seconds", limited.move_secs, free.move_secs),
        ])
    }
}
