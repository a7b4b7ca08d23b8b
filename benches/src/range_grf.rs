//! GRF against per-file Rosetta with many runs: a time-series store whose level 0 holds
//! `runs` flushes (compaction held off), each flush a time slice of every series, so every
//! run overlaps every series' key range and a one-series query cannot rule a run out by its
//! key range. Queries are one series over a short time window: `nonempty` windows anywhere in
//! the data, `empty` windows inside a run the series skipped (each series is missing from one
//! run in four). The global filter is probed once per query, Rosetta once per run, and
//! `nofilter` opens every run.

use std::path::Path;
use std::time::Instant;

use ebb_storage::filter::RangeFilterOptions;
use ebb_storage::{Compression, Engine, Options, TileLayout};

use crate::range_query::Rng;
use crate::report::{Better, Comparison};
use crate::workload::WriteSync;

/// Settings of one run.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Numbers of level-0 runs compared.
    pub runs: Vec<u64>,
    /// Series.
    pub series: u64,
    /// Points per series per run (one every 10 s).
    pub points: u64,
    /// Queries per kind.
    pub queries: u64,
    /// Query window in seconds.
    pub window_secs: u64,
    /// Page cache in bytes.
    pub cache_size: usize,
    /// When writes are made durable (every side).
    pub sync: WriteSync,
}

const STEP_NS: u64 = 10_000_000_000;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Filter {
    Global,
    Rosetta,
    None,
}

fn key(series: u64, t: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(20);
    k.extend_from_slice(&7u32.to_be_bytes());
    k.extend_from_slice(&series.to_be_bytes());
    k.extend_from_slice(&t.to_be_bytes());
    k
}

/// Series `s` has no points in run `r` when this is true.
fn skipped(s: u64, r: u64) -> bool {
    (s + r).is_multiple_of(4)
}

/// `(series, t0, t1, empty)` queries, interleaved.
fn queries(s: &Settings, runs: u64) -> Vec<(u64, u64, u64, bool)> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let run_ns = s.points * STEP_NS;
    let window = s.window_secs * 1_000_000_000;
    let mut out = Vec::new();
    let (mut empty, mut full) = (0, 0);
    while empty < s.queries || full < s.queries {
        let series = rng.next() % s.series;
        let r = rng.next() % runs;
        let t0 = r * run_ns + rng.next() % run_ns.saturating_sub(window).max(1);
        let is_empty = skipped(series, r);
        let want = if is_empty { &mut empty } else { &mut full };
        if *want < s.queries {
            *want += 1;
            out.push((series, t0, t0 + window, is_empty));
        }
    }
    out
}

struct Figures {
    /// Mean microseconds: empty, non-empty.
    latency: [f64; 2],
    /// Memory of the tables (indexes, point and range filters) and of the global filter.
    table_bytes: u64,
    global_bytes: u64,
    keys: u64,
    load_secs: f64,
    rows: u64,
}

