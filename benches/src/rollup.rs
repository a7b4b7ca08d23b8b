//! Rollups as a server keeps them, in process: the same line-protocol load written into a
//! database with a rollup (maintained once a second by a background thread, as the server
//! does) and into one without, measured in the same run; then a dashboard query (per region and
//! hour, over the whole load) answered by the rollup against the same aggregate computed from
//! the raw rows.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ebb_query::lp::Precision;
use ebb_query::{Database, SqlSession};
use ebb_storage::Options;

use crate::report::{Better, Comparison};

/// `ebb-bench rollup`.
#[derive(Debug, Clone, clap::Args)]
pub struct RollupArgs {
    /// Hosts (series).
    #[arg(long, default_value_t = 1_000)]
    pub hosts: u64,
    /// Points per host.
    #[arg(long, default_value_t = 1_440)]
    pub points: u64,
    /// Seconds between two points of a host.
    #[arg(long, default_value_t = 10)]
    pub step_secs: u64,
    /// Points per write request.
    #[arg(long, default_value_t = 5_000)]
    pub batch: u64,
    /// Times each query runs (the median is reported).
    #[arg(long, default_value_t = 20)]
    pub queries: u64,
    /// Working directory (default: a temporary directory, removed afterwards).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
}

impl RollupArgs {
    /// The smallest run (`--quick`): 20 hosts x 360 points, 5 queries.
    pub fn quick(&mut self) {
        self.hosts = 20;
        self.points = 360;
        self.queries = 5;
    }

    /// Runs the benchmark in `work`.
    pub fn run(&self, work: &Path) -> Result<Vec<Comparison>, String> {
        run(work, self)
    }
}

const ROLLUP: &str = "CREATE MATERIALIZED VIEW cpu_1h AS SELECT date_bin(INTERVAL '1 hour', time) \
                      AS time, region, count(*) AS n, avg(usage) AS usage, max(usage) AS peak \
                      FROM cpu GROUP BY 1, region";
const FROM_ROLLUP: &str = "SELECT time, region, n, usage, peak FROM cpu_1h ORDER BY 1, 2";
const FROM_RAW: &str = "SELECT date_bin(INTERVAL '1 hour', time) AS time, region, count(*) AS n, \
                        avg(usage) AS usage, max(usage) AS peak FROM cpu GROUP BY 1, 2 ORDER BY 1, 2";

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The load's request bodies: `batch` points each, hosts interleaved per time step.
fn bodies(s: &RollupArgs, start_ns: i64) -> Vec<String> {
    let mut out = Vec::new();
    let mut body = String::new();
    let mut n = 0;
    for p in 0..s.points {
        let t = start_ns + (p * s.step_secs.max(1)) as i64 * 1_000_000_000;
        for h in 0..s.hosts {
            let usage = (h * 31 + p * 17) % 1000;
            body.push_str(&format!("cpu,host=h{h},region=r{} usage={usage}.5 {t}\n", h % 8));
            n += 1;
            if n % s.batch.max(1) == 0 {
                out.push(std::mem::take(&mut body));
            }
        }
    }
    if !body.is_empty() {
        out.push(body);
    }
    out
}

struct Side {
    db: Arc<Database>,
    rows_per_s: f64,
    /// Seconds the rollup took to catch up after the last write.
    catch_up_s: f64,
}

fn load(dir: &Path, s: &RollupArgs, start_ns: i64, rollup: bool) -> Result<Side, String> {
    let db = Arc::new(Database::open(dir, Options::default()).map_err(err)?);
    let all = bodies(s, start_ns);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(err)?;
    // The table exists (first request), then the rollup, then the load.
    db.write_lines("public", &all[0], Precision::Nanoseconds, start_ns).map_err(err)?;
    if rollup {
        let session = SqlSession::new(db.clone(), "public");
        rt.block_on(session.query(ROLLUP)).map_err(err)?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let keeper = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if rollup {
                    db.maintain_rollups().expect("maintain");
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        })
    };
    let t0 = Instant::now();
    for b in &all[1..] {
        db.write_lines("public", b, Precision::Nanoseconds, start_ns).map_err(err)?;
    }
    let secs = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    keeper.join().map_err(|_| "the maintenance thread failed".to_string())?;
    let t1 = Instant::now();
    if rollup {
        db.maintain_rollups().map_err(err)?;
    }
    let catch_up_s = t1.elapsed().as_secs_f64();
    let rows = (s.hosts * s.points) as f64 - all[0].lines().count() as f64;
    Ok(Side { db, rows_per_s: rows / secs, catch_up_s })
}

fn median_ms(
    s: &RollupArgs,
    session: &SqlSession,
    sql: &str,
    rt: &tokio::runtime::Runtime,
) -> Result<(f64, usize), String> {
    let mut times = Vec::new();
    let mut rows = 0;
    for _ in 0..s.queries.max(1) {
        let t = Instant::now();
        let b = rt.block_on(session.query(sql)).map_err(err)?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        rows = b.iter().map(|b| b.num_rows()).sum();
    }
    times.sort_by(f64::total_cmp);
    Ok((times[times.len() / 2], rows))
}

fn run(work: &Path, s: &RollupArgs) -> Result<Vec<Comparison>, String> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_err(err)?;
    let start_ns = now.as_nanos() as i64 - (s.points * s.step_secs.max(1)) as i64 * 1_000_000_000;
    eprintln!("loading {} hosts x {} points without a rollup", s.hosts, s.points);
    let plain = load(&work.join("plain"), s, start_ns, false)?;
    eprintln!("loading the same with a rollup");
    let with = load(&work.join("rollup"), s, start_ns, true)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(err)?;
    let session = SqlSession::new(with.db.clone(), "public");
    let answers = |sql| rt.block_on(session.query(sql)).map_err(err);
    let (a, b) = (answers(FROM_ROLLUP)?, answers(FROM_RAW)?);
    let text = |x: &[datafusion::arrow::array::RecordBatch]| {
        datafusion::arrow::util::pretty::pretty_format_batches(x)
            .map(|t| t.to_string())
            .map_err(err)
    };
    if text(&a)? != text(&b)? {
        return Err("the rollup's answer differs from the raw aggregate".into());
    }
    eprintln!("querying (median of {})", s.queries);
    let (rollup_ms, rows) = median_ms(s, &session, FROM_ROLLUP, &rt)?;
    let (raw_ms, _) = median_ms(s, &session, FROM_RAW, &rt)?;
    eprintln!(
        "the rollup caught up {:.2}s after the last write; {rows} result rows",
        with.catch_up_s
    );
    let params = vec![
        ("hosts".to_string(), s.hosts.to_string()),
        ("points".to_string(), s.points.to_string()),
    ];
    Ok(vec![
        Comparison {
            bench: "rollup".into(),
            metric: "ingest_rows_per_s".into(),
            params: params.clone(),
            ebb: with.rows_per_s,
            baseline: "no_rollup".into(),
            base: plain.rows_per_s,
            better: Better::Higher,
        },
        Comparison {
            bench: "rollup".into(),
            metric: "hourly_by_region_ms".into(),
            params,
            ebb: rollup_ms,
            baseline: "raw_aggregate".into(),
            base: raw_ms,
            better: Better::Lower,
        },
    ])
}
