//! Runs `ebb-bench range-delete` over the RD% values and prints tables and `RESULT` lines.

use std::path::Path;

use ebb_storage::RangeDeleteMode;

use crate::range_delete::{self, Figures, Settings, CLASSES};
use crate::range_delete_plot::{self, Series};
use crate::report::{Better, Comparison};
use crate::workload::WriteSync;

fn line(
    metric: &str,
    (rd, sync): (f64, WriteSync),
    ebb: f64,
    baseline: &str,
    base: f64,
    better: Better,
) -> String {
    Comparison {
        bench: "range-delete".into(),
        metric: metric.into(),
        params: vec![("rd".into(), format!("{rd}")), ("sync".into(), sync.name().into())],
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
         rd {:.2}us mismatches={} data={}MiB index={}KiB mem={}KiB eve_skip={}",
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
        f.memory_bytes >> 10,
        f.eve_skip_rate.map_or("-".to_string(), |r| format!("{:.1}%", r * 100.0))
    );
}

/// A system the benchmark can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    /// EbbDB with GLORAN.
    Ebb,
    /// EbbDB with RocksDB-style range tombstones.
    Tombstones,
    /// RocksDB through the C++ driver.
    Rocksdb,
}

impl System {
    /// Every system, in report order.
    pub const ALL: [System; 3] = [System::Ebb, System::Tombstones, System::Rocksdb];

    /// Name used on the command line and in `RESULT` lines.
    pub fn name(self) -> &'static str {
        match self {
            System::Ebb => "ebb",
            System::Tombstones => "tombstones",
            System::Rocksdb => "rocksdb",
        }
    }

    /// Parses a name from [`System::name`].
    pub fn parse(s: &str) -> Result<System, String> {
        System::ALL
            .into_iter()
            .find(|x| x.name() == s)
            .ok_or_else(|| format!("unknown system {s:?} (expected ebb, tombstones or rocksdb)"))
    }
}

/// Results of one RD%: per system, the run with the median lookup mean.
type Row = (f64, [Option<Figures>; 3]);

fn run_once(
    work: &Path,
    s: &Settings,
    rd: f64,
    sys: System,
    w: &range_delete::Workload,
    driver: Option<&Path>,
    file: &Path,
) -> Result<Figures, String> {
    let dir = work.join(format!("{}-{rd}", sys.name()));
    let f = match sys {
        System::Ebb => range_delete::run_ebb(&dir, s, w, RangeDeleteMode::Gloran),
        System::Tombstones => range_delete::run_ebb(&dir, s, w, RangeDeleteMode::Tombstones),
        System::Rocksdb => match driver {
            Some(d) => range_delete::run_rocksdb(d, &dir, s, file),
            None => Err("RocksDB driver not built".into()),
        },
    };
    let _ = std::fs::remove_dir_all(&dir);
    let f = f?;
    if sys != System::Rocksdb && f.mismatches > 0 {
        return Err(format!(
            "EbbDB ({}) answered {} lookups against the oracle",
            sys.name(),
            f.mismatches
        ));
    }
    Ok(f)
}

