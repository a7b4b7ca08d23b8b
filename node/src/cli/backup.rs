//! `ebb backup` and `ebb restore`.
//!
//! `create` runs `BACKUP TO` on the server (which needs ADMIN) and prints its progress from
//! `system.backups` while it runs; `list` shows `system.backups`, or with `--at` the sets at a
//! destination. `verify`, `prune` and `restore` work on the destination directly, with this
//! process's credentials (`AWS_*` or a credentials file the URI names).

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use ebb_backup::{BackupStore, Destination, Progress, ProgressSnapshot, Throttle};

use super::sql::{run_one, OutputFormat};
use crate::error::{NodeError, Result};

/// `ebb backup create --to URI`: the set's row as the server printed it.
pub fn create(base: &str, to: &str, encrypt: bool, quiet: bool) -> Result<String> {
    // Refused here too, so a URI with a secret in it is never sent.
    let dest = Destination::parse(to)?;
    let encrypted = if encrypt { " ENCRYPTED" } else { "" };
    let sql = format!("BACKUP TO '{}'{encrypted}", to.replace('\'', "''"));
    let (base2, sql2) = (base.to_string(), sql.clone());
    let run = std::thread::spawn(move || run_one(&base2, "public", &sql2, OutputFormat::Table));
    let mut last = String::new();
    while !run.is_finished() {
        std::thread::sleep(Duration::from_millis(500));
        if quiet {
            continue;
        }
        if let Some(line) = progress_line(base, &dest.to_string()) {
            if line != last {
                eprint!("\r{line}");
                let _ = std::io::stderr().flush();
                last = line;
            }
        }
    }
    if !last.is_empty() {
        eprintln!();
    }
    run.join().map_err(|_| NodeError::Client("the backup request thread failed".into()))?
}

/// What `system.backups` says of the running backup to `dest`, as one line.
fn progress_line(base: &str, dest: &str) -> Option<String> {
    let sql = format!(
        "SELECT id, files, files_done, bytes, bytes_done, bytes_copied FROM system.backups \
         WHERE state = 'running' AND destination = '{}'",
        dest.replace('\'', "''")
    );
    let out = run_one(base, "public", &sql, OutputFormat::Json).ok()?;
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).ok()?;
    let r = rows.first()?;
    let n = |k: &str| r.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
    let p = ProgressSnapshot {
        files_total: n("files"),
        files_done: n("files_done"),
        bytes_total: n("bytes"),
        bytes_done: n("bytes_done"),
        bytes_copied: n("bytes_copied"),
        objects_copied: 0,
    };
    Some(format!("{}: {}", r.get("id")?.as_str()?, describe(&p)))
}

/// Progress as a person reads it.
fn describe(p: &ProgressSnapshot) -> String {
    let pct = (p.bytes_done * 100).checked_div(p.bytes_total).unwrap_or(0);
    format!(
        "{}/{} files, {} of {} ({pct}%), {} copied",
        p.files_done,
        p.files_total,
        size(p.bytes_done),
        size(p.bytes_total),
        size(p.bytes_copied)
    )
}

fn size(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// `ebb backup list --at URI`: the sets at a destination, one per line.
pub async fn list_at(at: &str) -> Result<String> {
    let store = BackupStore::open(&Destination::parse(at)?, Throttle::none()).await?;
    let mut out = String::from("id\tkind\tparts\tfiles\tbytes\tgeneration\n");
    for l in store.list().await? {
        match l.set {
            Ok(s) => out.push_str(&format!(
                "{}\t{}\t{}\t{}\t{}\t{}\n",
                s.id,
                s.kind.as_str(),
                s.parts.len(),
                s.files(),
                s.bytes(),
                s.generation
            )),
            Err(e) => out.push_str(&format!("{}\tunreadable: {e}\n", l.id)),
        }
    }
    Ok(out)
}

/// `ebb backup verify ID --at URI`: reads every object of set `id`; the summary, and whether
/// every object is whole.
pub async fn verify(at: &str, id: &str, rate: Option<u64>) -> Result<(String, bool)> {
    let store = BackupStore::open(&Destination::parse(at)?, Throttle::new(rate)).await?;
    let set = store.set(id).await?;
    let progress = Progress::default();
    let problems = store.verify(&set, &progress).await?;
    let p = progress.snapshot();
    let mut out =
        format!("backup {}: {} objects, {} read\n", set.id, p.files_done, size(p.bytes_done));
    for e in &problems {
        out.push_str(&format!("FAILED: {e}\n"));
    }
    if problems.is_empty() {
        out.push_str("every object matches its checksum\n");
    }
    Ok((out, problems.is_empty()))
}

/// `ebb backup prune --keep N --at URI`.
pub async fn prune(at: &str, keep: usize) -> Result<String> {
    let store = BackupStore::open(&Destination::parse(at)?, Throttle::none()).await?;
    let r = ebb_backup::prune::prune(&store, keep).await?;
    Ok(format!(
        "removed {} sets ({}), {} objects, {}\n",
        r.sets_removed.len(),
        r.sets_removed.join(", "),
        r.objects_removed,
        size(r.bytes_freed)
    ))
}

/// `ebb restore --from URI [--backup ID] --data-dir DIR`: the summary.
pub async fn restore(
    from: &str,
    id: Option<&str>,
    data_dir: &Path,
    rate: Option<u64>,
    keys: Option<&Path>,
    quiet: bool,
) -> Result<String> {
    let progress = std::sync::Arc::new(Progress::default());
    let shown = progress.clone();
    let ticker = (!quiet).then(|| {
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                eprint!("\r{}", describe(&shown.snapshot()));
                let _ = std::io::stderr().flush();
            }
        })
    });
    let set = crate::backup::restore::restore(from, id, data_dir, rate, keys, &progress).await;
    if let Some(t) = ticker {
        t.abort();
        eprintln!();
    }
    let restored = set?;
    let set = &restored.set;
    let applied = match restored.journal_applied.len() {
        0 => String::new(),
        n => format!(
            "; applied {n} delete request{} issued after it was taken",
            if n == 1 { "" } else { "s" }
        ),
    };
    let next = match set.kind {
        ebb_backup::SetKind::Cluster => format!(
            "start the new cluster's first node on it: ebb server --cluster --data-dir {} (no \
             --join); nodes that join it get replicas by the usual placement\n",
            data_dir.display()
        ),
        _ => format!("start it: ebb server --data-dir {}\n", data_dir.display()),
    };
    Ok(format!(
        "restored backup {} ({}) into {}: {} files, {}{applied}\n{next}",
        set.id,
        set.kind.as_str(),
        data_dir.display(),
        set.files(),
        size(set.bytes())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_progress_read_well() {
        assert_eq!(size(10), "10 B");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(3 << 30), "3.0 GiB");
        let p = ProgressSnapshot {
            files_total: 4,
            files_done: 1,
            bytes_total: 4 << 20,
            bytes_done: 1 << 20,
            bytes_copied: 512 << 10,
            objects_copied: 1,
        };
        assert_eq!(describe(&p), "1/4 files, 1.0 MiB of 4.0 MiB (25%), 512.0 KiB copied");
    }
}
