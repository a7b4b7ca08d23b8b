//! `ebb-bench deletes`: timely deletion (note 004's experiments at small scale).
//!
//! - **fade**: E1/E5 on a logical clock. Inserts, updates of a hot set and deletes of recently
//!   inserted keys; with FADE (`delete_deadline`) against saturation-only compaction in the same
//!   run. Reports the share of deletes still unpersisted past the deadline, the oldest one, and
//!   space amplification at the end.
//! - **window**: time-window deletes of 1-50% of a high-cardinality time series (many series, few
//!   points each, so every classic page spans all times): bytes read and written, pages dropped,
//!   KiWi+ against the classic layout (`h = 1`).
//! - **reads**: point lookups and one-series scans on the same data, KiWi+ against `h = 1`.
//! - **series**: the time-series variant (E8): a daily-style retention purge of the oldest 1/30
//!   on low-cardinality data (long series, zone maps alone drop pages) and on high-cardinality
//!   data (where the tiles matter).

use std::path::Path;
use std::time::{Duration, Instant};

use ebb_storage::{Clock, Compression, Engine, ManualClock, Options};
use rand::seq::SliceRandom;
use rand::Rng;

use crate::report::{Better, Comparison};
use crate::workload::{rng, WriteSync};

fn err(e: ebb_storage::Error) -> String {
    e.to_string()
}

fn line(
    s: &Settings,
    metric: &str,
    params: &[(&str, String)],
    ebb: f64,
    base_name: &str,
    base: f64,
    better: Better,
) {
    let c = Comparison {
        bench: "deletes".into(),
        metric: metric.into(),
        params: params
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .chain([("sync".to_string(), s.sync.name().to_string())])
            .collect(),
        ebb,
        baseline: base_name.into(),
        base,
        better,
    };
    println!("{}", c.line());
}

/// Key of series `s` at time `t` (the default delete-key extractor reads the trailing `t`).
fn key(s: u64, t: u64) -> Vec<u8> {
    let mut k = s.to_be_bytes().to_vec();
    k.extend_from_slice(&t.to_be_bytes());
    k
}

/// Settings shared by the parts.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Rows of the time-series data sets.
    pub rows: u64,
    /// Operations of the FADE workload.
    pub fade_ops: u64,
    /// KiWi+ tile sizes per level (levels 0, 1, 2, ...; the last repeats).
    pub kiwi_tiles: Vec<usize>,
    /// When writes are made durable (every side).
    pub sync: WriteSync,
}

fn ts_options(tiles: &[usize], sync: WriteSync) -> Options {
    Options {
        write_buffer_size: 4 << 20,
        target_file_size: 4 << 20,
        base_level_size: 8 << 20,
        page_size: 4096,
        tiles: ebb_storage::TileLayout::Fixed(tiles.to_vec()),
        compression: Compression::Lz4,
        page_cache_bytes: 8 << 20,
        delete_deadline: None,
        memtable_max_age: None,
        sync: sync.engine(),
        ..Options::default()
    }
}

/// Loads `series` x `points` rows, 32-byte values; times are random in `[0, span)` when
/// `random_times`, else evenly spaced. Returns the engine and the next sequence number.
fn load(
    dir: &Path,
    (tiles, sync): (&[usize], WriteSync),
    series: u64,
    points: u64,
    random_times: bool,
) -> Result<(Engine, u64), String> {
    let e = Engine::open(dir, ts_options(tiles, sync)).map_err(err)?;
    let span = 1_000_000u64;
    let mut r = rng(7);
    let mut rows: Vec<(u64, u64)> = Vec::with_capacity((series * points) as usize);
    for s in 0..series {
        for p in 0..points {
            let t = if random_times { r.gen_range(0..span) } else { p * span / points };
            rows.push((s, t));
        }
    }
    rows.shuffle(&mut r);
    let value = [b'v'; 32];
    let mut seq = 0;
    for (s, t) in rows {
        seq += 1;
        e.put(key(s, t), value.to_vec(), seq).map_err(err)?;
    }
    e.compact_range(None, None).map_err(err)?;
    Ok((e, seq + 1))
}

/// Figures of one time-window delete.
#[derive(Debug, Clone, Copy, Default)]
struct WindowFigures {
    bytes_read: u64,
    bytes_written: u64,
    pages_dropped: u64,
    pages_read: u64,
    data_bytes: u64,
    ms: f64,
}

/// Copies every file of `from` into a fresh directory `to`.
fn copy_dir(from: &Path, to: &Path) -> Result<(), String> {
    let io = |e: std::io::Error| format!("copying {}: {e}", from.display());
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).map_err(io)?;
    for entry in std::fs::read_dir(from).map_err(io)? {
        let entry = entry.map_err(io)?;
        std::fs::copy(entry.path(), to.join(entry.file_name())).map_err(io)?;
    }
    Ok(())
}

