//! `ebb-bench engine`: RocksDB's `db_bench` workload on EbbDB and on `db_bench` itself.

use std::path::{Path, PathBuf};
use std::time::Instant;

use ebb_storage::{Compression, Engine, Options};

use crate::report::{Better, Comparison};
use crate::rocksdb::{self, DbBenchSettings};
use crate::workload::{db_bench_key, random_key, rng, value_pool};

/// Figures of one EbbDB run.
#[derive(Debug, Clone, Default)]
pub struct EbbFigures {
    /// fillrandom ops/s.
    pub fill: f64,
    /// readrandom ops/s.
    pub read: f64,
    /// Keys found by readrandom.
    pub read_found: u64,
    /// seekrandom ops/s.
    pub seek: f64,
    /// Seeks that found a key.
    pub seek_found: u64,
    /// Engine statistics after the fill.
    pub stats: String,
}

/// Engine options matching `db_bench`'s settings.
pub fn options(s: &DbBenchSettings) -> Options {
    Options {
        wal: true,
        sync: s.sync.engine(),
        write_buffer_size: s.write_buffer_size,
        max_immutable_memtables: 2,
        bloom_bits_per_key: s.bloom_bits,
        page_cache_bytes: s.cache_size,
        page_size: s.block_size,
        compression: Compression::None,
        ..Options::default()
    }
}

fn phase(
    name: &str,
    n: u64,
    f: impl FnOnce() -> Result<u64, ebb_storage::Error>,
) -> Result<(f64, u64), String> {
    let t = Instant::now();
    let found = f().map_err(|e| format!("{name}: {e}"))?;
    let secs = t.elapsed().as_secs_f64();
    let ops = n as f64 / secs;
    eprintln!(
        "  ebb {name:<11}: {:>9.3} micros/op {ops:>10.0} ops/sec {secs:>8.3} seconds",
        1e6 / ops
    );
    Ok((ops, found))
}

/// Runs fillrandom and readrandom, then reopens and runs seekrandom, as the `db_bench` side does.
pub fn run_ebb(dir: &Path, s: &DbBenchSettings) -> Result<EbbFigures, String> {
    let opts = options(s);
    let mut fig = EbbFigures::default();
    let engine = Engine::open(dir, opts.clone()).map_err(|e| e.to_string())?;
    let mut r = rng(1);
    let pool = value_pool(&mut r, 1 << 20);
    let mut key = Vec::with_capacity(s.key_size);
    (fig.fill, _) = phase("fillrandom", s.num, || {
        for seq in 1..=s.num {
            db_bench_key(random_key(&mut r, s.num), s.key_size, &mut key);
            let off = (seq as usize * 97) % (pool.len() - s.value_size);
            engine.put(key.clone(), pool[off..off + s.value_size].to_vec(), seq)?;
        }
        Ok(0)
    })?;
    fig.stats = format!("{:?}", engine.stats());
    let mut r = rng(2);
    (fig.read, fig.read_found) = phase("readrandom", s.reads, || {
        let mut found = 0;
        for _ in 0..s.reads {
            db_bench_key(random_key(&mut r, s.num), s.key_size, &mut key);
            found += engine.get(&key, None)?.is_some() as u64;
        }
        Ok(found)
    })?;
    engine.close().map_err(|e| e.to_string())?;
    let engine = Engine::open(dir, opts).map_err(|e| e.to_string())?;
    let mut r = rng(3);
    (fig.seek, fig.seek_found) = phase("seekrandom", s.seeks, || {
        let mut found = 0;
        for _ in 0..s.seeks {
            db_bench_key(random_key(&mut r, s.num), s.key_size, &mut key);
            let mut it = engine.scan(key.as_slice().., None)?;
            let mut n = 0;
            while n <= s.seek_nexts {
                match it.next() {
                    Some(kv) => {
                        kv?;
                        n += 1;
                    }
                    None => break,
                }
            }
            found += (n > 0) as u64;
        }
        Ok(found)
    })?;
    engine.close().map_err(|e| e.to_string())?;
    Ok(fig)
}

