//! The deletion ledger: every delete the engine accepts, with when it was issued, when it took
//! effect for reads and when its covered data was physically gone from every live file, memtable
//! and WAL.
//!
//! The ledger is an append-only log `{n:08}.ledger` of checksummed records (the same framing as
//! the WAL and manifest): `Issued` records, and `PersistedBelow` marks saying every pending point
//! and range delete below a sequence number became persistent at a time. Records are buffered and
//! written before the WAL segments holding the deletes are removed (and on close), so a crash
//! never loses one the WAL cannot replay; replayed deletes already present are not issued twice.
//! On open the newest ledger file is read and appended to (older files, left by a crash during a
//! rewrite, are removed). Persisted records are forgotten `ledger_retention` after persistence;
//! once the file has grown well past its live records it is rewritten compactly into a new one.

mod record;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use record::{Deletion, DeletionKind, DeletionStatus};

use crate::log::{read_records, RecordWriter};
use crate::{Error, Result};

/// Name of ledger file `n`.
pub(crate) fn file_name(n: u64) -> String {
    format!("{n:08}.ledger")
}

#[derive(Debug, Serialize, Deserialize)]
enum Entry {
    Issued(Deletion),
    PersistedBelow { below: u64, at_ms: u64 },
    Persisted { id: u64, at_ms: u64 },
}

/// The ledger of one engine.
#[derive(Debug)]
pub(crate) struct Ledger {
    dir: PathBuf,
    number: u64,
    writer: RecordWriter,
    records: BTreeMap<u64, Deletion>,
    /// Pending point and range deletes (persisted by the watermark).
    pending: BTreeSet<u64>,
    /// Pending time-window deletes (persisted one by one).
    pending_windows: BTreeSet<u64>,
    /// Persisted deletes in persistence order, for pruning without a scan.
    persisted: std::collections::VecDeque<(u64, u64)>,
    buffered: Vec<Vec<u8>>,
    /// Bytes written at the last rewrite (the live records then).
    base_len: u64,
    /// Bytes written since the last fsync.
    unsynced: bool,
}

impl Ledger {
    /// Opens the ledger of `dir`: appends to the newest of `existing` (ledger file numbers; a
    /// torn tail is cut off, older files removed), or creates file `number` if there is none.
    pub fn open(dir: &Path, existing: &[u64], number: u64) -> Result<Ledger> {
        let mut records = BTreeMap::new();
        let newest = existing.iter().max().copied();
        let mut valid_len = 0;
        if let Some(n) = newest {
            let path = dir.join(file_name(n));
            let (raw, len) = read_records(&path)?;
            valid_len = len;
            for r in raw {
                let entry: Entry = postcard::from_bytes(&r.payload).map_err(|e| {
                    Error::corruption(&path, r.offset, format!("undecodable ledger record: {e}"))
                })?;
                apply(&mut records, entry);
            }
        }
        let open = |watermark: bool| {
            records
                .values()
                .filter(|d: &&Deletion| {
                    !d.is_persisted() && d.kind.follows_watermark() == watermark
                })
                .map(|d| d.id)
                .collect::<BTreeSet<u64>>()
        };
        let (pending, pending_windows) = (open(true), open(false));
        let mut persisted: Vec<(u64, u64)> =
            records.values().filter_map(|d| d.persisted_at_ms.map(|t| (t, d.id))).collect();
        persisted.sort_unstable();
        let (number, writer) = match newest {
            Some(n) => (n, RecordWriter::open_append(&dir.join(file_name(n)), valid_len)?),
            None => (number, RecordWriter::create(&dir.join(file_name(number)))?),
        };
        let mut ledger = Ledger {
            dir: dir.to_path_buf(),
            number,
            writer,
            records,
            pending,
            pending_windows,
            persisted: persisted.into(),
            buffered: Vec::new(),
            base_len: valid_len,
            unsynced: false,
        };
        if newest.is_none() {
            ledger.write_snapshot()?;
        }
        for n in existing.iter().filter(|&&n| Some(n) != newest) {
            let _ = std::fs::remove_file(dir.join(file_name(*n)));
        }
        Ok(ledger)
    }

