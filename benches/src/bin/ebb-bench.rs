//! `ebb-bench`: macro benchmarks of EbbDB against baselines measured in the same run.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use ebb_benches::rocksdb::DbBenchSettings;

#[derive(Parser)]
#[command(name = "ebb-bench", about = "EbbDB benchmarks, each beside its baseline in the same run")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// RocksDB's db_bench workload (fillrandom, readrandom, seekrandom) on EbbDB and on db_bench.
    Engine {
        /// Keys written by fillrandom.
        #[arg(long, default_value_t = 2_000_000)]
        num: u64,
        /// Point reads by readrandom.
        #[arg(long, default_value_t = 300_000)]
        reads: u64,
        /// Seeks by seekrandom (each followed by --seek-nexts nexts).
        #[arg(long, default_value_t = 100_000)]
        seeks: u64,
        /// Nexts after each seek.
        #[arg(long, default_value_t = 100)]
        seek_nexts: u64,
        /// Memtable size in bytes (both systems).
        #[arg(long, default_value_t = 64 << 20)]
        write_buffer_size: usize,
        /// Page / block cache in bytes (both systems).
        #[arg(long, default_value_t = 8 << 20)]
        cache_size: usize,
        /// Paired runs; RESULT lines report the medians.
        #[arg(long, default_value_t = 1)]
        repeat: usize,
        /// Small run for a smoke test (num=200000, reads=30000, seeks=10000).
        #[arg(long)]
        quick: bool,
        /// Path of RocksDB's db_bench.
        #[arg(long, default_value = "db_bench")]
        db_bench: PathBuf,
        /// Working directory (default: a temporary directory, removed afterwards).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

fn main() {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Engine {
            num,
            reads,
            seeks,
            seek_nexts,
            write_buffer_size,
            cache_size,
            repeat,
            quick,
            db_bench,
            dir,
        } => {
            let (num, reads, seeks) =
                if quick { (200_000, 30_000, 10_000) } else { (num, reads, seeks) };
            let s = DbBenchSettings {
                num,
                reads,
                seeks,
                seek_nexts,
                key_size: 16,
                value_size: 100,
                write_buffer_size,
                bloom_bits: 10,
                cache_size,
                block_size: 4096,
            };
            let tmp;
            let work = match dir {
                Some(d) => {
                    if d.exists() {
                        eprintln!("error: {} exists; pass a new directory", d.display());
                        std::process::exit(2);
                    }
                    d
                }
                None => {
                    tmp = match tempfile::Builder::new().prefix("ebb-bench-").tempdir_in(".") {
                        Ok(t) => t,
                        Err(e) => {
                            eprintln!("error: cannot create a working directory: {e}");
                            std::process::exit(2);
                        }
                    };
                    tmp.path().to_path_buf()
                }
            };
            match ebb_benches::engine::run(&work, &db_bench, &s, repeat) {
                Ok(results) => {
                    for r in results {
                        println!("{}", r.line());
                    }
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    std::process::exit(1);
                }
            }
        }
    }
}
