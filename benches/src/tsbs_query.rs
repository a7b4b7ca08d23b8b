//! `ebb-bench query`: the TSBS devops query set ([`crate::tsbs_queries`]) on TSBS cpu data,
//! EbbDB (SQL over HTTP) against InfluxDB 1.x (InfluxQL over HTTP) and QuestDB (SQL over HTTP),
//! each loaded by the same client. Every query is asked right after the load (`state=fresh`:
//! EbbDB's newest rows are still in its memtables) and again after a restart
//! (`state=restarted`: EbbDB has flushed them). Then a prepared statement over the PostgreSQL
//! wire protocol (EbbDB and QuestDB), and a 30-minute time-window `DELETE` (EbbDB and InfluxDB;
//! QuestDB has no row delete).

use std::path::Path;
use std::time::{Duration, Instant, UNIX_EPOCH};

use crate::peers::{start_build, Running, System};
use crate::report::{Better, Comparison};
use crate::tsbs::{agent, generate, load, prepare, Dataset, START_S};
use crate::tsbs_queries::{instances, Dialect, NAMES};
use crate::workload::WriteSync;

/// Settings of a query run.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Timed runs per query (after one warm-up); the median is reported.
    pub reps: usize,
    /// Extra `ebb server` arguments.
    pub ebb_args: Vec<String>,
    /// When writes are durable, on every system.
    pub sync: WriteSync,
    /// Systems besides EbbDB.
    pub peers: Vec<System>,
    /// An earlier `ebb` build, measured like this one (`before`).
    pub baseline_bin: Option<std::path::PathBuf>,
}

fn dialect(s: System) -> Dialect {
    match s {
        System::QuestDb => Dialect::QuestDb,
        System::Influx => Dialect::InfluxQl,
        _ => Dialect::Ebb,
    }
}

/// Runs `q` over HTTP; returns (milliseconds, rows in the answer).
fn timed(s: &Running, q: &str) -> Result<(f64, usize), String> {
    let a = agent();
    let t = Instant::now();
    let mut resp = match s.system {
        System::Ebb => a.post(&format!("{}/v1/sql", s.url)).query("db", "bench").send(q),
        System::QuestDb => {
            a.get(&format!("{}/exec", s.url)).query("count", "false").query("query", q).call()
        }
        _ => a.post(&format!("{}/query", s.url)).query("db", "bench").query("q", q).send_empty(),
    }
    .map_err(|e| e.to_string())?;
    let body = resp.body_mut().with_config().limit(1 << 30).read_to_string();
    let body = body.map_err(|e| e.to_string())?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    if !resp.status().is_success() {
        return Err(format!("{} failed {q:?}: {}", s.system.name(), clip(&body)));
    }
    let rows = answer_rows(s.system, &body)
        .map_err(|e| format!("{} answered {q:?} with {}: {e}", s.system.name(), clip(&body)))?;
    Ok((ms, rows))
}

fn clip(s: &str) -> String {
    s.chars().take(300).collect()
}