    fn write_snapshot(&mut self) -> Result<()> {
        let all: Vec<Vec<u8>> =
            self.records.values().map(|d| encode(&Entry::Issued(d.clone()))).collect();
        self.writer.append_all(&all)?;
        self.writer.sync()?;
        crate::fs::sync_dir(&self.dir)?;
        self.base_len = self.writer.len();
        Ok(())
    }

    /// Records a new delete (ignored if its id is already known, as when the WAL replays it).
    pub fn issue(&mut self, d: Deletion) {
        if self.records.contains_key(&d.id) {
            return;
        }
        self.buffered.push(encode(&Entry::Issued(d.clone())));
        if !d.is_persisted() {
            if d.kind.follows_watermark() {
                self.pending.insert(d.id);
            } else {
                self.pending_windows.insert(d.id);
            }
        }
        self.records.insert(d.id, d);
    }

    /// Marks every pending delete with id below `below` persisted at `at_ms`. Returns how many.
    pub fn persist_below(&mut self, below: u64, at_ms: u64) -> usize {
        let rest = self.pending.split_off(&below);
        let done = std::mem::replace(&mut self.pending, rest);
        for id in &done {
            if let Some(d) = self.records.get_mut(id) {
                d.persisted_at_ms = Some(at_ms);
                self.persisted.push_back((at_ms, *id));
            }
        }
        if !done.is_empty() {
            self.buffered.push(encode(&Entry::PersistedBelow { below, at_ms }));
        }
        done.len()
    }

    /// Marks the time-window delete `id` persisted at `at_ms`.
    pub fn persist_one(&mut self, id: u64, at_ms: u64) {
        if self.pending_windows.remove(&id) {
            if let Some(d) = self.records.get_mut(&id) {
                d.persisted_at_ms = Some(at_ms);
                self.persisted.push_back((at_ms, id));
            }
            self.buffered.push(encode(&Entry::Persisted { id, at_ms }));
        }
    }

    /// Pending time-window deletes, oldest first.
    pub fn pending_windows(&self) -> impl Iterator<Item = &Deletion> + '_ {
        self.pending_windows.iter().filter_map(|id| self.records.get(id))
    }

    /// Writes buffered records to the OS.
    pub fn write_buffered(&mut self) -> Result<()> {
        if self.buffered.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.buffered);
        self.unsynced = true;
        self.writer.append_all(&batch)
    }

    /// Writes buffered records and fsyncs the file.
    pub fn sync(&mut self) -> Result<()> {
        self.write_buffered()?;
        if self.unsynced {
            self.writer.sync()?;
            self.unsynced = false;
        }
        Ok(())
    }

    /// Forgets deletes persisted more than `retention_ms` before `now_ms`, and rewrites the file
    /// (under a new `number`) once it has grown well beyond its live records.
    pub fn prune(
        &mut self,
        now_ms: u64,
        retention_ms: u64,
        number: impl FnOnce() -> u64,
    ) -> Result<()> {
        while let Some(&(t, id)) = self.persisted.front() {
            if t.saturating_add(retention_ms) > now_ms {
                break;
            }
            self.persisted.pop_front();
            self.records.remove(&id);
        }
        if self.writer.len() <= (4 * self.base_len).max(1 << 20) {
            return Ok(());
        }
        self.sync()?;
        let old = self.number;
        self.number = number();
        self.writer = RecordWriter::create(&self.dir.join(file_name(self.number)))?;
        self.write_snapshot()?;
        let _ = std::fs::remove_file(self.dir.join(file_name(old)));
        Ok(())
    }

    /// Writes every record as it stands now into ledger file `number` of `dir` (a checkpoint's
    /// copy: issue times and persistence times carry over).
    pub fn write_copy(&self, dir: &Path, number: u64) -> Result<()> {
        let mut writer = RecordWriter::create(&dir.join(file_name(number)))?;
        let mut all = Vec::with_capacity(self.records.len() + 1);
        for d in self.records.values() {
            all.push(encode(&Entry::Issued(d.clone())));
        }
        writer.append_all(&all)?;
        writer.sync()
    }

    /// Every recorded delete, oldest first.
    pub fn list(&self) -> Vec<Deletion> {
        self.records.values().cloned().collect()
    }

    /// One delete.
    pub fn get(&self, id: u64) -> Option<&Deletion> {
        self.records.get(&id)
    }

    /// When delete `id` was issued, if recorded.
    pub fn issued_ms(&self, id: u64) -> Option<u64> {
        self.records.get(&id).map(|d| d.issued_at_ms)
    }

    /// Point and range deletes not yet persisted, oldest first.
    pub fn pending(&self) -> impl Iterator<Item = &Deletion> + '_ {
        self.pending.iter().filter_map(|id| self.records.get(id))
    }
}

