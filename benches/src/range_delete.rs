//! `ebb-bench range-delete`: the GLORAN paper's balanced workload at small scale, on EbbDB and on
//! RocksDB (`DeleteRange`, through a small C++ driver built against Debian's `librocksdb-dev`).
//!
//! Preload random puts over a universe of ids, then run operations: 50% point lookups, the rest
//! writes, with RD% of all operations turned into range deletes of a fixed number of ids. Every
//! lookup is classified by an oracle as live, absent (never written) or range-deleted, so latency
//! is reported per class. Both systems run the identical operation sequence.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use ebb_storage::{Compression, Engine, Options, RangeDeleteMode, WriteBatch};
use rand::Rng;

use crate::workload::{rng, WriteSync};

/// Lookup classes.
pub const CLASSES: [&str; 3] = ["live", "absent", "deleted"];

/// Benchmark settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Key universe (ids).
    pub universe: u32,
    /// Preloaded puts.
    pub preload: u64,
    /// Measured operations.
    pub ops: u64,
    /// Ids per range delete.
    pub range_len: u32,
    /// Value size in bytes.
    pub value_size: usize,
    /// Memtable size (both systems).
    pub write_buffer_size: usize,
    /// Page / block cache (both systems).
    pub cache_size: usize,
    /// SST target size (both systems).
    pub target_file_size: u64,
    /// Level-1 target size (both systems).
    pub base_level_size: u64,
    /// When writes are made durable (both systems).
    pub sync: WriteSync,
}

/// One operation. `class` is the oracle's verdict for lookups.
#[derive(Debug, Clone, Copy)]
pub struct Op {
    /// 0 get, 1 put, 2 range delete.
    pub kind: u8,
    /// Lookup class (index into [`CLASSES`]).
    pub class: u8,
    /// Key id (range start).
    pub id: u32,
    /// Range end (exclusive).
    pub id2: u32,
}

/// A generated workload.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Ids written by the preload.
    pub preload: Vec<u32>,
    /// Measured operations.
    pub ops: Vec<Op>,
}

/// Generates the workload for `rd_percent`; deterministic per seed.
pub fn generate(s: &Settings, rd_percent: f64, seed: u64) -> Workload {
    let mut r = rng(seed);
    // Per id: 0 never written, 1 live, 2 range-deleted.
    let mut state = vec![0u8; s.universe as usize + s.range_len as usize];
    let preload: Vec<u32> = (0..s.preload).map(|_| r.gen_range(0..s.universe)).collect();
    for &id in &preload {
        state[id as usize] = 1;
    }
    let mut ops = Vec::with_capacity(s.ops as usize);
    for _ in 0..s.ops {
        let x: f64 = r.gen();
        let id = r.gen_range(0..s.universe);
        if x < 0.5 {
            let class = match state[id as usize] {
                1 => 0,
                0 => 1,
                _ => 2,
            };
            ops.push(Op { kind: 0, class, id, id2: 0 });
        } else if x < 0.5 + rd_percent / 100.0 {
            let end = id + s.range_len;
            for st in &mut state[id as usize..end as usize] {
                if *st == 1 {
                    *st = 2;
                }
            }
            ops.push(Op { kind: 2, class: 0, id, id2: end });
        } else {
            state[id as usize] = 1;
            ops.push(Op { kind: 1, class: 0, id, id2: 0 });
        }
    }
    Workload { preload, ops }
}

/// Writes the workload file the RocksDB driver reads.
pub fn write_file(w: &Workload, s: &Settings, path: &Path) -> std::io::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    f.write_all(b"EBBRDW01")?;
    f.write_all(&16u32.to_le_bytes())?;
    f.write_all(&(s.value_size as u32).to_le_bytes())?;
    f.write_all(&(w.preload.len() as u64).to_le_bytes())?;
    f.write_all(&(w.ops.len() as u64).to_le_bytes())?;
    for id in &w.preload {
        f.write_all(&id.to_le_bytes())?;
    }
    for op in &w.ops {
        f.write_all(&[op.kind, op.class])?;
        f.write_all(&op.id.to_le_bytes())?;
        f.write_all(&op.id2.to_le_bytes())?;
    }
    f.flush()
}

/// Latency summary of one class, microseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Summary {
    /// Samples.
    pub count: u64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
}

impl Summary {
    /// Summarises samples (sorts them).
    pub fn of(v: &mut [f64]) -> Summary {
        if v.is_empty() {
            return Summary::default();
        }
        v.sort_by(f64::total_cmp);
        let q = |p: f64| v[((p * v.len() as f64) as usize).min(v.len() - 1)];
        Summary {
            count: v.len() as u64,
            mean: v.iter().sum::<f64>() / v.len() as f64,
            p50: q(0.5),
            p99: q(0.99),
        }
    }
}

/// Figures of one system at one RD%.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    /// Operations per second over the measured phase.
    pub throughput: f64,
    /// All lookups.
    pub all: Summary,
    /// Per class, in [`CLASSES`] order.
    pub classes: [Summary; 3],
    /// Range-delete latency.
    pub range_delete: Summary,
    /// Lookups whose found/not-found answer disagreed with the oracle.
    pub mismatches: u64,
    /// Bytes of data files on disk.
    pub data_bytes: u64,
    /// Range-delete index bytes on disk (EbbDB).
    pub index_bytes: u64,
    /// In-memory bytes of filters and indexes (tables, DR-trees, EVE).
    pub memory_bytes: u64,
    /// Share of range-delete checks EVE answered without the index (EbbDB GLORAN mode).
    pub eve_skip_rate: Option<f64>,
}

