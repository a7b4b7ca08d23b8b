//! What deletes need of a replica besides its engine: the Raft log and the snapshots hold
//! written values too, so a delete is persisted on a replica only once neither does.
//!
//! Every snapshot records in a `WATERMARK` file what the engine no longer held just before its
//! checkpoint ([`ebb_storage::Engine::engine_clearance`]: deletes below the persistence
//! watermark, and expedited ones above it whose data was gone): the files it links hold no data
//! of those. The replica's *log clearance*, which the engine combines with its own, is what the
//! log (every entry before the oldest stored one is gone, so deletes written by them are clear of
//! it) and every snapshot stored or being received are all clear of; an engine directory a
//! snapshot install replaced clears nothing until it is removed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use std::collections::BTreeSet;

use ebb_storage::audit::{scan_sst_file, Coverage, SourceScan};
use ebb_storage::LogClearance;

use super::applied::entry_seq;
use super::replica::{engine_dir_name, prune_snapshots_to};
use super::snapshot::write_atomic;
use super::Replica;
use crate::error::ReplicaError;

/// The file in a snapshot holding the watermark its files are clear of.
pub const WATERMARK_FILE: &str = "WATERMARK";

pub(super) fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<PathBuf> =
        rd.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.is_dir()).collect();
    out.sort();
    out
}

/// What the snapshot in `dir` is clear of (nothing if it does not say).
fn snapshot_clearance(dir: &Path) -> LogClearance {
    let Ok(text) = std::fs::read_to_string(dir.join(WATERMARK_FILE)) else {
        return LogClearance::below(0);
    };
    let mut nums = text.split_whitespace().map(|w| w.parse::<u64>());
    match nums.next() {
        Some(Ok(below)) => match nums.collect::<Result<BTreeSet<u64>, _>>() {
            Ok(also) => LogClearance { below, also },
            Err(_) => LogClearance::below(0),
        },
        _ => LogClearance::below(0),
    }
}

/// Records in the snapshot directory `dir` what its files are clear of.
pub(super) fn write_clearance(dir: &Path, c: &LogClearance) -> Result<(), ReplicaError> {
    let mut text = c.below.to_string();
    for id in &c.also {
        text.push('\n');
        text.push_str(&id.to_string());
    }
    write_atomic(&dir.join(WATERMARK_FILE), text.as_bytes())
}

/// The deletes every one of `all` clears (every delete, if `all` is empty).
fn intersection(all: &[LogClearance]) -> LogClearance {
    let below = all.iter().map(|c| c.below).min().unwrap_or(u64::MAX);
    let also = all
        .iter()
        .flat_map(|c| c.also.iter().copied())
        .filter(|id| *id >= below && all.iter().all(|c| c.is_clear(*id)))
        .collect();
    LogClearance { below, also }
}

impl Replica {
    /// Every directory besides the current engine that may hold engine files: snapshots
    /// (stored, being built, being received) and engine generations a snapshot install
    /// replaced, each with what its files are clear of.
    fn other_data_dirs(&self) -> Vec<(PathBuf, LogClearance)> {
        let mut out = Vec::new();
        for d in subdirs(&self.root.join("snapshots"))
            .into_iter()
            .chain(subdirs(&self.root.join("incoming")))
        {
            let c = snapshot_clearance(&d);
            out.push((d, c));
        }
        let current = engine_dir_name(*self.generation.lock());
        for d in subdirs(&self.root) {
            let name = d.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if name.starts_with("engine-") && name != current {
                out.push((d, LogClearance::below(0)));
            }
        }
        out
    }

    /// Recomputes the log clearance from what is stored (the oldest log entry stored is
    /// `log_first`; see the module docs) and gives it to the engine, which marks the deletes it
    /// clears persisted.
    pub fn refresh_log_clearance(&self, log_first: u64) -> Result<LogClearance, ReplicaError> {
        let _g = self.watermark_lock.lock();
        let mut all: Vec<LogClearance> =
            self.other_data_dirs().into_iter().map(|(_, c)| c).collect();
        all.push(LogClearance::below(entry_seq(log_first)?));
        let c = intersection(&all);
        self.engine().set_log_clearance(c.clone())?;
        Ok(c)
    }

    /// What the copies a log compaction leaves in place are clear of: snapshots being
    /// received, and engine directories replaced by a snapshot that a reader still holds
    /// (a compaction replaces the snapshots this replica built, and purges the log).
    pub fn fixed_copies_clearance(&self) -> LogClearance {
        let snapshots = self.root.join("snapshots");
        let fixed: Vec<LogClearance> = self
            .other_data_dirs()
            .into_iter()
            .filter(|(d, _)| !d.starts_with(&snapshots))
            .map(|(_, c)| c)
            .collect();
        intersection(&fixed)
    }

    /// Removes every snapshot but the current one (the one before it may be streaming to a
    /// follower, which then starts over with the current one), and received snapshots left
    /// behind by transfers that stopped more than `stale` ago.
    pub fn drop_older_snapshots(&self, stale: Duration) {
        let keep = self.current.lock().as_ref().map(|(_, s)| s.dir().to_path_buf());
        prune_snapshots_to(&self.root.join("snapshots"), keep.as_deref(), 1);
        for d in subdirs(&self.root.join("incoming")) {
            let age = std::fs::metadata(&d)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok());
            if age.is_some_and(|a| a > stale) {
                let _ = std::fs::remove_dir_all(&d);
            }
        }
    }

    /// Scans the SSTs of every snapshot and replaced engine directory for values `coverage`
    /// covers (the current engine is audited by the engine itself).
    pub fn audit_other_files(&self, coverage: &Coverage) -> Result<Vec<SourceScan>, ReplicaError> {
        let mut out = Vec::new();
        for (dir, _) in self.other_data_dirs() {
            let kind = if dir.starts_with(self.root.join("snapshots"))
                || dir.starts_with(self.root.join("incoming"))
            {
                "snapshot sst"
            } else {
                "replaced engine sst"
            };
            let Ok(rd) = std::fs::read_dir(&dir) else { continue }; // removed since listed
            let mut files: Vec<PathBuf> = rd
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "sst"))
                .collect();
            files.sort();
            for f in files {
                match scan_sst_file(&f, kind, coverage) {
                    Ok(s) => out.push(s),
                    Err(_) if !f.exists() => {} // removed since listed
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(out)
    }
}