/// Runs every RD% on the chosen systems (`repeat` runs each, keeping the median by lookup mean)
/// and prints the report.
pub fn run(
    work: &Path,
    s: &Settings,
    rds: &[f64],
    systems: &[System],
    repeat: usize,
    plot: Option<&Path>,
) -> Result<(), String> {
    println!(
        "settings: universe={} preload={} ops={} range_len={} key=16B value={}B write_buffer={}B \
         cache={}B target_file={}B level1={}B bloom_bits=10 compression=none wal=on sync={} \
         repeat={repeat}",
        s.universe,
        s.preload,
        s.ops,
        s.range_len,
        s.value_size,
        s.write_buffer_size,
        s.cache_size,
        s.target_file_size,
        s.base_level_size,
        s.sync.name()
    );
    std::fs::create_dir_all(work).map_err(|e| e.to_string())?;
    let driver = if systems.contains(&System::Rocksdb) {
        Some(crate::rocksdb::build_driver("range_delete", work)?)
    } else {
        None
    };
    let repeat = repeat.max(1);
    let mut results: Vec<Row> = Vec::new();
    for &rd in rds {
        let w = range_delete::generate(s, rd, 42);
        let file = work.join(format!("workload-{rd}.bin"));
        if driver.is_some() {
            range_delete::write_file(&w, s, &file).map_err(|e| e.to_string())?;
        }
        let mut row: Row = (rd, [None, None, None]);
        for (i, sys) in System::ALL.into_iter().enumerate() {
            if !systems.contains(&sys) {
                continue;
            }
            let mut runs = Vec::with_capacity(repeat);
            for _ in 0..repeat {
                let f = run_once(work, s, rd, sys, &w, driver.as_deref(), &file)?;
                print_row(sys.name(), rd, &f);
                runs.push(f);
            }
            runs.sort_by(|a, b| a.all.mean.total_cmp(&b.all.mean));
            row.1[i] = Some(runs.swap_remove(runs.len() / 2));
        }
        let _ = std::fs::remove_file(&file);
        results.push(row);
    }
    print_results(&results, s.sync);
    if let Some(path) = plot {
        let labels = ["EbbDB (GLORAN)", "EbbDB (tombstones)", "RocksDB"];
        let series: Vec<Series> = (0..3)
            .map(|i| Series {
                label: labels[i].into(),
                points: results
                    .iter()
                    .filter_map(|(rd, f)| f[i].as_ref().map(|f| (*rd, f.all.mean, f.throughput)))
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        range_delete_plot::write(path, &series)?;
        println!("plot written to {}", path.display());
    }
    Ok(())
}

fn print_results(results: &[Row], sync: WriteSync) {
    let rd0 = results.iter().find(|r| r.0 == 0.0).and_then(|r| r.1[0].clone());
    for (rd, [ebb, tomb, rdb]) in results {
        let Some(ebb) = ebb else { continue };
        if results.len() > 1 {
            println!("median {}", {
                let mut v = Vec::new();
                for (sys, f) in System::ALL.iter().zip([Some(ebb), tomb.as_ref(), rdb.as_ref()]) {
                    if let Some(f) = f {
                        v.push(format!("{}={:.2}us", sys.name(), f.all.mean));
                    }
                }
                format!("rd={rd} lookup_mean {}", v.join(" "))
            });
        }
        let baselines = [("rocksdb", rdb.as_ref()), ("tombstones", tomb.as_ref())];
        for (name, base) in baselines {
            let Some(base) = base else { continue };
            println!(
                "{}",
                line("lookup_mean", (*rd, sync), ebb.all.mean, name, base.all.mean, Better::Lower)
            );
        }
        if let Some(rdb) = rdb {
            for (i, c) in CLASSES.iter().enumerate() {
                if ebb.classes[i].count > 0 && rdb.classes[i].count > 0 {
                    let m = format!("lookup_mean_{c}");
                    let (e, b) = (ebb.classes[i].mean, rdb.classes[i].mean);
                    println!("{}", line(&m, (*rd, sync), e, "rocksdb", b, Better::Lower));
                }
            }
            println!(
                "{}",
                line("lookup_p99", (*rd, sync), ebb.all.p99, "rocksdb", rdb.all.p99, Better::Lower)
            );
        }
        if let Some(z) = &rd0 {
            println!(
                "{}",
                line(
                    "lookup_mean",
                    (*rd, sync),
                    ebb.all.mean,
                    "ebb_rd0",
                    z.all.mean,
                    Better::Lower
                )
            );
        }
        for (name, base) in baselines {
            let Some(base) = base else { continue };
            println!(
                "{}",
                line(
                    "throughput",
                    (*rd, sync),
                    ebb.throughput,
                    name,
                    base.throughput,
                    Better::Higher
                )
            );
        }
    }
}
