//! RangeReduce on a recurring range workload: uniformly random updates interleaved with range
//! scans over a fixed set of ranges (each scanned again and again, the paper's "overlapping"
//! workload), with query-driven compaction (`range_reduce = 1/T`) and Level-Renaming on
//! against both off. Compared: bytes written by compactions, entries left in the tree (space
//! amplification) and mean scan latency.

use std::path::Path;
use std::time::Instant;

use ebb_storage::{Compression, Engine, Options, TileLayout};

use crate::report::{Better, Comparison};
use crate::workload::WriteSync;

/// Settings of one run.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Distinct keys.
    pub keys: u64,
    /// Updates after the load.
    pub updates: u64,
    /// Scans, interleaved with the updates.
    pub scans: u64,
    /// Keys per scanned range.
    pub range: u64,
    /// When writes are made durable (both sides).
    pub sync: WriteSync,
}

struct Figures {
    compaction_bytes: u64,
    entries: u64,
    scan_us: f64,
    reduces: usize,
}

fn key(i: u64) -> [u8; 8] {
    i.to_be_bytes()
}

fn run_one(dir: &Path, s: &Settings, on: bool) -> Result<Figures, String> {
    let err = |e: ebb_storage::Error| e.to_string();
    let opts = Options {
        sync: s.sync.engine(),
        write_buffer_size: 1 << 20,
        target_file_size: 1 << 20,
        base_level_size: 4 << 20,
        compression: Compression::None,
        tiles: TileLayout::Fixed(vec![1]),
        range_reduce: on.then_some(0.1),
        level_renaming: on,
        ..Options::default()
    };
    let e = Engine::open(dir, opts).map_err(err)?;
    let value = vec![b'v'; 100];
    let mut seq = 1u64;
    for i in 0..s.keys {
        e.put(key(i).to_vec(), value.clone(), seq).map_err(err)?;
        seq += 1;
    }
    e.flush().map_err(err)?;
    e.wait_for_background().map_err(err)?;
    let base = e.stats().bytes_compacted;
    let mut rng = 0x1234_5678_9abc_def1u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    // 100 fixed ranges, scanned again and again.
    let starts: Vec<u64> =
        (0..100).map(|_| next() % s.keys.saturating_sub(s.range).max(1)).collect();
    let every = (s.updates / s.scans.max(1)).max(1);
    let (mut scan_total, mut scans) = (0.0, 0u64);
    for u in 0..s.updates {
        e.put(key(next() % s.keys).to_vec(), value.clone(), seq).map_err(err)?;
        seq += 1;
        if u % every == 0 {
            let lo = starts[(next() % 100) as usize];
            let t = Instant::now();
            let n = e.scan(key(lo)..key(lo + s.range), None).map_err(err)?.count();
            scan_total += t.elapsed().as_secs_f64() * 1e6;
            scans += 1;
            if n as u64 != s.range {
                return Err(format!("a scan returned {n} of {} rows", s.range));
            }
        }
    }
    e.flush().map_err(err)?;
    e.wait_for_background().map_err(err)?;
    let st = e.stats();
    let reduces = e.compaction_history().iter().filter(|r| r.reason == "range_reduce").count();
    Ok(Figures {
        compaction_bytes: st.bytes_compacted - base,
        entries: st.levels.iter().map(|l| l.entries).sum(),
        scan_us: scan_total / scans.max(1) as f64,
        reduces,
    })
}

/// Runs both sides.
pub fn run(work: &Path, s: &Settings) -> Result<Vec<Comparison>, String> {
    let on = run_one(&work.join("reduce"), s, true)?;
    let off = run_one(&work.join("off"), s, false)?;
    for (name, f) in [("on", &on), ("off", &off)] {
        eprintln!(
            "  rangereduce {name}: {} compaction bytes, {} entries for {} keys, scan {:.1} us, \
             {} query-driven compactions",
            f.compaction_bytes, f.entries, s.keys, f.scan_us, f.reduces
        );
    }
    let cmp = |metric: &str, a: f64, b: f64| Comparison {
        bench: "range-query".into(),
        metric: metric.into(),
        params: vec![("sync".into(), s.sync.name().into())],
        ebb: a,
        baseline: "off".into(),
        base: b,
        better: Better::Lower,
    };
    Ok(vec![
        cmp(
            "rangereduce_compaction_bytes",
            on.compaction_bytes as f64,
            off.compaction_bytes as f64,
        ),
        cmp("rangereduce_entries", on.entries as f64, off.entries as f64),
        cmp("rangereduce_scan_us", on.scan_us, off.scan_us),
    ])
}