/// One time-window delete on a copy of the loaded engine in `base` (next sequence number `seq`).
fn run_window(
    base: &Path,
    dir: &Path,
    (tiles, sync): (&[usize], WriteSync),
    seq: u64,
    t_lo: u64,
    t_hi: u64,
) -> Result<WindowFigures, String> {
    copy_dir(base, dir)?;
    let e = Engine::open(dir, ts_options(tiles, sync)).map_err(err)?;
    let data_bytes = e.stats().levels.iter().map(|l| l.bytes).sum();
    let start = Instant::now();
    e.delete_time_range(t_lo, t_hi, Vec::new(), Vec::new(), seq).map_err(err)?;
    e.wait_for_background().map_err(err)?;
    let ms = start.elapsed().as_secs_f64() * 1e3;
    let st = e.stats();
    e.close().map_err(err)?;
    let _ = std::fs::remove_dir_all(dir);
    Ok(WindowFigures {
        bytes_read: st.window_bytes_read,
        bytes_written: st.window_bytes_written,
        pages_dropped: st.window_pages_dropped,
        pages_read: st.window_pages_read,
        data_bytes,
        ms,
    })
}

/// Part `window`: bytes read and rewritten by time-window deletes, KiWi+ against `h = 1`.
pub fn window(work: &Path, s: &Settings) -> Result<(), String> {
    let series = s.rows / 50;
    println!("window: {series} series x 50 points at random times, 32-byte values, lz4; KiWi+ tiles {:?}", s.kiwi_tiles);
    // Each layout is loaded once; every delete runs on a fresh copy of it.
    let kiwi_base = work.join("w-kiwi-base");
    let h1_base = work.join("w-h1-base");
    let (e, seq) = load(&kiwi_base, (&s.kiwi_tiles, s.sync), series, 50, true)?;
    print_levels("kiwi+", &e);
    e.close().map_err(err)?;
    let (e, seq_h1) = load(&h1_base, (&[1], s.sync), series, 50, true)?;
    print_levels("h=1", &e);
    e.close().map_err(err)?;
    for sel in [1u64, 5, 10, 20, 50] {
        // An interior window (two-sided), the harder case for page drops.
        let t_lo = 200_000;
        let t_hi = t_lo + sel * 10_000;
        let k =
            run_window(&kiwi_base, &work.join("w-kiwi"), (&s.kiwi_tiles, s.sync), seq, t_lo, t_hi)?;
        let c = run_window(&h1_base, &work.join("w-h1"), (&[1], s.sync), seq_h1, t_lo, t_hi)?;
        for (name, f) in [("kiwi+", k), ("h=1", c)] {
            println!(
                "  sel={sel:>2}% {name:<6} data={}KiB read={}KiB written={}KiB pages dropped={} read={} time={:.0}ms",
                f.data_bytes >> 10, f.bytes_read >> 10, f.bytes_written >> 10, f.pages_dropped, f.pages_read, f.ms
            );
        }
        let p = [("sel", sel.to_string())];
        line(
            s,
            "bytes_rewritten",
            &p,
            k.bytes_written as f64,
            "h1",
            c.bytes_written as f64,
            Better::Lower,
        );
        line(s, "bytes_read", &p, k.bytes_read as f64, "h1", c.bytes_read as f64, Better::Lower);
    }
    let _ = std::fs::remove_dir_all(&kiwi_base);
    let _ = std::fs::remove_dir_all(&h1_base);
    Ok(())
}

/// Prints the loaded data's size per level.
fn print_levels(name: &str, e: &Engine) {
    let levels: Vec<String> = e
        .stats()
        .levels
        .iter()
        .enumerate()
        .filter(|(_, l)| l.files > 0)
        .map(|(i, l)| format!("L{i} {} files {} KiB", l.files, l.bytes >> 10))
        .collect();
    println!("  {name:<6} loaded: {}", levels.join(", "));
}

