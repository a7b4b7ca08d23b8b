//! Runs RocksDB's own `db_bench` (Debian package `rocksdb-tools`) and parses its figures, and
//! builds the small C++ drivers other benchmarks run RocksDB through.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Settings shared by both sides of the engine benchmark.
#[derive(Debug, Clone)]
pub struct DbBenchSettings {
    /// Keys written by fillrandom (key numbers are drawn from `[0, num)`).
    pub num: u64,
    /// Point reads.
    pub reads: u64,
    /// Seeks (each followed by `seek_nexts` nexts).
    pub seeks: u64,
    /// Nexts after each seek.
    pub seek_nexts: u64,
    /// Key size in bytes.
    pub key_size: usize,
    /// Value size in bytes.
    pub value_size: usize,
    /// Memtable size in bytes.
    pub write_buffer_size: usize,
    /// Bloom filter bits per key.
    pub bloom_bits: u32,
    /// Block / page cache in bytes.
    pub cache_size: usize,
    /// Block / page size in bytes.
    pub block_size: usize,
    /// When writes are made durable (both sides).
    pub sync: crate::workload::WriteSync,
}

/// Builds the RocksDB driver `rocksdb-driver/{name}.cc` into `out` (needs a C++ compiler and
/// Debian's `librocksdb-dev`).
pub fn build_driver(name: &str, out: &Path) -> Result<PathBuf, String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("rocksdb-driver/{name}.cc"));
    let bin = out.join(format!("ebb-rocksdb-{name}"));
    let status = Command::new("c++")
        .args(["-O2", "-std=c++17"])
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .args(["-lrocksdb", "-lpthread"])
        .status()
        .map_err(|e| format!("cannot run c++: {e}"))?;
    if !status.success() {
        return Err(format!(
            "building the RocksDB driver {name} failed (apt-get install librocksdb-dev g++)"
        ));
    }
    Ok(bin)
}

/// Runs a driver built by [`build_driver`] with `args`; its standard output.
pub fn run_driver(driver: &Path, args: &[std::ffi::OsString]) -> Result<String, String> {
    let out = Command::new(driver)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run the RocksDB driver: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "RocksDB driver failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(text)
}

/// One parsed `db_bench` result line.
#[derive(Debug, Clone, PartialEq)]
pub struct DbBenchResult {
    /// Benchmark name.
    pub name: String,
    /// Microseconds per operation.
    pub micros_per_op: f64,
    /// Operations per second.
    pub ops_per_sec: f64,
    /// `found` count of read benchmarks, if printed.
    pub found: Option<u64>,
}

/// Parses the result lines (`name : X micros/op Y ops/sec ...`) of `db_bench` output.
pub fn parse(output: &str) -> Vec<DbBenchResult> {
    let mut out = Vec::new();
    for line in output.lines() {
        let Some((name, rest)) = line.split_once(':') else { continue };
        let toks: Vec<&str> = rest.split_whitespace().collect();
        let before = |unit: &str| {
            toks.iter()
                .position(|t| *t == unit)
                .and_then(|i| i.checked_sub(1))
                .and_then(|i| toks[i].parse::<f64>().ok())
        };
        let (Some(micros), Some(ops)) = (before("micros/op"), before("ops/sec")) else { continue };
        let found = rest
            .find(" of ")
            .and_then(|i| rest[..i].rsplit(['(', ' ']).next().and_then(|n| n.parse::<u64>().ok()));
        out.push(DbBenchResult {
            name: name.trim().to_string(),
            micros_per_op: micros,
            ops_per_sec: ops,
            found,
        });
    }
    out
}

/// Runs `db_bench` with `benchmarks` against `db` and returns its parsed results.
pub fn run(
    bin: &Path,
    db: &Path,
    benchmarks: &str,
    s: &DbBenchSettings,
    reads: u64,
    use_existing: bool,
) -> Result<Vec<DbBenchResult>, String> {
    let mut cmd = Command::new(bin);
    cmd.arg(format!("--benchmarks={benchmarks}"))
        .arg(format!("--db={}", db.display()))
        .arg(format!("--num={}", s.num))
        .arg(format!("--reads={reads}"))
        .arg(format!("--key_size={}", s.key_size))
        .arg(format!("--value_size={}", s.value_size))
        .arg("--compression_type=none")
        .arg(format!("--write_buffer_size={}", s.write_buffer_size))
        .arg("--max_write_buffer_number=3")
        .arg(format!("--bloom_bits={}", s.bloom_bits))
        .arg(format!("--cache_size={}", s.cache_size))
        .arg(format!("--block_size={}", s.block_size))
        .arg(format!("--seek_nexts={}", s.seek_nexts))
        .arg("--threads=1")
        .arg("--disable_wal=false")
        .arg(format!("--sync={}", s.sync.rocksdb()))
        .arg("--max_background_jobs=2")
        .arg("--seed=1")
        .arg(format!("--use_existing_db={use_existing}"));
    let out = cmd.output().map_err(|e| {
        format!("cannot run {}: {e} (install Debian's rocksdb-tools for db_bench)", bin.display())
    })?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "db_bench failed ({}): {}{}",
            out.status,
            stdout,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let results = parse(&stdout);
    if results.is_empty() {
        return Err(format!("no results in db_bench output:\n{stdout}"));
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_db_bench_lines() {
        let out = "Keys:       16 bytes each\n\
fillrandom   :       3.520 micros/op 284090 ops/sec 7.040 seconds 2000000 operations;   31.4 MB/s\n\
readrandom   :       4.010 micros/op 249376 ops/sec 1.203 seconds 300000 operations;   17.5 MB/s (189473 of 300000 found)\n";
        let r = parse(out);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].name, "fillrandom");
        assert_eq!(r[0].ops_per_sec, 284090.0);
        assert_eq!(r[0].found, None);
        assert_eq!(r[1].micros_per_op, 4.010);
        assert_eq!(r[1].found, Some(189473));
    }
}