/// Figures of one paired run: (ebb, rocksdb) ops/s for fill, read, seek.
type Pair = [(f64, f64); 3];

fn run_once(
    work: &Path,
    db_bench: &Path,
    s: &DbBenchSettings,
    round: usize,
) -> Result<Pair, String> {
    let ebb_dir: PathBuf = work.join(format!("ebb-{round}"));
    let rdb_dir: PathBuf = work.join(format!("rocksdb-{round}"));
    eprintln!("round {round}: EbbDB in {}", ebb_dir.display());
    let ebb = run_ebb(&ebb_dir, s)?;
    eprintln!("  ebb engine after fill: {}", ebb.stats);
    let _ = std::fs::remove_dir_all(&ebb_dir);
    eprintln!("round {round}: db_bench in {}", rdb_dir.display());
    let mut rdb = rocksdb::run(db_bench, &rdb_dir, "fillrandom,readrandom", s, s.reads, false)?;
    rdb.extend(rocksdb::run(db_bench, &rdb_dir, "seekrandom", s, s.seeks, true)?);
    let _ = std::fs::remove_dir_all(&rdb_dir);
    for r in &rdb {
        eprintln!(
            "  rocksdb {:<11}: {:>9.3} micros/op {:>10.0} ops/sec found={:?}",
            r.name, r.micros_per_op, r.ops_per_sec, r.found
        );
    }
    let get = |name: &str| {
        rdb.iter()
            .find(|r| r.name == name)
            .cloned()
            .ok_or_else(|| format!("db_bench printed no {name} result"))
    };
    let (fill, read, seek) = (get("fillrandom")?, get("readrandom")?, get("seekrandom")?);
    if let Some(found) = read.found {
        println!(
            "round {round} readrandom found: ebb={} rocksdb={found} of {}",
            ebb.read_found, s.reads
        );
    }
    let pair =
        [(ebb.fill, fill.ops_per_sec), (ebb.read, read.ops_per_sec), (ebb.seek, seek.ops_per_sec)];
    println!(
        "round {round} ops/s: fillrandom ebb={:.0} rocksdb={:.0}; readrandom ebb={:.0} rocksdb={:.0}; \
         seekrandom ebb={:.0} rocksdb={:.0}",
        pair[0].0, pair[0].1, pair[1].0, pair[1].1, pair[2].0, pair[2].1
    );
    Ok(pair)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Runs both sides `repeat` times (alternating, fresh directories) and returns the comparisons of
/// the medians.
pub fn run(
    work: &Path,
    db_bench: &Path,
    s: &DbBenchSettings,
    repeat: usize,
) -> Result<Vec<Comparison>, String> {
    println!(
        "settings: num={} reads={} seeks={} seek_nexts={} key={}B value={}B compression=none \
         write_buffer={}B bloom_bits={} cache={}B page/block={}B wal=on sync={} threads=1 repeat={}",
        s.num, s.reads, s.seeks, s.seek_nexts, s.key_size, s.value_size, s.write_buffer_size,
        s.bloom_bits, s.cache_size, s.block_size, s.sync.name(), repeat
    );
    let mut rounds = Vec::new();
    for round in 1..=repeat.max(1) {
        rounds.push(run_once(work, db_bench, s, round)?);
    }
    let names = ["fillrandom", "readrandom", "seekrandom"];
    let mut params = vec![("sync".to_string(), s.sync.name().to_string())];
    if rounds.len() > 1 {
        params.push(("median_of".to_string(), rounds.len().to_string()));
    }
    Ok((0..3)
        .map(|i| Comparison {
            bench: "engine".into(),
            metric: names[i].into(),
            params: params.clone(),
            ebb: median(rounds.iter().map(|r| r[i].0).collect()),
            baseline: "rocksdb".into(),
            base: median(rounds.iter().map(|r| r[i].1).collect()),
            better: Better::Higher,
        })
        .collect())
}