/// Part `reads`: point lookups and one-series scans, KiWi+ against `h = 1`.
pub fn reads(work: &Path, s: &Settings) -> Result<(), String> {
    let series = s.rows / 50;
    println!("reads: {series} series x 50 points; KiWi+ tiles {:?}", s.kiwi_tiles);
    let mut results = Vec::new();
    for (name, tiles) in [("kiwi+", s.kiwi_tiles.clone()), ("h=1", vec![1])] {
        let dir = work.join(format!("r-{}", if name == "h=1" { "h1" } else { "kiwi" }));
        let (e, _) = load(&dir, (&tiles, s.sync), series, 50, true)?;
        let mut r = rng(11);
        // Present keys: the first rows of the load's random sequence (same seed).
        let mut present = Vec::new();
        {
            let mut lr = rng(7);
            for s in 0..series.min(2_000) {
                for _ in 0..50 {
                    present.push(key(s, lr.gen_range(0..1_000_000u64)));
                }
            }
        }
        let (mut hits, mut misses) = (Vec::new(), Vec::new());
        for i in 0..100_000 {
            let k = if i % 2 == 0 {
                present[r.gen_range(0..present.len())].clone()
            } else {
                key(r.gen_range(0..series), r.gen_range(0..1_000_000))
            };
            let t = Instant::now();
            let found = e.get(&k, None).map_err(err)?.is_some();
            let us = t.elapsed().as_secs_f64() * 1e6;
            if i % 2 == 0 {
                if !found {
                    return Err(format!("{name}: a loaded key was not found"));
                }
                hits.push(us);
            } else {
                misses.push(us);
            }
        }
        let lookups: Vec<f64> = hits.iter().chain(&misses).copied().collect();
        let mut scans = Vec::new();
        for _ in 0..20_000 {
            let sr = r.gen_range(0..series);
            let t = Instant::now();
            let n = e.scan(key(sr, 0)..key(sr + 1, 0), None).map_err(err)?.count();
            scans.push(t.elapsed().as_secs_f64() * 1e6);
            assert!(n <= 50);
        }
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        println!(
            "  {name:<6} lookup mean {:.2}us (present {:.2}us, absent {:.2}us)  series scan mean {:.2}us",
            mean(&lookups),
            mean(&hits),
            mean(&misses),
            mean(&scans)
        );
        results.push((mean(&lookups), mean(&scans), mean(&hits), mean(&misses)));
        e.close().map_err(err)?;
        let _ = std::fs::remove_dir_all(&dir);
    }
    let (k, c) = (results[0], results[1]);
    line(s, "lookup_mean", &[], k.0, "h1", c.0, Better::Lower);
    line(s, "lookup_mean_present", &[], k.2, "h1", c.2, Better::Lower);
    line(s, "lookup_mean_absent", &[], k.3, "h1", c.3, Better::Lower);
    line(s, "scan_mean", &[], k.1, "h1", c.1, Better::Lower);
    Ok(())
}

/// Part `series`: a retention purge of the oldest 1/30 at low and high cardinality.
pub fn series(work: &Path, s: &Settings) -> Result<(), String> {
    for (label, series, points, random) in [
        ("low-cardinality", 100u64, s.rows / 100, false),
        ("high-cardinality", s.rows / 20, 20, true),
    ] {
        let mut figures = Vec::new();
        for (name, tiles) in [("kiwi", s.kiwi_tiles.clone()), ("h1", vec![1])] {
            let base = work.join(format!("s-{name}-base"));
            let (e, seq) = load(&base, (&tiles, s.sync), series, points, random)?;
            e.close().map_err(err)?;
            let dir = work.join(format!("s-{name}"));
            figures.push(run_window(&base, &dir, (&tiles, s.sync), seq, 0, 1_000_000 / 30)?);
            let _ = std::fs::remove_dir_all(&base);
        }
        let (k, c) = (figures[0], figures[1]);
        println!(
            "  {label}: {series} series x {points}: rewritten kiwi+ {}KiB vs h=1 {}KiB; pages dropped {} vs {}",
            k.bytes_written >> 10, c.bytes_written >> 10, k.pages_dropped, c.pages_dropped
        );
        let p = [("data", label.to_string())];
        line(
            s,
            "purge_bytes_rewritten",
            &p,
            k.bytes_written as f64,
            "h1",
            c.bytes_written as f64,
            Better::Lower,
        );
    }
    Ok(())
}

/// Outcome of one FADE run.
#[derive(Debug, Clone, Copy)]
struct FadeFigures {
    stale_pct: f64,
    oldest_ms: u64,
    space_amp: f64,
    bytes_compacted: u64,
}

