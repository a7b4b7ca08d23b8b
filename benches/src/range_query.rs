//! Short range queries (the Rosetta paper's workload): empty ranges of 2 to 64 keys over
//! uniformly random 64-bit keys, with uniform lower bounds or lower bounds just past an
//! existing key (correlated). EbbDB with its per-file Rosetta filters, EbbDB without range
//! filters, and RocksDB with a prefix Bloom filter (a small C++ driver built at run time against
//! Debian's `librocksdb-dev`, `auto_prefix_mode`, prefix = the key without its last byte).

use std::path::Path;
use std::time::Instant;

use ebb_storage::filter::RangeFilterOptions;
use ebb_storage::{Compression, Engine, Options};

use crate::report::{Better, Comparison};
use crate::workload::WriteSync;

/// Settings of one run.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Keys loaded.
    pub keys: u64,
    /// Queries per (distribution, range size).
    pub queries: u64,
    /// Range sizes in keys.
    pub ranges: Vec<u64>,
    /// Value size in bytes.
    pub value_size: usize,
    /// Range filter (EbbDB) and Bloom filter (RocksDB) bits per key.
    pub bits_per_key: u32,
    /// Page / block cache in bytes (both systems).
    pub cache_size: usize,
    /// Run RocksDB too.
    pub rocksdb: bool,
    /// When writes are made durable (both systems; the load is not timed).
    pub sync: WriteSync,
}

const DISTS: [&str; 2] = ["uniform", "correlated"];

/// A xorshift generator: the same numbers on every run.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// One query: inclusive bounds and its class (distribution x range size).
type Query = (u64, u64, u32);

fn workload(s: &Settings) -> (Vec<u64>, Vec<Query>) {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut keys: Vec<u64> = (0..s.keys).map(|_| rng.next()).collect();
    keys.sort_unstable();
    keys.dedup();
    let empty = |lo: u64, hi: u64| {
        let i = keys.partition_point(|&k| k < lo);
        keys.get(i).is_none_or(|&k| k > hi)
    };
    let mut queries = Vec::new();
    for (d, dist) in DISTS.iter().enumerate() {
        for (r, &range) in s.ranges.iter().enumerate() {
            let class = (d * s.ranges.len() + r) as u32;
            let mut made = 0;
            while made < s.queries {
                let lo = if *dist == "uniform" {
                    rng.next()
                } else {
                    keys[(rng.next() % keys.len() as u64) as usize].wrapping_add(1)
                };
                let Some(hi) = lo.checked_add(range - 1) else { continue };
                if empty(lo, hi) {
                    queries.push((lo, hi, class));
                    made += 1;
                }
            }
        }
    }
    // Interleave the classes so no class runs on a warmer cache than another.
    let mut shuffled = Vec::with_capacity(queries.len());
    let mut rest = queries;
    while !rest.is_empty() {
        let i = (rng.next() % rest.len() as u64) as usize;
        shuffled.push(rest.swap_remove(i));
    }
    (keys, shuffled)
}

fn options(s: &Settings, filter: bool) -> Options {
    let max_range = s.ranges.iter().copied().max().unwrap_or(64);
    Options {
        wal: true,
        sync: s.sync.engine(),
        write_buffer_size: 8 << 20,
        page_cache_bytes: s.cache_size,
        compression: Compression::None,
        range_filter: filter.then(|| RangeFilterOptions {
            key_len: 8,
            bits_per_key: f64::from(s.bits_per_key),
            default_range: max_range,
            range_buckets: max_range,
        }),
        ..Options::default()
    }
}

/// Loads the keys into an EbbDB engine and times every query; mean microseconds per class.
fn run_ebb(
    dir: &Path,
    s: &Settings,
    filter: bool,
    keys: &[u64],
    qs: &[Query],
) -> Result<(Vec<f64>, u64), String> {
    let err = |e: ebb_storage::Error| e.to_string();
    let e = Engine::open(dir, options(s, filter)).map_err(err)?;
    let value = vec![b'v'; s.value_size];
    for (i, chunk) in keys.chunks(1000).enumerate() {
        let mut b = ebb_storage::WriteBatch::new();
        for k in chunk {
            b.put(k.to_be_bytes().to_vec(), value.clone());
        }
        e.write(&b, 1 + (i * 1000) as u64).map_err(err)?;
    }
    e.flush().map_err(err)?;
    e.compact_range(None, None).map_err(err)?;
    e.wait_for_background().map_err(err)?;
    let classes = DISTS.len() * s.ranges.len();
    let (mut sum, mut n, mut found) = (vec![0.0; classes], vec![0u64; classes], 0u64);
    for &(lo, hi, c) in qs {
        let t = Instant::now();
        let hit = e.scan(lo.to_be_bytes()..=hi.to_be_bytes(), None).map_err(err)?.next().is_some();
        sum[c as usize] += t.elapsed().as_secs_f64() * 1e6;
        n[c as usize] += 1;
        found += u64::from(hit);
    }
    let st = e.stats();
    eprintln!(
        "  ebb filter={filter}: {} files, table memory {} bytes, filter probes {} skips {}",
        st.levels.iter().map(|l| l.files).sum::<usize>(),
        st.table_memory_bytes,
        st.range_filter_probes,
        st.range_filter_skips
    );
    e.close().map_err(err)?;
    Ok((sum.iter().zip(&n).map(|(s, &n)| s / n.max(1) as f64).collect(), found))
}