fn key(id: u32) -> Vec<u8> {
    let mut k = (id as u64).to_be_bytes().to_vec();
    k.extend_from_slice(b"00000000");
    k
}

/// Engine options for the benchmark (same sizes as the RocksDB side).
pub fn options(s: &Settings, mode: RangeDeleteMode) -> Options {
    Options {
        range_delete_mode: mode,
        write_buffer_size: s.write_buffer_size,
        page_cache_bytes: s.cache_size,
        target_file_size: s.target_file_size,
        base_level_size: s.base_level_size,
        compression: Compression::None,
        bloom_bits_per_key: 10,
        sync: s.sync.engine(),
        ..Options::default()
    }
}

/// Runs the workload on EbbDB in `dir` with range deletes stored as `mode` says.
pub fn run_ebb(
    dir: &Path,
    s: &Settings,
    w: &Workload,
    mode: RangeDeleteMode,
) -> Result<Figures, String> {
    let e = Engine::open(dir, options(s, mode)).map_err(|e| e.to_string())?;
    let value = vec![b'v'; s.value_size];
    let err = |e: ebb_storage::Error| e.to_string();
    let mut seq = 0u64;
    // The preload goes in batches of 1,000 puts (as on the RocksDB side), so that under
    // `sync=always` it costs an fsync per batch rather than per put.
    for chunk in w.preload.chunks(1000) {
        let mut b = WriteBatch::new();
        for &id in chunk {
            b.put(key(id), value.clone());
        }
        e.write(&b, seq + 1).map_err(err)?;
        seq += chunk.len() as u64;
    }
    e.wait_for_background().map_err(err)?;
    let mut classes: [Vec<f64>; 3] = Default::default();
    let (mut all, mut rdel) = (Vec::new(), Vec::new());
    let mut mismatches = 0;
    let start = Instant::now();
    for op in &w.ops {
        seq += 1;
        let t = Instant::now();
        match op.kind {
            0 => {
                let found = e.get(&key(op.id), None).map_err(err)?.is_some();
                let us = t.elapsed().as_secs_f64() * 1e6;
                mismatches += (found != (op.class == 0)) as u64;
                classes[op.class as usize].push(us);
                all.push(us);
            }
            1 => e.put(key(op.id), value.clone(), seq).map_err(err)?,
            _ => {
                e.delete_range(key(op.id), key(op.id2), seq).map_err(err)?;
                rdel.push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let st = e.stats();
    let mut f = Figures {
        throughput: w.ops.len() as f64 / secs,
        all: Summary::of(&mut all),
        range_delete: Summary::of(&mut rdel),
        mismatches,
        data_bytes: st.levels.iter().map(|l| l.bytes).sum(),
        index_bytes: st.range_index_bytes,
        memory_bytes: st.table_memory_bytes + st.eve_bytes,
        eve_skip_rate: (st.range_checks > 0)
            .then(|| st.range_checks_eve_skipped as f64 / st.range_checks as f64),
        ..Default::default()
    };
    for (i, c) in classes.iter_mut().enumerate() {
        f.classes[i] = Summary::of(c);
    }
    e.close().map_err(|e| e.to_string())?;
    Ok(f)
}

/// Runs the workload file on RocksDB through the driver.
pub fn run_rocksdb(
    driver: &Path,
    dir: &Path,
    s: &Settings,
    file: &Path,
) -> Result<Figures, String> {
    let args = [
        dir.into(),
        file.into(),
        s.write_buffer_size.to_string().into(),
        s.cache_size.to_string().into(),
        s.target_file_size.to_string().into(),
        s.base_level_size.to_string().into(),
        u8::from(s.sync.rocksdb()).to_string().into(),
    ];
    let text = crate::rocksdb::run_driver(driver, &args)?;
    let mut f = Figures::default();
    for line in text.lines() {
        let t: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| t.get(i).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
        let summary = || Summary { count: num(2) as u64, mean: num(3), p50: num(4), p99: num(5) };
        match (t.first().copied(), t.get(1).copied()) {
            (Some("throughput"), _) => f.throughput = num(1),
            (Some("mismatches"), _) => f.mismatches = num(1) as u64,
            (Some("sst_bytes"), _) => f.data_bytes = num(1) as u64,
            (Some("table_readers_mem"), _) => f.memory_bytes = num(1) as u64,
            (Some("stat"), Some("all")) => f.all = summary(),
            (Some("stat"), Some("range_delete")) => f.range_delete = summary(),
            (Some("stat"), Some(c)) => {
                if let Some(i) = CLASSES.iter().position(|x| *x == c) {
                    f.classes[i] = summary();
                }
            }
            _ => {}
        }
    }
    if f.throughput == 0.0 {
        return Err(format!("no figures in the RocksDB driver output:\n{text}"));
    }
    Ok(f)
}
