//! `ebb-bench backup`: what backups cost and how fast deletes reach them, on one `ebb server`
//! process loaded with the TSBS devops data set (all figures from the same run):
//!
//! - full backup throughput (`BACKUP TO` a directory) against copying the same data directory
//!   with `cp -r` then `sync -f` (MiB/s of the data; both durable when they end, as a backup
//!   must be): after a flush and the compactions it caused, when both copy the same files
//!   and nothing runs beside them, and right after the load, when the backup first flushes
//!   the memtables whose log is over 16 MiB (cp copies that log) and compactions run beside
//!   it;
//! - an incremental backup after 10% more data: bytes it copied against the bytes the data grew
//!   by (the second set's bytes less the first's);
//! - how long one `ERASE` takes to reach every one of `sets` backup sets (each purged, as
//!   `system.deletions` shows), against its deadline;
//! - `ebb restore` throughput against `cp -r` then `sync -f` of the destination;
//! - ingest while backups run back to back against ingest alone (two fresh servers);
//! - a `DELETE`'s latency once the server has a backup destination (each delete is then
//!   journaled for the sets, durably, before it is applied) against the same server's before
//!   it had one; with `--baseline-bin`, also a server of that build without destinations
//!   against this build's.
//!
//! The incremental figure compares sets taken right after a flush (`/v1/admin/flush`), so both
//! hold the same kind of files: a set taken without one carries the write-ahead log of what is
//! not flushed, and the next set the tables that log became, which says nothing of how much
//! an incremental backup copies.
//!
//! Both sides of each comparison use the same disk and the same files, and each starts with
//! nothing left to write back (`sync` first); backups run unthrottled (no `--backup-rate`), as
//! `cp` does.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::ebb_server::Server;
use crate::peers::ebb_binary;
use crate::report::{Better, Comparison};
use crate::tsbs::{generate, Dataset, START_S};

/// `ebb-bench backup`.
#[derive(Debug, Clone, clap::Args)]
pub struct BackupArgs {
    /// Data set as HOSTSxHOURS (the first 90% of it is loaded before the first backup).
    #[arg(long, default_value = "1000x6")]
    pub set: String,
    /// Concurrent writers.
    #[arg(long, default_value_t = 4)]
    pub clients: usize,
    /// Backup sets one ERASE must reach.
    #[arg(long, default_value_t = 10)]
    pub sets: usize,
    /// The ERASE's deadline, in seconds (the baseline of its figure).
    #[arg(long, default_value_t = 600)]
    pub deadline: u64,
    /// DELETE statements timed on each server.
    #[arg(long, default_value_t = 50)]
    pub deletes: usize,
    /// An `ebb` binary of another build: its DELETE latency (without destinations) is the
    /// baseline of this build's.
    #[arg(long)]
    pub baseline_bin: Option<PathBuf>,
    /// Working directory (default: a temporary directory, removed afterwards).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

impl BackupArgs {
    /// The smallest run (`--quick`): 20 hosts for an hour, 3 backup sets, 5 deletes, a 2-minute
    /// erasure deadline.
    pub fn quick(&mut self) {
        self.set = "20x1".into();
        self.sets = 3;
        self.deletes = 5;
        self.deadline = 120;
    }

    /// Runs the benchmark in `work`.
    pub fn run(&self, work: &Path) -> Result<Vec<Comparison>, String> {
        run(work, self)
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

const MIB: f64 = 1024.0 * 1024.0;

/// Every regular file under `dir`, by path relative to it, with its size.
fn files(dir: &Path) -> HashMap<PathBuf, u64> {
    let mut out = HashMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(p),
                Ok(t) if t.is_file() => {
                    let len = e.metadata().map(|m| m.len()).unwrap_or(0);
                    out.insert(p.strip_prefix(dir).unwrap_or(&p).to_path_buf(), len);
                }
                _ => {}
            }
        }
    }
    out
}