/// E1/E5 on a logical clock: 1,024 operations per logical second.
fn run_fade(
    dir: &Path,
    (ops, sync): (u64, WriteSync),
    deadline: Option<Duration>,
    d_th_ms: u64,
) -> Result<FadeFigures, String> {
    let clock = ManualClock::new(1_700_000_000_000);
    let opts = Options {
        write_buffer_size: 256 << 10,
        target_file_size: 256 << 10,
        base_level_size: 2560 << 10,
        page_size: 4096,
        compression: Compression::None,
        memtable_max_age: None,
        delete_deadline: deadline,
        clock: Clock::manual(&clock),
        sync: sync.engine(),
        ..Options::default()
    };
    let e = Engine::open(dir, opts).map_err(err)?;
    let mut r = rng(3);
    let value = vec![b'x'; 1000];
    let mut live: Vec<u64> = Vec::new();
    let mut next = 0u64;
    let mut seq = 0u64;
    for i in 0..ops {
        seq += 1;
        let dice = r.gen_range(0..100);
        if dice < 8 && live.len() > 64 {
            // Delete a recently inserted key (E5: deletes target recent keys).
            let idx = live.len() - 1 - r.gen_range(0..64usize);
            let k = live.swap_remove(idx);
            e.delete(key(k, 0), seq).map_err(err)?;
        } else if dice < 50 && live.len() > 100 {
            // Update a hot key (the tree barely grows).
            let k = live[r.gen_range(0..100usize)];
            e.put(key(k, 0), value.clone(), seq).map_err(err)?;
        } else {
            e.put(key(next, 0), value.clone(), seq).map_err(err)?;
            live.push(next);
            next += 1;
        }
        if i % 1024 == 1023 {
            clock.advance(1_000);
            e.wait_for_background().map_err(err)?;
        }
    }
    e.wait_for_background().map_err(err)?;
    let now = clock.now_ms();
    let dels = e.deletions();
    let stale = dels
        .iter()
        .filter(|d| !d.is_persisted() && now.saturating_sub(d.issued_at_ms) > d_th_ms)
        .count();
    let oldest =
        dels.iter().filter(|d| !d.is_persisted()).map(|d| now - d.issued_at_ms).max().unwrap_or(0);
    let st = e.stats();
    let on_disk: u64 = st.levels.iter().map(|l| l.bytes).sum();
    let live_bytes = live.len() as u64 * (16 + 1000);
    let f = FadeFigures {
        stale_pct: 100.0 * stale as f64 / dels.len().max(1) as f64,
        oldest_ms: oldest,
        space_amp: on_disk.saturating_sub(live_bytes) as f64 / live_bytes.max(1) as f64,
        bytes_compacted: st.bytes_compacted,
    };
    e.close().map_err(err)?;
    let _ = std::fs::remove_dir_all(dir);
    Ok(f)
}

/// KiWi+ tile sizes for our levels 0.. from the cost model, for a read-mostly epoch: 100,000
/// point lookups (half of absent keys) and 1,000 short scans per time-window delete, 4 MiB files
/// of 4 KiB pages, T = 10, 10 bits per key.
pub fn default_kiwi_tiles() -> Vec<usize> {
    let mix = ebb_storage::kiwi::WorkloadMix {
        empty_lookups: 50_000.0,
        lookups: 50_000.0,
        short_scans: 1_000.0,
        window_deletes: 1.0,
    };
    ebb_storage::kiwi::tile_pages(&mix, 5, 10, 1024, 0.0082)
}

/// Part `fade`: delete persistence with FADE against saturation-only compaction.
pub fn fade(work: &Path, s: &Settings) -> Result<(), String> {
    let runtime_ms = s.fade_ops * 1000 / 1024;
    for frac in [4u64, 2] {
        let d_th_ms = runtime_ms / frac;
        let d = Duration::from_millis(d_th_ms);
        let with = run_fade(&work.join("fade"), (s.fade_ops, s.sync), Some(d), d_th_ms)?;
        let without = run_fade(&work.join("sat"), (s.fade_ops, s.sync), None, d_th_ms)?;
        println!(
            "  D_th={}s ({}% of the run): stale {:.2}% vs {:.2}%, oldest unpersisted {}s vs {}s, space amp {:.3} vs {:.3}, compacted {}MiB vs {}MiB",
            d_th_ms / 1000, 100 / frac, with.stale_pct, without.stale_pct, with.oldest_ms / 1000, without.oldest_ms / 1000,
            with.space_amp, without.space_amp, with.bytes_compacted >> 20, without.bytes_compacted >> 20
        );
        let p = [("dth_pct", (100 / frac).to_string())];
        line(
            s,
            "stale_deletes_pct",
            &p,
            with.stale_pct,
            "saturation",
            without.stale_pct,
            Better::Lower,
        );
        line(s, "space_amp", &p, with.space_amp, "saturation", without.space_amp, Better::Lower);
        line(
            s,
            "bytes_compacted",
            &p,
            with.bytes_compacted as f64,
            "saturation",
            without.bytes_compacted as f64,
            Better::Lower,
        );
    }
    Ok(())
}
