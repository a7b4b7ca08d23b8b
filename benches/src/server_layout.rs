//! The KiWi+ layout and Rosetta filters as a server runs them, through SQL: a table with
//! retention whose data sits in levels 1 to 3, on the default engine (tuned tiles, range
//! filters) and on the classic layout (h = 1, no range filters), measured in the same run:
//! bytes rewritten by `DELETE ... WHERE time` of 10% of the table, and the latency of one-host
//! one-hour queries.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ebb_query::lp::Precision;
use ebb_query::{Database, SqlSession};
use ebb_storage::{Options, TileLayout};

use crate::report::{Better, Comparison};
use crate::workload::WriteSync;

/// Settings of one run.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Hosts (series).
    pub hosts: u64,
    /// Points per host.
    pub points: u64,
    /// Seconds between two points of a host.
    pub step_secs: u64,
    /// One-host one-hour queries timed.
    pub queries: u64,
    /// Decoded page cache per side, bytes.
    pub page_cache: usize,
    /// When writes are made durable (both sides).
    pub sync: WriteSync,
}

const HOUR_NS: i64 = 3_600_000_000_000;

fn step_ns(s: &Settings) -> i64 {
    s.step_secs.max(1) as i64 * 1_000_000_000
}

fn options(s: &Settings, tuned: bool) -> Options {
    let base = Options {
        page_cache_bytes: s.page_cache,
        write_buffer_size: 2 << 20,
        base_level_size: 4 << 20,
        target_file_size: 2 << 20,
        memtable_max_age: None,
        sync: s.sync.engine(),
        ..Options::default()
    };
    if tuned {
        base
    } else {
        Options { tiles: TileLayout::Fixed(vec![1]), range_filter: None, ..base }
    }
}

struct Run {
    delete_bytes: u64,
    query_ms: f64,
    levels: String,
    layout: String,
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

async fn run_one(dir: &Path, s: &Settings, tuned: bool, start_ns: i64) -> Result<Run, String> {
    let db = Arc::new(Database::open(dir, options(s, tuned)).map_err(err)?);
    let sql = SqlSession::new(db.clone(), "public");
    sql.query("CREATE TABLE cpu (host TAG, usage FLOAT) WITH (retention = '3650d')")
        .await
        .map_err(err)?;
    // Time order, all hosts per time slice, as collectors write.
    let mut body = String::new();
    for p in 0..s.points {
        let t = start_ns + p as i64 * step_ns(s);
        for h in 0..s.hosts {
            body.push_str(&format!("cpu,host=h{h} usage={}.5 {t}\n", (p * 7 + h) % 100));
        }
        if body.len() > 1 << 20 || p + 1 == s.points {
            db.write_lines("public", &body, Precision::Nanoseconds, 0).map_err(err)?;
            body.clear();
        }
    }
    db.flush().map_err(err)?;
    let engine = db.engine();
    engine.wait_for_background().map_err(err)?;
    let st = engine.stats();
    let levels = st
        .levels
        .iter()
        .enumerate()
        .filter(|(_, l)| l.files > 0)
        .map(|(i, l)| format!("L{i}:{}MB", l.bytes >> 20))
        .collect::<Vec<_>>()
        .join(" ");
    let layout = format!("{:?} ({})", engine.layout().tile_pages, engine.layout().reason);

    // One-host one-hour queries over the whole span.
    let span = s.points as i64 * step_ns(s);
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut total = Duration::ZERO;
    for _ in 0..s.queries {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let host = rng % s.hosts;
        let t0 = start_ns + ((rng >> 20) as i64).rem_euclid((span - HOUR_NS).max(1));
        let q = format!(
            "SELECT count(*), avg(usage) FROM cpu WHERE host = 'h{host}' \
             AND time >= to_timestamp_nanos({t0}) AND time < to_timestamp_nanos({})",
            t0 + HOUR_NS
        );
        let t = Instant::now();
        let out = sql.query(&q).await.map_err(err)?;
        total += t.elapsed();
        if out.iter().map(|b| b.num_rows()).sum::<usize>() != 1 {
            return Err("a one-host query returned no row".into());
        }
    }
    let query_ms = total.as_secs_f64() * 1e3 / s.queries.max(1) as f64;

    // DELETE of 10% of the table's time span, in the middle.
    let before = engine.stats().window_bytes_written;
    let (d0, d1) = (start_ns + span * 4 / 10, start_ns + span / 2);
    let delete = format!(
        "DELETE FROM cpu WHERE time >= to_timestamp_nanos({d0}) AND time < to_timestamp_nanos({d1})"
    );
    sql.query(&delete).await.map_err(err)?;
    engine.wait_for_background().map_err(err)?;
    let delete_bytes = engine.stats().window_bytes_written - before;
    Ok(Run { delete_bytes, query_ms, levels, layout })
}

/// Runs both sides; the two comparisons.
pub fn run(work: &Path, s: &Settings) -> Result<Vec<Comparison>, String> {
    eprintln!(
        "server-layout: {} hosts x {} points every {} s, {} queries, page cache {} B, sync={}",
        s.hosts,
        s.points,
        s.step_secs,
        s.queries,
        s.page_cache,
        s.sync.name()
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(err)?;
    // Recent data, inside the retention.
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_err(err)?.as_nanos()
            as i64;
    let start = now - s.points as i64 * step_ns(s) - HOUR_NS;
    let ebb = rt.block_on(run_one(&work.join("tuned"), s, true, start))?;
    let h1 = rt.block_on(run_one(&work.join("h1"), s, false, start))?;
    for (name, r) in [("tuned", &ebb), ("h1", &h1)] {
        eprintln!(
            "  {name}: {} | layout {} | delete rewrote {} bytes | one-host hour {:.3} ms",
            r.levels, r.layout, r.delete_bytes, r.query_ms
        );
    }
    let cmp = |metric: &str, mut params: Vec<(String, String)>, a: f64, b: f64| Comparison {
        bench: "server".into(),
        metric: metric.into(),
        params: {
            params.push(("sync".into(), s.sync.name().into()));
            params
        },
        ebb: a,
        baseline: "h1".into(),
        base: b,
        better: Better::Lower,
    };
    Ok(vec![
        cmp(
            "window_delete_bytes",
            vec![("sel".into(), "10".into())],
            ebb.delete_bytes.max(1) as f64,
            h1.delete_bytes as f64,
        ),
        cmp("one_host_query_ms", Vec::new(), ebb.query_ms, h1.query_ms),
    ])
}