/// Rows in an answer: EbbDB's JSON array, QuestDB's `dataset`, InfluxDB's series values.
fn answer_rows(system: System, body: &str) -> Result<usize, String> {
    let v: serde_json::Value = serde_json::from_str(body).map_err(|e| e.to_string())?;
    match system {
        System::Ebb => v.as_array().map(Vec::len).ok_or_else(|| "not an array".into()),
        System::QuestDb => v["dataset"].as_array().map(Vec::len).ok_or_else(|| "no dataset".into()),
        _ => {
            let r = &v["results"][0];
            if let Some(e) = r["error"].as_str() {
                return Err(e.to_string());
            }
            let series = r["series"].as_array().map(Vec::as_slice).unwrap_or_default();
            Ok(series.iter().filter_map(|s| s["values"].as_array()).map(Vec::len).sum())
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Waits until `rows` rows are visible (QuestDB applies its WAL asynchronously).
fn wait_visible(s: &Running, rows: usize) -> Result<(), String> {
    let q = match s.system {
        System::QuestDb => "SELECT count() FROM cpu",
        _ => return Ok(()),
    };
    let start = Instant::now();
    loop {
        let mut resp = agent()
            .get(&format!("{}/exec", s.url))
            .query("query", q)
            .call()
            .map_err(|e| e.to_string())?;
        let body = resp.body_mut().read_to_string().map_err(|e| e.to_string())?;
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let n = v["dataset"][0][0].as_u64().unwrap_or(0) as usize;
        if n >= rows {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(300) {
            return Err(format!("questdb shows {n} of {rows} rows after 5 minutes"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The one-host one-hour by-minute query (`single-groupby-1-1-1`) as a prepared statement over
/// the PostgreSQL wire protocol: prepared once, executed `reps` times with new parameters after
/// one warm-up; returns the median milliseconds.
fn prepared(s: &Running, ds: Dataset, reps: usize) -> Result<f64, String> {
    let Some(addr) = &s.pg else { return Err("no pgwire listener".into()) };
    let (host, port) = addr.rsplit_once(':').ok_or("bad pg address")?;
    let (user, password, ts) = match s.system {
        System::QuestDb => ("admin", "quest", "timestamp"),
        _ => ("ebb", "", "time"),
    };
    let bucket = match s.system {
        System::QuestDb => String::new(),
        _ => "date_bin(interval '1 minute', time, to_timestamp(0)) AS bucket, ".into(),
    };
    let tail = match s.system {
        System::QuestDb => "SAMPLE BY 1m",
        _ => "GROUP BY bucket ORDER BY bucket",
    };
    let sql = format!(
        "SELECT {bucket}max(usage_user) AS max_usage_user FROM cpu WHERE hostname = $1 \
         AND {ts} >= $2 AND {ts} < $3 {tail}"
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let mut conf = format!("host={host} port={port} user={user} dbname=bench");
        if !password.is_empty() {
            conf.push_str(&format!(" password={password}"));
        }
        let (client, conn) = tokio_postgres::connect(&conf, tokio_postgres::NoTls)
            .await
            .map_err(|e| format!("{} pgwire connect: {e}", s.system.name()))?;
        tokio::spawn(conn);
        // Types inferred by the server: the host as text, the window as timestamps.
        let stmt = client
            .prepare(&sql)
            .await
            .map_err(|e| format!("{} prepare {sql:?}: {}", s.system.name(), pg_error(&e)))?;
        let mut times = Vec::with_capacity(reps);
        for (i, inst) in instances("single-groupby-1-1-1", ds, reps + 1, 11).iter().enumerate() {
            let (h, a, b) = inst.params();
            let (a, b) = (UNIX_EPOCH + Duration::from_secs(a), UNIX_EPOCH + Duration::from_secs(b));
            let t = Instant::now();
            let rows = client
                .query(&stmt, &[&h, &a, &b])
                .await
                .map_err(|e| format!("{} execute: {}", s.system.name(), pg_error(&e)))?;
            let ms = t.elapsed().as_secs_f64() * 1e3;
            if rows.is_empty() {
                return Err(format!("{} returned no rows for {h} {a:?}..{b:?}", s.system.name()));
            }
            if i > 0 {
                times.push(ms);
            }
        }
        Ok(median(times))
    })
}

fn pg_error(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => format!("{}: {}", d.code().code(), d.message()),
        None => e.to_string(),
    }
}

/// The states the queries are asked in: right after the load (EbbDB's newest rows still in its
/// memtables), then after a restart (EbbDB flushes its memtables when it stops; each peer stops
/// as its service manager would stop it, on SIGTERM).
const STATES: [&str; 2] = ["fresh", "restarted"];

/// How long a server may take to stop on SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(300);

/// Latencies of one system on one data set: per state and query, then the prepared statement
/// and the delete (`None` where the system has none).
struct Figures {
    queries: Vec<Vec<f64>>,
    prepared: Option<f64>,
    delete: Option<f64>,
}

/// The median latency of every query in [`NAMES`], each after one warm-up.
fn queries(s: &Running, ds: Dataset, reps: usize, state: &str) -> Result<Vec<f64>, String> {
    let d = dialect(s.system);
    let mut out = Vec::new();
    for (n, name) in NAMES.iter().enumerate() {
        let inst = instances(name, ds, reps + 1, 100 + n as u64);
        let (_, rows) = timed(s, &inst[0].text(d))?; // warm-up
        let mut times = Vec::with_capacity(reps);
        let mut total = 0;
        for i in &inst[1..] {
            let (ms, r) = timed(s, &i.text(d))?;
            times.push(ms);
            total += r;
        }
        let m = median(times);
        println!(
            "  {:<16} {state:<9} {name:<24} {m:>9.2} ms  (warm-up {rows} rows, {:.1} rows per run)",
            s.system.name(),
            total as f64 / reps as f64
        );
        out.push(m);
    }
    Ok(out)
}

/// The prepared statement, then the time-window delete, on the restarted server.
fn prepared_and_delete(
    s: &Running,
    ds: Dataset,
    reps: usize,
) -> Result<(Option<f64>, Option<f64>), String> {
    let prepared = match s.system {
        System::Ebb | System::QuestDb => {
            let ms = prepared(s, ds, reps.max(20))?;
            println!("  {:<16} {:<24} {ms:>9.2} ms", s.system.name(), "prepared pgwire 1-1-1");
            Some(ms)
        }
        _ => None,
    };
    let lo = START_S + 3600;
    let (lo_s, hi_s) = (crate::tsbs_queries::rfc3339(lo), crate::tsbs_queries::rfc3339(lo + 1800));
    let delete = match s.system {
        System::Ebb | System::Influx => {
            let q = format!("DELETE FROM cpu WHERE time >= {lo_s} AND time < {hi_s}");
            let t = Instant::now();
            timed(s, &q)?;
            let ms = t.elapsed().as_secs_f64() * 1e3;
            println!("  {:<16} {:<24} {ms:>9.2} ms", s.system.name(), "delete-30min");
            Some(ms)
        }
        _ => None,
    };
    Ok((prepared, delete))
}

/// Loads `batches` into a new server of `sys` in `dir`, asks every query fresh, restarts the
/// server and asks them again, then measures the prepared statement and the delete.
fn measure(
    sys: System,
    bin: Option<&Path>,
    dir: &Path,
    ds: Dataset,
    batches: &[String],
    s: &Settings,
) -> Result<Figures, String> {
    let r = start_build(sys, bin, dir, &s.ebb_args, s.sync)?;
    prepare(&r)?;
    load(&r, batches, 4)?;
    wait_visible(&r, ds.rows())?;
    let mut queries_by_state = vec![self::queries(&r, ds, s.reps, STATES[0])?];
    r.stop(STOP_GRACE)?;
    let r = start_build(sys, bin, dir, &s.ebb_args, s.sync)?;
    wait_visible(&r, ds.rows())?;
    queries_by_state.push(self::queries(&r, ds, s.reps, STATES[1])?);
    let (prepared, delete) = prepared_and_delete(&r, ds, s.reps)?;
    Ok(Figures { queries: queries_by_state, prepared, delete })
}

/// Part `query`: every TSBS query on every data set, EbbDB against each peer.
pub fn query(work: &Path, sets: &[Dataset], s: &Settings) -> Result<(), String> {
    for ds in sets {
        let batches = generate(*ds, 5000);
        println!("query {}: {} rows, {} runs per query (median)", ds.label(), ds.rows(), s.reps);
        for sys in std::iter::once(System::Ebb).chain(s.peers.iter().copied()) {
            println!("  {:<16} durability: {}", sys.name(), sys.durability(s.sync));
        }
        let mut all = Vec::new();
        // This build, the earlier one if given (named `before`), then the peers.
        let before = s.baseline_bin.as_deref().map(|bin| ("before", System::Ebb, Some(bin)));
        let peers = s.peers.iter().map(|p| (p.name(), *p, None));
        let runs = std::iter::once(("ebb", System::Ebb, None)).chain(before).chain(peers);
        for (name, sys, bin) in runs {
            let dir = work.join(format!("q-{name}-{}", ds.label()));
            let _ = std::fs::remove_dir_all(&dir);
            all.push((name, measure(sys, bin, &dir, *ds, &batches, s)?));
            let _ = std::fs::remove_dir_all(&dir);
        }
        let ebb = &all[0].1;
        let line = |q: &str, state: Option<&str>, e: f64, peer: &str, b: f64| {
            let mut params = vec![("q".into(), q.to_string())];
            params.extend(state.map(|st| ("state".to_string(), st.to_string())));
            params.push(("dataset".into(), ds.label()));
            params.push(("sync".into(), s.sync.name().into()));
            let c = Comparison {
                bench: "query".into(),
                metric: "latency_ms".into(),
                params,
                ebb: e,
                baseline: peer.into(),
                base: b,
                better: Better::Lower,
            };
            println!("{}", c.line());
        };
        for (peer, f) in &all[1..] {
            for (st, state) in STATES.iter().enumerate() {
                for (i, name) in NAMES.iter().enumerate() {
                    line(name, Some(state), ebb.queries[st][i], peer, f.queries[st][i]);
                }
            }
            if let (Some(e), Some(b)) = (ebb.prepared, f.prepared) {
                line("prepared-single-groupby-1-1-1", None, e, peer, b);
            }
            if let (Some(e), Some(b)) = (ebb.delete, f.delete) {
                line("delete-30min", None, e, peer, b);
            }
        }
    }
    Ok(())
}