fn run_rocksdb(
    work: &Path,
    s: &Settings,
    keys: &[u64],
    qs: &[Query],
) -> Result<(Vec<f64>, u64), String> {
    let driver = crate::rocksdb::build_driver("range_query", work)?;
    let file = work.join("range-query.workload");
    let mut w: Vec<u8> = Vec::with_capacity(keys.len() * 8 + qs.len() * 20 + 64);
    w.extend_from_slice(b"EBBRQW01");
    w.extend_from_slice(&(keys.len() as u64).to_le_bytes());
    w.extend_from_slice(&(s.value_size as u32).to_le_bytes());
    w.extend_from_slice(&s.bits_per_key.to_le_bytes());
    w.extend_from_slice(&7u32.to_le_bytes()); // prefix: 7 of 8 bytes, ranges of up to 256 keys
    w.extend_from_slice(&((DISTS.len() * s.ranges.len()) as u32).to_le_bytes());
    w.extend_from_slice(&(qs.len() as u64).to_le_bytes());
    for k in keys {
        w.extend_from_slice(&k.to_le_bytes());
    }
    for &(lo, hi, c) in qs {
        w.extend_from_slice(&lo.to_le_bytes());
        w.extend_from_slice(&hi.to_le_bytes());
        w.extend_from_slice(&c.to_le_bytes());
    }
    std::fs::write(&file, &w).map_err(|e| e.to_string())?;
    let args = [
        work.join("rocksdb").into(),
        file.into(),
        s.cache_size.to_string().into(),
        u8::from(s.sync.rocksdb()).to_string().into(),
    ];
    let text = crate::rocksdb::run_driver(&driver, &args)?;
    let mut means = vec![0.0; DISTS.len() * s.ranges.len()];
    let mut found = 0;
    for line in text.lines() {
        let t: Vec<&str> = line.split_whitespace().collect();
        match t.as_slice() {
            ["stat", c, _, mean, _] => {
                let (Ok(c), Ok(m)) = (c.parse::<usize>(), mean.parse::<f64>()) else { continue };
                if let Some(slot) = means.get_mut(c) {
                    *slot = m;
                }
            }
            ["found", n] => found = n.parse().unwrap_or(0),
            ["table_readers_mem", n] => eprintln!("  rocksdb: table readers memory {n} bytes"),
            _ => {}
        }
    }
    Ok((means, found))
}

/// Runs the benchmark; one comparison per (distribution, range size) and baseline.
pub fn run(work: &Path, s: &Settings) -> Result<Vec<Comparison>, String> {
    let (keys, qs) = workload(s);
    eprintln!(
        "range-query: {} keys, {} empty queries; value={}B bits_per_key={} cache={}B \
         compression=none wal=on sync={}",
        keys.len(),
        qs.len(),
        s.value_size,
        s.bits_per_key,
        s.cache_size,
        s.sync.name()
    );
    let (ebb, found) = run_ebb(&work.join("ebb"), s, true, &keys, &qs)?;
    let (plain, found_plain) = run_ebb(&work.join("ebb-nofilter"), s, false, &keys, &qs)?;
    if found + found_plain > 0 {
        return Err(format!(
            "an empty range returned a key ({found} with filters, {found_plain} without)"
        ));
    }
    let rocks = if s.rocksdb {
        let (m, found) = run_rocksdb(work, s, &keys, &qs)?;
        if found > 0 {
            return Err(format!("RocksDB returned a key for {found} empty ranges"));
        }
        Some(m)
    } else {
        None
    };
    let mut out = Vec::new();
    for (d, dist) in DISTS.iter().enumerate() {
        for (r, range) in s.ranges.iter().enumerate() {
            let c = d * s.ranges.len() + r;
            let line = |baseline: &str, base: f64| Comparison {
                bench: "range-query".into(),
                metric: "empty_short_latency".into(),
                params: vec![
                    ("dist".into(), dist.to_string()),
                    ("range".into(), range.to_string()),
                    ("sync".into(), s.sync.name().into()),
                ],
                ebb: ebb[c],
                baseline: baseline.into(),
                base,
                better: Better::Lower,
            };
            if let Some(r) = &rocks {
                out.push(line("rocksdb", r[c]));
            }
            out.push(line("nofilter", plain[c]));
        }
    }
    Ok(out)
}
