//! Runs `ebb-bench range-delete` over the RD% values and prints tables and `RESULT` lines.

use std::path::Path;

use ebb_storage::RangeDeleteMode;

use crate::range_delete::{self, Figures, Settings, CLASSES};
use crate::report::{Better, Comparison};

fn line(metric: &str, rd: f64, ebb: f64, baseline: &str, base: f64, better: Better) -> String {
    Comparison {
        bench: "range-delete".into(),
        metric: metric.into(),
        params: vec![("rd".into(), format!("{rd}"))],
        ebb,
        baseline: baseline.into(),
        base,
        better,
    }
    .line()
}

fn print_row(system: &str, rd: f64, f: &Figures) {
    let c = &f.classes;
    println!(
        "{system:<8} rd={rd:<4} ops/s={:>9.0} lookup mean/p50/p99 us: all {:.2}/{:.2}/{:.2} \
         live {:.2}/{:.2}/{:.2} absent {:.2}/{:.2}/{:.2} deleted {:.2}/{:.2}/{:.2} (n={}/{}/{}) \
         rd {:.2}us mismatches={} data={}MiB index={}KiB mem={}KiB",
        f.throughput,
        f.all.mean,
        f.all.p50,
        f.all.p99,
        c[0].mean,
        c[0].p50,
        c[0].p99,
        c[1].mean,
        c[1].p50,
        c[1].p99,
        c[2].mean,
        c[2].p50,
        c[2].p99,
        c[0].count,
        c[1].count,
        c[2].count,
        f.range_delete.mean,
        f.mismatches,
        f.data_bytes >> 20,
        f.index_bytes >> 10,
        f.memory_bytes >> 10
    );
}

/// Runs every RD% on both systems and prints the report.
pub fn run(work: &Path, s: &Settings, rds: &[f64]) -> Result<(), String> {
    println!(
        "settings: universe={} preload={} ops={} range_len={} key=16B value={}B write_buffer={}B \
         cache={}B target_file={}B level1={}B bloom_bits=10 compression=none wal=on sync=off",
        s.universe,
        s.preload,
        s.ops,
        s.range_len,
        s.value_size,
        s.write_buffer_size,
        s.cache_size,
        s.target_file_size,
        s.base_level_size
    );
    std::fs::create_dir_all(work).map_err(|e| e.to_string())?;
    let driver = range_delete::build_driver(work)?;
    let mut results: Vec<(f64, Figures, Figures, Figures)> = Vec::new();
    for &rd in rds {
        let w = range_delete::generate(s, rd, 42);
        let file = work.join(format!("workload-{rd}.bin"));
        range_delete::write_file(&w, s, &file).map_err(|e| e.to_string())?;
        let ebb_dir = work.join(format!("ebb-{rd}"));
        let ebb = range_delete::run_ebb(&ebb_dir, s, &w, RangeDeleteMode::Gloran)?;
        let _ = std::fs::remove_dir_all(&ebb_dir);
        print_row("ebb", rd, &ebb);
        let tomb_dir = work.join(format!("tombstones-{rd}"));
        let tomb = range_delete::run_ebb(&tomb_dir, s, &w, RangeDeleteMode::Tombstones)?;
        let _ = std::fs::remove_dir_all(&tomb_dir);
        print_row("tombs", rd, &tomb);
        let rdb_dir = work.join(format!("rocksdb-{rd}"));
        let rdb = range_delete::run_rocksdb(&driver, &rdb_dir, s, &file)?;
        let _ = std::fs::remove_dir_all(&rdb_dir);
        let _ = std::fs::remove_file(&file);
        print_row("rocksdb", rd, &rdb);
        if ebb.mismatches + tomb.mismatches > 0 {
            return Err("EbbDB answered lookups against the oracle".into());
        }
        results.push((rd, ebb, tomb, rdb));
    }
    let rd0 = results.iter().find(|r| r.0 == 0.0).map(|r| r.1.clone());
    for (rd, ebb, tomb, rdb) in &results {
        println!(
            "{}",
            line("lookup_mean", *rd, ebb.all.mean, "rocksdb", rdb.all.mean, Better::Lower)
        );
        println!(
            "{}",
            line("lookup_mean", *rd, ebb.all.mean, "tombstones", tomb.all.mean, Better::Lower)
        );
        for (i, c) in CLASSES.iter().enumerate() {
            if ebb.classes[i].count > 0 && rdb.classes[i].count > 0 {
                let m = format!("lookup_mean_{c}");
                println!(
                    "{}",
                    line(
                        &m,
                        *rd,
                        ebb.classes[i].mean,
                        "rocksdb",
                        rdb.classes[i].mean,
                        Better::Lower
                    )
                );
            }
        }
        println!("{}", line("lookup_p99", *rd, ebb.all.p99, "rocksdb", rdb.all.p99, Better::Lower));
        if let Some(z) = &rd0 {
            println!(
                "{}",
                line("lookup_mean", *rd, ebb.all.mean, "ebb_rd0", z.all.mean, Better::Lower)
            );
        }
        println!(
            "{}",
            line("throughput", *rd, ebb.throughput, "rocksdb", rdb.throughput, Better::Higher)
        );
        println!(
            "{}",
            line("throughput", *rd, ebb.throughput, "tombstones", tomb.throughput, Better::Higher)
        );
    }
    Ok(())
}