fn encode(e: &Entry) -> Vec<u8> {
    postcard::to_allocvec(e).unwrap_or_default()
}

fn apply(records: &mut BTreeMap<u64, Deletion>, e: Entry) {
    match e {
        Entry::Issued(d) => {
            records.entry(d.id).or_insert(d);
        }
        Entry::PersistedBelow { below, at_ms } => {
            for d in records.range_mut(..below).map(|(_, d)| d) {
                if d.kind.follows_watermark() {
                    d.persisted_at_ms.get_or_insert(at_ms);
                }
            }
        }
        Entry::Persisted { id, at_ms } => {
            if let Some(d) = records.get_mut(&id) {
                d.persisted_at_ms.get_or_insert(at_ms);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn point(id: u64, at: u64) -> Deletion {
        Deletion {
            id,
            kind: DeletionKind::Point { key: format!("k{id}").into_bytes() },
            issued_at_ms: at,
            deadline_ms: at + 100,
            applied_at_ms: at,
            persisted_at_ms: None,
        }
    }

    #[test]
    fn survives_reopen_and_rewrites_compactly() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Ledger::open(dir.path(), &[], 1).unwrap();
        for id in 1..=10 {
            l.issue(point(id, id * 10));
        }
        l.issue(point(3, 999)); // a replayed delete is not issued twice
        assert_eq!(l.persist_below(6, 500), 5);
        assert_eq!(l.persist_below(6, 600), 0);
        l.sync().unwrap();
        drop(l);
        let l = Ledger::open(dir.path(), &[1], 2).unwrap();
        assert!(!dir.path().join(file_name(2)).exists(), "appends to the existing file");
        let all = l.list();
        assert_eq!(all.len(), 10);
        assert_eq!(all[2].issued_at_ms, 30);
        assert!(all[..5].iter().all(|d| d.persisted_at_ms == Some(500)));
        assert!(all[5..].iter().all(|d| d.persisted_at_ms.is_none()));
        assert_eq!(l.pending().map(|d| d.id).collect::<Vec<_>>(), vec![6, 7, 8, 9, 10]);
    }

    #[test]
    fn unsynced_records_are_lost_only_if_never_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Ledger::open(dir.path(), &[], 1).unwrap();
        l.issue(point(1, 10));
        l.write_buffered().unwrap();
        l.issue(point(2, 20)); // buffered only: a crash loses it (the WAL replays it)
        drop(l);
        let l = Ledger::open(dir.path(), &[1], 2).unwrap();
        assert_eq!(l.list().iter().map(|d| d.id).collect::<Vec<_>>(), vec![1]);
    }

    #[test]
    fn prune_forgets_old_persisted_records() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Ledger::open(dir.path(), &[], 1).unwrap();
        l.issue(point(1, 10));
        l.issue(point(2, 20));
        l.persist_below(2, 50);
        l.prune(1_000, 100, || 2).unwrap();
        assert_eq!(l.list().iter().map(|d| d.id).collect::<Vec<_>>(), vec![2]);
    }
}