fn run_one(dir: &Path, s: &Settings, runs: u64, filter: Filter) -> Result<Figures, String> {
    let err = |e: ebb_storage::Error| e.to_string();
    let window = s.window_secs * 1_000_000_000;
    let opts = Options {
        sync: s.sync.engine(),
        write_buffer_size: 1 << 30,
        memtable_max_age: None,
        level0_compaction_trigger: 1 << 20,
        level0_stop_writes_trigger: (1 << 20) + 1,
        page_cache_bytes: s.cache_size,
        compression: Compression::Lz4,
        tiles: TileLayout::Fixed(vec![1]),
        range_filter: (filter != Filter::None)
            .then(|| RangeFilterOptions { default_range: window, ..RangeFilterOptions::default() }),
        global_range_filter: filter == Filter::Global,
        ..Options::default()
    };
    let e = Engine::open(dir, opts).map_err(err)?;
    let value = vec![b'v'; 16];
    let mut seq = 1u64;
    let started = Instant::now();
    for r in 0..runs {
        let mut b = ebb_storage::WriteBatch::new();
        for series in (0..s.series).filter(|&x| !skipped(x, r)) {
            for p in 0..s.points {
                b.put(key(series, (r * s.points + p) * STEP_NS), value.clone());
            }
            if b.len() >= 10_000 {
                e.write(&b, seq).map_err(err)?;
                seq += b.len() as u64;
                b = ebb_storage::WriteBatch::new();
            }
        }
        if !b.is_empty() {
            e.write(&b, seq).map_err(err)?;
            seq += b.len() as u64;
        }
        e.flush().map_err(err)?;
    }
    let load_secs = started.elapsed().as_secs_f64();
    let st = e.stats();
    if st.levels[0].files as u64 != runs {
        return Err(format!("{} level-0 files, {runs} wanted", st.levels[0].files));
    }
    let qs = queries(s, runs);
    let (mut sum, mut n, mut rows) = ([0.0f64; 2], [0u64; 2], 0u64);
    for &(series, t0, t1, is_empty) in &qs {
        let t = Instant::now();
        let got = e.scan(key(series, t0)..key(series, t1), None).map_err(err)?.count() as u64;
        let c = usize::from(!is_empty);
        sum[c] += t.elapsed().as_secs_f64() * 1e6;
        n[c] += 1;
        if is_empty && got > 0 {
            return Err(format!("series {series} [{t0}, {t1}) should be empty, got {got} rows"));
        }
        rows += got;
    }
    let st = e.stats();
    eprintln!(
        "  runs={runs} {filter:?}: load {load_secs:.1}s, {} cells, probes: global {} rosetta {}, \
         skips: global {} rosetta {}, table memory {} bytes, global filter {} bytes",
        st.global_filter_cells,
        st.global_filter_probes,
        st.range_filter_probes,
        st.global_filter_skips,
        st.range_filter_skips,
        st.table_memory_bytes,
        st.global_filter_bytes,
    );
    e.close().map_err(err)?;
    Ok(Figures {
        latency: [sum[0] / n[0].max(1) as f64, sum[1] / n[1].max(1) as f64],
        table_bytes: st.table_memory_bytes,
        global_bytes: st.global_filter_bytes,
        keys: seq - 1,
        load_secs,
        rows,
    })
}

/// Runs the comparison for every run count.
pub fn run(work: &Path, s: &Settings) -> Result<Vec<Comparison>, String> {
    let mut out = Vec::new();
    for &runs in &s.runs {
        eprintln!(
            "range-query grf: {runs} runs x {} series x {} points, {} queries per kind, sync={}",
            s.series,
            s.points,
            s.queries,
            s.sync.name()
        );
        let mut figs = Vec::new();
        for (name, f) in
            [("grf", Filter::Global), ("rosetta", Filter::Rosetta), ("none", Filter::None)]
        {
            let dir = work.join(format!("grf-{runs}-{name}"));
            let fig = run_one(&dir, s, runs, f)?;
            let _ = std::fs::remove_dir_all(&dir);
            figs.push(fig);
        }
        if figs.iter().any(|f| f.rows != figs[0].rows) {
            return Err(format!("runs={runs}: the filters changed what the queries returned"));
        }
        let [g, r, none] = [&figs[0], &figs[1], &figs[2]];
        for (i, kind) in ["empty", "nonempty"].iter().enumerate() {
            let line = |baseline: &str, base: f64| Comparison {
                bench: "range-query".into(),
                metric: "grf_latency".into(),
                params: vec![
                    ("runs".into(), runs.to_string()),
                    ("kind".into(), kind.to_string()),
                    ("sync".into(), s.sync.name().into()),
                ],
                ebb: g.latency[i],
                baseline: baseline.into(),
                base,
                better: Better::Lower,
            };
            out.push(line("rosetta", r.latency[i]));
            out.push(line("nofilter", none.latency[i]));
        }
        let info = |metric: &str, ebb: f64, base: f64| Comparison {
            bench: "range-query".into(),
            metric: metric.into(),
            params: vec![("runs".into(), runs.to_string()), ("sync".into(), s.sync.name().into())],
            ebb,
            baseline: "rosetta".into(),
            base,
            better: Better::Lower,
        };
        // Rosetta's memory: the tables' memory beyond that of the same tables without it.
        let bits = |bytes: u64| bytes as f64 * 8.0 / g.keys.max(1) as f64;
        let rosetta_bytes = r.table_bytes.saturating_sub(none.table_bytes);
        out.push(info("grf_filter_bits_per_key", bits(g.global_bytes), bits(rosetta_bytes)));
        out.push(info("grf_load_secs", g.load_secs, r.load_secs));
    }
    Ok(out)
}