/// Seconds `cp -r from to` then `sync -f to` (the copy made durable) take.
fn cp(from: &Path, to: &Path) -> Result<f64, String> {
    clean_disk()?;
    let t = Instant::now();
    let out = std::process::Command::new("cp").arg("-r").arg(from).arg(to).output().map_err(err)?;
    if !out.status.success() {
        return Err(format!("cp: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let out = std::process::Command::new("sync").arg("-f").arg(to).output().map_err(err)?;
    if !out.status.success() {
        return Err(format!("sync: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(t.elapsed().as_secs_f64())
}

/// Writes back everything written so far (`sync`), so the copy timed next does not pay for the
/// write-back of what ran before it (the first sync after a load writes back every file the
/// load's flushes and compactions left in the page cache, whichever copy calls it).
fn clean_disk() -> Result<(), String> {
    let out = std::process::Command::new("sync").output().map_err(err)?;
    if !out.status.success() {
        return Err(format!("sync: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(())
}

/// Runs `BACKUP TO dest`: the backup's row.
fn backup(s: &Server, dest: &Path) -> Result<serde_json::Value, String> {
    let body = s.sql(&format!("BACKUP TO '{}'", dest.display()))?;
    let rows: serde_json::Value = serde_json::from_str(&body).map_err(err)?;
    let row = rows[0].clone();
    if row["state"] != "done" {
        return Err(format!("backup: {row}"));
    }
    Ok(row)
}

/// Flushes the server's memtables.
fn flush(s: &Server) -> Result<(), String> {
    s.post_path("/v1/admin/flush", b"").map(drop)
}

/// Median milliseconds of `n` DELETEs on `s`, each of one host's first hour (hosts `from..`).
fn deletes(s: &Server, from: usize, n: usize) -> Result<f64, String> {
    let hi = crate::tsbs_queries::rfc3339(START_S + 3600);
    let mut times = Vec::with_capacity(n);
    for i in from..from + n {
        let t = Instant::now();
        s.sql(&format!("DELETE FROM cpu WHERE hostname = 'host_{i}' AND time < {hi}"))?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    Ok(times.get(times.len() / 2).copied().unwrap_or(0.0))
}

/// DELETE latency with a backup destination against without (one server), and without
/// destinations against `--baseline-bin`'s build (a server of each, the same data).
fn delete_latency(
    work: &Path,
    a: &BackupArgs,
    batches: &[String],
) -> Result<Vec<Comparison>, String> {
    let n = a.deletes.max(1);
    // A tenth of the load: the deletes' cost, not the data's size, is measured.
    let load = &batches[..batches.len().div_ceil(10)];
    let rows = load.iter().map(|x| x.lines().count()).sum::<usize>();
    let cmp = |metric: &str, ebb: f64, baseline: &str, base: f64| Comparison {
        bench: "backup".into(),
        metric: metric.into(),
        params: vec![("deletes".into(), n.to_string())],
        ebb,
        baseline: baseline.into(),
        base,
        better: Better::Lower,
    };
    let mut out = Vec::new();
    let s = Server::start(&work.join("deletes"), false, &[])?;
    s.ingest(load, rows, a.clients)?;
    let without = deletes(&s, 0, n)?;
    backup(&s, &work.join("dest-deletes"))?;
    let with = deletes(&s, n, n)?;
    drop(s);
    println!(
        "  DELETE latency (median of {n}): {without:.2} ms without a backup destination, \
         {with:.2} ms with one (each delete journaled for its sets)"
    );
    out.push(cmp("delete_ms_with_destination", with, "no_destination", without));
    if let Some(bin) = &a.baseline_bin {
        let s = Server::start_bin(bin, &work.join("deletes-before"), false, &[])?;
        s.ingest(load, rows, a.clients)?;
        let before = deletes(&s, 0, n)?;
        drop(s);
        println!(
            "  DELETE latency (median of {n}) without destinations: {without:.2} ms, {before:.2} \
             ms with {}",
            bin.display()
        );
        out.push(cmp("delete_ms", without, "before", before));
    }
    Ok(out)
}

fn field(row: &serde_json::Value, k: &str) -> Result<u64, String> {
    row[k].as_u64().ok_or_else(|| format!("no {k} in {row}"))
}

fn run(work: &Path, a: &BackupArgs) -> Result<Vec<Comparison>, String> {
    let ds: Dataset = a.set.parse()?;
    let batches = generate(ds, 5000);
    let cut = batches.len() * 9 / 10;
    let (old, new) = batches.split_at(cut);
    let rows = |b: &[String]| b.iter().map(|x| x.lines().count()).sum::<usize>();
    let param = |k: &str, v: String| (k.to_string(), v);
    let params = vec![param("set", ds.label())];
    let cmp = |metric: &str, ebb: f64, baseline: &str, base: f64, better| Comparison {
        bench: "backup".into(),
        metric: metric.into(),
        params: params.clone(),
        ebb,
        baseline: baseline.into(),
        base,
        better,
    };
    let mut out = Vec::new();
    println!("backup {}: {} rows ({} before the first backup)", ds.label(), ds.rows(), rows(old));

    let dir = work.join("node");
    let s = Server::start(&dir, false, &[])?;
    let data = dir.join("data");
    s.ingest(old, rows(old), a.clients)?;

    // Full backups against cp -r of the data directory: right after the load (the backup
    // flushes memtables whose log is over 16 MiB first; cp copies the log), then after a flush
    // and its compactions, when both copy the same files: three rounds, each a backup to a
    // destination of its own then a cp, the median of each side (the disk's write rate varies
    // with what was written just before, so the sides take turns).
    let full_to = |to: &str| -> Result<(f64, f64), String> {
        clean_disk()?;
        let t = Instant::now();
        let set = backup(&s, &work.join(to))?;
        Ok((field(&set, "bytes")? as f64 / MIB, t.elapsed().as_secs_f64()))
    };
    let (loaded_mib, loaded_secs) = full_to("dest-after-load")?;
    s.post_path("/v1/admin/flush?wait=compactions", b"")?;
    let data_mib = files(&data).values().sum::<u64>() as f64 / MIB;
    let (mut set_mib, mut backup_secs, mut cp_secs) = (0.0, Vec::new(), Vec::new());
    let mut dests = vec!["dest-after-load".to_string()];
    for round in 0..3 {
        let to = format!("dest-full-{round}");
        let (mib, secs) = full_to(&to)?;
        dests.push(to);
        set_mib = mib;
        backup_secs.push(secs);
        cp_secs.push(cp(&data, &work.join("cp-data"))?);
        let _ = std::fs::remove_dir_all(work.join("cp-data"));
    }
    // Emptied as an operator would: the server remembers the destinations and journals every
    // later delete there, so they stay.
    for d in &dests {
        let at = work.join(d);
        crate::ebb_server::run(
            &ebb_binary()?,
            &["backup", "prune", "--keep", "0", "--at", &at.to_string_lossy()],
        )?;
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let times = |v: &[f64]| v.iter().map(|t| format!("{t:.2}")).collect::<Vec<_>>().join(", ");
    println!(
        "  full backup after a flush: {set_mib:.1} MiB in {} s; cp -r and sync of the data \
         directory: {data_mib:.1} MiB in {} s; right after the load (flushing first): \
         {loaded_mib:.1} MiB in {loaded_secs:.2} s",
        times(&backup_secs),
        times(&cp_secs)
    );
    let (secs, cp_secs) = (median(backup_secs), median(cp_secs));
    let full = set_mib / secs;
    let cp_rate = data_mib / cp_secs;
    out.push(cmp("full_mib_per_s", full, "cp_sync", cp_rate, Better::Higher));
    out.push(cmp(
        "full_after_load_mib_per_s",
        loaded_mib / loaded_secs,
        "cp_sync",
        cp_rate,
        Better::Higher,
    ));

    let dest = work.join("dest");
    // Incremental after 10% more data, between two sets taken right after a flush.
    flush(&s)?;
    let first = backup(&s, &dest)?;
    let before = files(&data);
    s.ingest(new, rows(new), a.clients)?;
    flush(&s)?;
    let second = backup(&s, &dest)?;
    let copied = field(&second, "bytes_copied")?;
    let after = files(&data);
    let fresh: u64 =
        after.iter().filter(|(p, len)| before.get(*p) != Some(len)).map(|(_, len)| len).sum();
    let grown = field(&second, "bytes")?.saturating_sub(field(&first, "bytes")?);
    println!(
        "  incremental (sets after a flush): copied {:.1} MiB; the data grew by {:.1} MiB; files \
         new in the data directory since the set before: {:.1} MiB (compactions rewrite older \
         data)",
        copied as f64 / MIB,
        grown as f64 / MIB,
        fresh as f64 / MIB
    );
    out.push(cmp(
        "incremental_copied_mib",
        copied as f64 / MIB,
        "new_data",
        grown as f64 / MIB,
        Better::Lower,
    ));

    // Restore against cp -r of the destination.
    let restored = work.join("restored");
    clean_disk()?;
    let t = Instant::now();
    let bin = ebb_binary()?;
    let o = std::process::Command::new(&bin)
        .args(["restore", "--quiet", "--from"])
        .arg(&dest)
        .arg("--data-dir")
        .arg(&restored)
        .output()
        .map_err(err)?;
    if !o.status.success() {
        return Err(format!("ebb restore: {}", String::from_utf8_lossy(&o.stderr)));
    }
    let r_secs = t.elapsed().as_secs_f64();
    let r_mib = field(&second, "bytes")? as f64 / MIB;
    let dest_mib = files(&dest).values().sum::<u64>() as f64 / MIB;
    let c_secs = cp(&dest, &work.join("cp-dest"))?;
    let _ = std::fs::remove_dir_all(work.join("cp-dest"));
    let _ = std::fs::remove_dir_all(&restored);
    println!(
        "  restore: {r_mib:.1} MiB in {r_secs:.2} s; cp -r and sync of the destination: \
         {dest_mib:.1} MiB in {c_secs:.2} s"
    );
    out.push(cmp(
        "restore_mib_per_s",
        r_mib / r_secs,
        "cp_sync",
        dest_mib / c_secs,
        Better::Higher,
    ));

    // One ERASE reaching `sets` sets (two are at `dest` already).
    for i in 2..a.sets {
        // A little new data each time, so each set has files of its own.
        let one = &new[i % new.len()..i % new.len() + 1];
        s.ingest(one, rows(one), 1)?;
        backup(&s, &dest)?;
    }
    let objects_before = files(&dest.join("objects"));
    let t = Instant::now();
    let body =
        s.sql(&format!("ERASE WHERE hostname = 'host_0' DEADLINE '{}s'", a.deadline.max(1)))?;
    let rows_v: serde_json::Value = serde_json::from_str(&body).map_err(err)?;
    let id = rows_v[0]["erasure_id"].as_u64().ok_or_else(|| format!("no erasure id: {body}"))?;
    let q = format!(
        "SELECT count(*) AS c FROM system.deletions WHERE id = {id} AND copy <> 'replica' \
         AND replica_status = 'persisted'"
    );
    let limit = Duration::from_secs(a.deadline.max(1) * 2);
    let reached = loop {
        let body = s.sql(&q)?;
        let v: serde_json::Value = serde_json::from_str(&body).map_err(err)?;
        if v[0]["c"].as_u64().unwrap_or(0) >= a.sets as u64 {
            break t.elapsed().as_secs_f64();
        }
        if t.elapsed() > limit {
            return Err(format!("the erasure reached fewer than {} sets in {limit:?}", a.sets));
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    println!("  one ERASE reached {} sets in {reached:.1} s (deadline {} s)", a.sets, a.deadline);
    let mut c = cmp("erase_reaches_sets_s", reached, "deadline", a.deadline as f64, Better::Lower);
    c.params.push(param("sets", a.sets.to_string()));
    out.push(c);
    // What the purges wrote: objects new since the ERASE, against every object the sets had
    // (what purges rewriting every file would write).
    let objects_after = files(&dest.join("objects"));
    let written: u64 = objects_after
        .iter()
        .filter(|(p, _)| !objects_before.contains_key(*p))
        .map(|(_, len)| len)
        .sum();
    let had: u64 = objects_before.values().sum();
    println!(
        "  the purges wrote {:.1} MiB of objects; the sets' objects before the ERASE: {:.1} MiB",
        written as f64 / MIB,
        had as f64 / MIB
    );
    let mut c = cmp(
        "purge_written_mib",
        written as f64 / MIB,
        "all_objects",
        had as f64 / MIB,
        Better::Lower,
    );
    c.params.push(param("sets", a.sets.to_string()));
    out.push(c);
    drop(s);

    out.extend(delete_latency(work, a, old)?);

    // Ingest while backups run back to back, against ingest alone (fresh servers).
    let alone = {
        let s = Server::start(&work.join("alone"), false, &[])?;
        s.ingest(&batches, rows(&batches), a.clients)?
    };
    let during = {
        let s = Server::start(&work.join("during"), false, &[])?;
        let dest = work.join("dest-during");
        let stop = AtomicBool::new(false);
        let (rate, taken) = std::thread::scope(|sc| {
            let b = sc.spawn(|| {
                let mut n = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    if backup(&s, &dest).is_ok() {
                        n += 1;
                    }
                }
                n
            });
            let rate = s.ingest(&batches, rows(&batches), a.clients);
            stop.store(true, Ordering::Relaxed);
            (rate, b.join().unwrap_or(0))
        });
        println!("  {taken} backups ran during the load");
        rate?
    };
    println!("  ingest: {alone:.0} rows/s alone, {during:.0} rows/s with backups running");
    out.push(cmp("ingest_rows_per_s_during_backups", during, "no_backups", alone, Better::Higher));
    Ok(out)
}
