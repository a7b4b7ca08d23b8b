//! `ebb-bench`: macro benchmarks of EbbDB against baselines measured in the same run.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use ebb_benches::range_delete_report::System;
use ebb_benches::rocksdb::DbBenchSettings;
use ebb_benches::workload::WriteSync;

#[derive(Parser)]
#[command(name = "ebb-bench", about = "EbbDB benchmarks, each beside its baseline in the same run")]
struct Cli {
    /// A small run of the command (seconds, not minutes), to check that it still works: the
    /// sizes are the command's smallest, and its figures are not meant to be quoted.
    #[arg(long, global = true)]
    quick: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// What TLS and authentication cost: ingest and a small query on a plain server and on one
    /// with HTTPS and a bearer token, same data, same run.
    Security {
        /// Data set, hosts x hours.
        #[arg(long, default_value = "200x6")]
        set: String,
        /// Concurrent writers.
        #[arg(long, default_value_t = 4)]
        clients: usize,
        /// Runs of the query per round (median).
        #[arg(long, default_value_t = 200)]
        reps: usize,
        /// Rounds (plain and secured alternate); RESULT lines report the medians.
        #[arg(long, default_value_t = 3)]
        repeat: usize,
        /// Working directory (default: a temporary directory, removed afterwards).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Single-node ingest under each `--sync` mode (always, interval, none), alternating rounds.
    Durability {
        /// Data set, hosts x hours.
        #[arg(long, default_value = "200x6")]
        set: String,
        /// Concurrent writers.
        #[arg(long, default_value_t = 4)]
        clients: usize,
        /// Rows per write request (one run per size).
        #[arg(long, value_delimiter = ',', default_value = "5000,100")]
        rows_per_request: Vec<usize>,
        /// Rounds (the modes alternate); RESULT lines report the medians.
        #[arg(long, default_value_t = 3)]
        repeat: usize,
        /// Working directory (default: a temporary directory, removed afterwards).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
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
        /// When writes are made durable, on both systems (`always`: an fsync per write).
        #[arg(long, value_enum, default_value_t = WriteSync::Off)]
        sync: WriteSync,
        /// Path of RocksDB's db_bench.
        #[arg(long, default_value = "db_bench")]
        db_bench: PathBuf,
        /// Working directory (default: a temporary directory, removed afterwards).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// GLORAN's balanced workload: lookups and writes with RD% range deletes, on EbbDB and on
    /// RocksDB (DeleteRange), lookup latency split into live, absent and range-deleted keys.
    RangeDelete {
        /// Range-delete shares of all operations, in percent.
        #[arg(long, value_delimiter = ',', default_value = "0,1,2,5,10")]
        rd: Vec<f64>,
        /// Key universe (ids).
        #[arg(long, default_value_t = 4_000_000)]
        universe: u32,
        /// Preloaded random puts.
        #[arg(long, default_value_t = 2_000_000)]
        preload: u64,
        /// Measured operations.
        #[arg(long, default_value_t = 1_000_000)]
        ops: u64,
        /// Ids per range delete.
        #[arg(long, default_value_t = 16)]
        range_len: u32,
        /// Value size in bytes.
        #[arg(long, default_value_t = 240)]
        value_size: usize,
        /// Memtable size in bytes (both systems).
        #[arg(long, default_value_t = 4 << 20)]
        write_buffer_size: usize,
        /// Page / block cache in bytes (both systems).
        #[arg(long, default_value_t = 8 << 20)]
        cache_size: usize,
        /// When writes are made durable, on every system (`always`: an fsync per write, and per
        /// preload batch of 1,000 puts).
        #[arg(long, value_enum, default_value_t = WriteSync::Off)]
        sync: WriteSync,
        /// Systems to run: ebb (GLORAN), tombstones (EbbDB's RocksDB-style baseline), rocksdb.
        #[arg(long, value_delimiter = ',', default_value = "ebb,tombstones,rocksdb")]
        systems: Vec<String>,
        /// Runs per system and RD%; the run with the median lookup mean is reported.
        #[arg(long, default_value_t = 1)]
        repeat: usize,
        /// Also write an SVG chart of lookup mean and throughput against RD% to this file.
        #[arg(long)]
        plot: Option<PathBuf>,
        /// Working directory (default: a temporary directory, removed afterwards).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Timely deletion: FADE against saturation-only compaction, and KiWi+ time-window deletes,
    /// lookups and scans against the classic layout (h = 1).
    Deletes {
        /// Parts to run: fade, window, reads, series.
        #[arg(long, value_delimiter = ',', default_value = "fade,window,reads,series")]
        parts: Vec<String>,
        /// Rows of the time-series data sets.
        #[arg(long, default_value_t = 500_000)]
        rows: u64,
        /// Operations of the FADE workload (1,024 per logical second).
        #[arg(long, default_value_t = 262_144)]
        fade_ops: u64,
        /// KiWi+ tile sizes for levels 0, 1, ... (default: from the cost model).
        #[arg(long, value_delimiter = ',')]
        kiwi_tiles: Vec<usize>,
        /// When writes are made durable, on every side (`always`: an fsync per write).
        #[arg(long, value_enum, default_value_t = WriteSync::Off)]
        sync: WriteSync,
        /// Working directory (default: a temporary directory, removed afterwards).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Line-protocol ingest (TSBS devops cpu) into EbbDB, InfluxDB, VictoriaMetrics and QuestDB.
    Ingest(ebb_benches::tsbs_cli::IngestArgs),
    /// Empty short range queries (the Rosetta paper's workload): EbbDB with per-file Rosetta
    /// filters against EbbDB without range filters and RocksDB with a prefix Bloom filter.
    RangeQuery {
        /// Keys loaded (uniform random 64-bit keys).
        #[arg(long, default_value_t = 2_000_000)]
        keys: u64,
        /// Queries per distribution and range size.
        #[arg(long, default_value_t = 20_000)]
        queries: u64,
        /// Range sizes in keys.
        #[arg(long, value_delimiter = ',', default_value = "2,16,64")]
        ranges: Vec<u64>,
        /// Range filter (EbbDB) and Bloom filter (RocksDB) bits per key.
        #[arg(long, default_value_t = 16)]
        bits_per_key: u32,
        /// Value size in bytes.
        #[arg(long, default_value_t = 64)]
        value_size: usize,
        /// Page / block cache in bytes (both systems).
        #[arg(long, default_value_t = 64 << 20)]
        cache_size: usize,
        /// Skip RocksDB (no librocksdb-dev here).
        #[arg(long)]
        no_rocksdb: bool,
        /// Which part: `filters` (empty short ranges), `grf` (the global filter against
        /// per-file Rosetta with many level-0 runs: `keys / 1000` series, 60 points per series
        /// per run, 5-minute windows) or `reduce` (RangeReduce on a recurring range workload
        /// with updates, on against off).
        #[arg(long, default_value = "filters")]
        part: String,
        /// Level-0 runs compared (`--part grf`).
        #[arg(long, value_delimiter = ',', default_value = "4,16,48")]
        runs: Vec<u64>,
        /// When the load's writes are made durable, on every system (the load is not timed).
        #[arg(long, value_enum, default_value_t = WriteSync::Off)]
        sync: WriteSync,
        /// Working directory (default: a temporary directory, removed afterwards).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// The KiWi+ layout and range filters through SQL: bytes a `DELETE ... WHERE time` of 10%
    /// rewrites and one-host one-hour query latency, default engine against h = 1 without
    /// range filters.
    ServerLayout {
        /// Hosts (series).
        #[arg(long, default_value_t = 20_000)]
        hosts: u64,
        /// Points per host.
        #[arg(long, default_value_t = 100)]
        points: u64,
        /// Seconds between two points of a host.
        #[arg(long, default_value_t = 60)]
        step_secs: u64,
        /// One-host one-hour queries timed.
        #[arg(long, default_value_t = 300)]
        queries: u64,
        /// Decoded page cache per side, in MiB.
        #[arg(long, default_value_t = 64)]
        page_cache_mb: usize,
        /// When writes are made durable, on both sides (the server's default: `always`).
        #[arg(long, value_enum, default_value_t = WriteSync::Always)]
        sync: WriteSync,
        /// Working directory (default: a temporary directory, removed afterwards).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Cluster ingest (single node vs 1 node RF=1 vs 3 nodes RF=3, all on this machine) and
    /// the time and bytes to move shard replicas onto a new node, by log replay and by snapshot.
    Cluster {
        /// Data set as HOSTSxHOURS.
        #[arg(long, default_value = "1000x2")]
        set: String,
        /// Concurrent client connections (spread over the nodes).
        #[arg(long, default_value_t = 4)]
        clients: usize,
        /// Shards of the clusters.
        #[arg(long, default_value_t = 4)]
        shards: u32,
        /// Raft log entries between snapshots in the snapshot-move run.
        #[arg(long, default_value_t = 16)]
        snapshot_every: u64,
        /// An earlier `ebb` binary: three-node ingest is also measured with it, alternating
        /// with this build (`before=` in the RESULT line).
        #[arg(long)]
        baseline_bin: Option<PathBuf>,
        /// Working directory (default: a temporary directory, removed afterwards).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Scale-out: ingest at saturation on 3 nodes, then 3 more join (writes continue while
    /// shards and leaders rebalance) and the load runs on 6; every node held to the same CPU
    /// share by a cgroup (needs root).
    Scale(ebb_benches::scale::ScaleArgs),
    /// Erasures under ingest on a three-node cluster: ingest rate against a load without
    /// erasures, persistence latency on every replica against the deadline, audit time.
    Erasure {
        /// Data set as HOSTSxHOURS.
        #[arg(long, default_value = "1000x6")]
        set: String,
        /// Concurrent client connections (spread over the nodes).
        #[arg(long, default_value_t = 4)]
        clients: usize,
        /// Shards of the cluster.
        #[arg(long, default_value_t = 4)]
        shards: u32,
        /// Erasures issued during the load.
        #[arg(long, default_value_t = 10)]
        erasures: usize,
        /// Seconds between erasures.
        #[arg(long, default_value_t = 1)]
        interval: u64,
        /// Each erasure's deadline, in seconds.
        #[arg(long, default_value_t = 30)]
        deadline: u64,
        /// Working directory (default: a temporary directory, removed afterwards).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Rollups: ingest with a rollup kept against without, and an hourly dashboard query
    /// from the rollup against the same aggregate over the raw rows.
    Rollup(ebb_benches::rollup::RollupArgs),
    /// Backups: full backup and restore throughput against `cp -r`, an incremental backup's
    /// bytes against the new files, one ERASE reaching every backup set against its deadline,
    /// and ingest while backups run against ingest alone.
    Backup(ebb_benches::backup::BackupArgs),
    /// Foreground write latency while replicas move to a new node, with the movers limited
    /// (`--move-rate`) against unlimited, and how long the moves take.
    Moves(ebb_benches::moves::MovesArgs),
    /// The TSBS devops query set on TSBS cpu data: EbbDB (SQL) against InfluxDB (InfluxQL) and
    /// QuestDB (SQL), plus a prepared statement over pgwire and a time-window DELETE.
    Query(ebb_benches::tsbs_cli::QueryArgs),
}

fn dataset(s: &str) -> ebb_benches::tsbs::Dataset {
    s.parse().unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(2);
    })
}

fn work_dir(dir: Option<PathBuf>, tmp: &mut Option<tempfile::TempDir>) -> PathBuf {
    match dir {
        Some(d) => {
            if d.exists() {
                eprintln!("error: {} exists; pass a new directory", d.display());
                std::process::exit(2);
            }
            d
        }
        None => match tempfile::Builder::new().prefix("ebb-bench-").tempdir_in(".") {
            Ok(t) => tmp.insert(t).path().to_path_buf(),
            Err(e) => {
                eprintln!("error: cannot create a working directory: {e}");
                std::process::exit(2);
            }
        },
    }
}

fn main() {
    let cli = Cli::parse();
    let quick = cli.quick;
    match cli.cmd {
        Cmd::Engine {
            num,
            reads,
            seeks,
            seek_nexts,
            write_buffer_size,
            cache_size,
            repeat,
            sync,
            db_bench,
            dir,
        } => {
            // The quick run's memtable is small enough for the fill to reach level 1.
            let (num, reads, seeks, seek_nexts, repeat, write_buffer_size) = match quick {
                true => (20_000, 5_000, 1_000, 10, 1, 256 << 10),
                false => (num, reads, seeks, seek_nexts, repeat, write_buffer_size),
            };
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
                sync,
            };
            let mut tmp = None;
            let work = work_dir(dir, &mut tmp);
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
        Cmd::Deletes { parts, rows, fade_ops, kiwi_tiles, sync, dir } => {
            let (rows, fade_ops) = if quick { (20_000, 16_384) } else { (rows, fade_ops) };
            let kiwi_tiles = if kiwi_tiles.is_empty() {
                ebb_benches::deletes::default_kiwi_tiles()
            } else {
                kiwi_tiles
            };
            let s = ebb_benches::deletes::Settings { rows, fade_ops, kiwi_tiles, sync };
            println!("settings: rows={rows} fade_ops={fade_ops} sync={}", sync.name());
            let mut tmp = None;
            let work = work_dir(dir, &mut tmp);
            for part in &parts {
                println!("part {part}:");
                let res = match part.as_str() {
                    "fade" => ebb_benches::deletes::fade(&work, &s),
                    "window" => ebb_benches::deletes::window(&work, &s),
                    "reads" => ebb_benches::deletes::reads(&work, &s),
                    "series" => ebb_benches::deletes::series(&work, &s),
                    other => Err(format!("unknown part {other:?} (fade, window, reads, series)")),
                };
                if let Err(e) = res {
                    eprintln!("error: {e}");
                    std::process::exit(1);
                }
            }
        }
        Cmd::Ingest(mut args) => {
            if quick {
                args.quick();
            }
            let mut tmp = None;
            let work = work_dir(args.dir.clone(), &mut tmp);
            if let Err(e) = args.run(&work) {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
        }
        Cmd::RangeQuery {
            keys,
            queries,
            ranges,
            bits_per_key,
            value_size,
            cache_size,
            no_rocksdb,
            part,
            runs,
            sync,
            dir,
        } => {
            let (keys, queries, runs) =
                if quick { (20_000, 1_000, vec![2, 4]) } else { (keys, queries, runs) };
            let mut tmp = None;
            let work = work_dir(dir, &mut tmp);
            let result = match part.as_str() {
                "grf" => ebb_benches::range_grf::run(
                    &work,
                    &ebb_benches::range_grf::Settings {
                        runs,
                        series: (keys / 1000).max(10),
                        points: 60,
                        queries,
                        window_secs: 300,
                        cache_size,
                        sync,
                    },
                ),
                "reduce" => ebb_benches::range_reduce::run(
                    &work,
                    &ebb_benches::range_reduce::Settings {
                        keys,
                        updates: keys,
                        scans: queries,
                        range: if quick { 1_000 } else { 10_000 },
                        sync,
                    },
                ),
                "filters" => ebb_benches::range_query::run(
                    &work,
                    &ebb_benches::range_query::Settings {
                        keys,
                        queries,
                        ranges: ranges.into_iter().filter(|&r| r >= 1).collect(),
                        value_size,
                        bits_per_key,
                        cache_size,
                        rocksdb: !no_rocksdb,
                        sync,
                    },
                ),
                other => Err(format!("unknown part {other:?} (filters, grf, reduce)")),
            };
            print_results(result);
        }
        Cmd::ServerLayout { hosts, points, step_secs, queries, page_cache_mb, sync, dir } => {
            let (hosts, points, queries) =
                if quick { (500, 20, 20) } else { (hosts, points, queries) };
            let s = ebb_benches::server_layout::Settings {
                hosts,
                points,
                step_secs,
                queries,
                page_cache: page_cache_mb << 20,
                sync,
            };
            let mut tmp = None;
            let work = work_dir(dir, &mut tmp);
            print_results(ebb_benches::server_layout::run(&work, &s));
        }
        Cmd::Backup(mut args) => {
            if quick {
                args.quick();
            }
            let mut tmp = None;
            print_results(args.run(&work_dir(args.dir.clone(), &mut tmp)));
        }
        Cmd::Rollup(mut args) => {
            if quick {
                args.quick();
            }
            let mut tmp = None;
            print_results(args.run(&work_dir(args.dir.clone(), &mut tmp)));
        }
        Cmd::Moves(mut args) => {
            if quick {
                args.quick();
            }
            let mut tmp = None;
            print_results(args.run(&work_dir(args.dir.clone(), &mut tmp)));
        }
        Cmd::Cluster { set, clients, shards, snapshot_every, baseline_bin, dir } => {
            let s = ebb_benches::cluster::Settings {
                dataset: dataset(if quick { "20x1" } else { &set }),
                clients: clients.max(1),
                shards: shards.max(1),
                snapshot_every: snapshot_every.max(16),
                baseline_bin,
            };
            let mut tmp = None;
            let work = work_dir(dir, &mut tmp);
            if let Err(e) = ebb_benches::cluster::run(&work, &s) {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
        }
        Cmd::Scale(mut args) => {
            if quick {
                args.quick();
            }
            let mut tmp = None;
            let work = work_dir(args.dir.clone(), &mut tmp);
            if let Err(e) = args.run(&work) {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
        }
        Cmd::Erasure { set, clients, shards, erasures, interval, deadline, dir } => {
            let (erasures, deadline) = if quick { (2, 10) } else { (erasures, deadline) };
            let s = ebb_benches::erasure::Settings {
                dataset: dataset(if quick { "50x1" } else { &set }),
                clients: clients.max(1),
                shards: shards.max(1),
                erasures: erasures.max(1),
                interval: match quick {
                    true => std::time::Duration::from_millis(50),
                    false => std::time::Duration::from_secs(interval.max(1)),
                },
                deadline: std::time::Duration::from_secs(deadline.max(1)),
            };
            let mut tmp = None;
            let work = work_dir(dir, &mut tmp);
            if let Err(e) = ebb_benches::erasure::run(&work, &s) {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
        }
        Cmd::Security { set, clients, reps, repeat, dir } => {
            let (reps, repeat) = if quick { (10, 1) } else { (reps, repeat) };
            let mut tmp = None;
            let work = work_dir(dir, &mut tmp);
            let ds = dataset(if quick { "10x1" } else { &set });
            match ebb_benches::security::security(
                &work,
                ds,
                clients.max(1),
                reps.max(1),
                repeat.max(1),
            ) {
                Ok(results) => results.iter().for_each(|c| println!("{}", c.line())),
                Err(e) => {
                    eprintln!("error: {e}");
                    std::process::exit(1);
                }
            }
        }
        Cmd::Durability { set, clients, rows_per_request, repeat, dir } => {
            let (set, rows_per_request, repeat) = match quick {
                true => ("10x1".to_string(), vec![500], 1),
                false => (set, rows_per_request, repeat),
            };
            let mut tmp = None;
            let work = work_dir(dir, &mut tmp);
            let sizes: Vec<usize> = rows_per_request.iter().map(|n| (*n).max(1)).collect();
            match ebb_benches::durability::durability(
                &work,
                dataset(&set),
                clients.max(1),
                &sizes,
                repeat.max(1),
            ) {
                Ok(results) => results.iter().for_each(|c| println!("{}", c.line())),
                Err(e) => {
                    eprintln!("error: {e}");
                    std::process::exit(1);
                }
            }
        }
        Cmd::Query(mut args) => {
            if quick {
                args.quick();
            }
            let mut tmp = None;
            let work = work_dir(args.dir.clone(), &mut tmp);
            if let Err(e) = args.run(&work) {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
        }
        Cmd::RangeDelete {
            rd,
            universe,
            preload,
            ops,
            range_len,
            value_size,
            write_buffer_size,
            cache_size,
            sync,
            systems,
            repeat,
            plot,
            dir,
        } => {
            let systems: Vec<System> =
                match systems.iter().map(|s| System::parse(s)).collect::<Result<_, _>>() {
                    Ok(v) => v,
                    Err(e) => {
                        eprintln!("error: {e}");
                        std::process::exit(2);
                    }
                };
            // The quick run's memtable is small enough for the preload to reach level 1.
            let (universe, preload, ops, repeat, write_buffer_size) = match quick {
                true => (20_000, 10_000, 10_000, 1, 256 << 10),
                false => (universe, preload, ops, repeat, write_buffer_size),
            };
            let s = ebb_benches::range_delete::Settings {
                universe,
                preload,
                ops,
                range_len,
                value_size,
                write_buffer_size,
                cache_size,
                target_file_size: write_buffer_size as u64,
                base_level_size: 4 * write_buffer_size as u64,
                sync,
            };
            let mut tmp = None;
            let work = work_dir(dir, &mut tmp);
            if let Err(e) = ebb_benches::range_delete_report::run(
                &work,
                &s,
                &rd,
                &systems,
                repeat,
                plot.as_deref(),
            ) {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
        }
    }
}

/// Prints the `RESULT` lines, or the error and exits with status 1.
fn print_results(result: Result<Vec<ebb_benches::report::Comparison>, String>) {
    match result {
        Ok(lines) => lines.iter().for_each(|c| println!("{}", c.line())),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
