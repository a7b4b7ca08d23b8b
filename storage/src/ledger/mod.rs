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
//! rewrite, are removed). Persisted records are forgotten `ledger_retention` after persistence,
//! or earlier, oldest first, beyond `ledger_max_persisted` of them (every record is held in
//! memory: the count bounds what a client issuing deletes can make the ledger hold); once the
//! file has grown well past its live records it is rewritten compactly into a new one.

mod record;
mod request;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use record::{Deadline, Deletion, DeletionKind, DeletionStatus};
pub(crate) use request::DeleteRequestV1;
pub use request::{DeleteRequest, RequestRecord, RequestStatus};

use crate::batch::{BatchOp, WriteBatch};
use crate::error::IoContext;
use crate::log::{read_records, RecordWriter};
use crate::{Error, Result};

/// How long the ledger keeps persisted records ([`Ledger::prune`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keep {
    /// Milliseconds after persistence.
    pub retention_ms: u64,
    /// At most this many persisted records (the oldest go first).
    pub max_persisted: usize,
}

/// Name of ledger file `n`.
pub(crate) fn file_name(n: u64) -> String {
    format!("{n:08}.ledger")
}

/// A ledger record. Variants are only ever appended (postcard numbers them in order).
#[derive(Debug, Serialize, Deserialize)]
enum Entry {
    Issued(Deletion),
    PersistedBelow {
        below: u64,
        at_ms: u64,
    },
    Persisted {
        id: u64,
        at_ms: u64,
    },
    /// A request batch as first recorded, without who issued it (read, never written).
    RequestV1(request::RequestRecordV1),
    Request(RequestRecord),
}

/// The ledger of one engine.
#[derive(Debug)]
pub(crate) struct Ledger {
    dir: PathBuf,
    number: u64,
    writer: RecordWriter,
    records: BTreeMap<u64, Deletion>,
    /// Request batches by (request id, first sequence number).
    requests: BTreeMap<(u64, u64), RequestRecord>,
    /// Pending point and range deletes (persisted by the watermark).
    pending: BTreeSet<u64>,
    /// Pending range deletes by (deadline, id), for FADE's earliest-deadline-first picks.
    pending_ranges_by_due: BTreeSet<(Deadline, u64)>,
    /// Pending point and range deletes of requests with a deadline of their own: they may be
    /// due before older deletes, so they are checked one by one rather than by the watermark.
    expedited: BTreeSet<u64>,
    /// Pending time-window deletes (persisted one by one).
    pending_windows: BTreeSet<u64>,
    /// Persisted deletes in persistence order, for pruning without a scan.
    persisted: std::collections::VecDeque<(u64, u64)>,
    buffered: Vec<Vec<u8>>,
    /// Bytes written at the last rewrite (the live records then).
    base_len: u64,
    /// Persisted records forgotten before their retention ended (over the count kept).
    dropped_early: u64,
    /// Bytes written since the last fsync.
    unsynced: bool,
    /// An fsync failed (see [`Ledger::sync`]).
    sync_failed: bool,
}

impl Ledger {
    /// Opens the ledger of `dir`: appends to the newest of `existing` (ledger file numbers; a
    /// torn tail is cut off, older files removed), or creates file `number` if there is none.
    pub fn open(dir: &Path, existing: &[u64], number: u64) -> Result<Ledger> {
        let mut records = BTreeMap::new();
        let mut requests = BTreeMap::new();
        let newest = existing.iter().max().copied();
        let mut valid_len = 0;
        if let Some(n) = newest {
            let path = dir.join(file_name(n));
            // Records are fsynced in groups: an unsynced group may be torn anywhere.
            let (raw, len) = read_records(&path, crate::log::OnBad::EndsLog)?;
            valid_len = len;
            for r in raw {
                let entry: Entry = crate::decode_exact(&r.payload).map_err(|e| {
                    Error::corruption(&path, r.offset, format!("ledger record {e}"))
                })?;
                apply(&mut records, &mut requests, entry);
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
        let pending_ranges_by_due = pending
            .iter()
            .filter_map(|id| records.get(id))
            .filter(|d: &&Deletion| matches!(d.kind, DeletionKind::Range { .. }))
            .map(|d| (d.deadline_ms, d.id))
            .collect();
        let expedited = requests
            .values()
            .filter(|r: &&RequestRecord| r.request.deadline_ms.is_some())
            .flat_map(|r| pending.range(r.first_seq..r.end_seq).copied())
            .collect();
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
            requests,
            pending,
            pending_ranges_by_due,
            expedited,
            pending_windows,
            persisted: persisted.into(),
            buffered: Vec::new(),
            base_len: valid_len,
            dropped_early: 0,
            unsynced: false,
            sync_failed: false,
        };
        if newest.is_none() {
            ledger.write_snapshot()?;
        }
        for n in existing.iter().filter(|&&n| Some(n) != newest) {
            let _ = std::fs::remove_file(dir.join(file_name(*n)));
        }
        Ok(ledger)
    }

    /// Every record as it stands now, encoded.
    fn encoded_state(&self) -> Vec<Vec<u8>> {
        let issued = self.records.values().map(|d| encode(&Entry::Issued(d.clone())));
        let requests = self.requests.values().map(|r| encode(&Entry::Request(r.clone())));
        issued.chain(requests).collect()
    }

    fn write_snapshot(&mut self) -> Result<()> {
        let all = self.encoded_state();
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
                if matches!(d.kind, DeletionKind::Range { .. }) {
                    self.pending_ranges_by_due.insert((d.deadline_ms, d.id));
                }
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
            self.expedited.remove(id);
            if let Some(d) = self.records.get_mut(id) {
                self.pending_ranges_by_due.remove(&(d.deadline_ms, *id));
                d.persisted_at_ms = Some(at_ms);
                self.persisted.push_back((at_ms, *id));
            }
        }
        if !done.is_empty() {
            self.buffered.push(encode(&Entry::PersistedBelow { below, at_ms }));
        }
        done.len()
    }

    /// Marks the pending delete `id` persisted at `at_ms` (a time window whose page drops are
    /// done, or an expedited delete checked on its own).
    pub fn persist_one(&mut self, id: u64, at_ms: u64) {
        let was_pending = self.pending.remove(&id);
        if self.pending_windows.remove(&id) || was_pending {
            self.expedited.remove(&id);
            if let Some(d) = self.records.get_mut(&id) {
                self.pending_ranges_by_due.remove(&(d.deadline_ms, id));
                d.persisted_at_ms = Some(at_ms);
                self.persisted.push_back((at_ms, id));
            }
            self.buffered.push(encode(&Entry::Persisted { id, at_ms }));
        }
    }

    /// Records the deletes of `batch`, written at sequence numbers from `seq`, and the request
    /// they carry out. Returns true if it has deletes.
    pub fn issue_batch(
        &mut self,
        batch: &WriteBatch,
        seq: u64,
        issued_ms: u64,
        deadline_ms: Deadline,
        now_ms: u64,
    ) -> bool {
        if !batch.has_deletes() {
            return false;
        }
        for (i, op) in batch.ops().iter().enumerate() {
            let kind = match op {
                BatchOp::Put { .. } => continue,
                BatchOp::Delete { key } => DeletionKind::Point { key: key.to_vec() },
                BatchOp::DeleteRange { lo, hi } => {
                    DeletionKind::Range { lo: lo.to_vec(), hi: hi.to_vec() }
                }
                BatchOp::DeleteTimeRange { t_lo, t_hi, lo, hi } => DeletionKind::TimeWindow {
                    t_lo: *t_lo,
                    t_hi: *t_hi,
                    lo: lo.to_vec(),
                    hi: hi.to_vec(),
                },
            };
            self.issue(Deletion {
                id: seq + i as u64,
                kind,
                issued_at_ms: issued_ms,
                deadline_ms,
                applied_at_ms: now_ms,
                persisted_at_ms: None,
            });
        }
        if let Some(r) = batch.request() {
            if r.deadline_ms.is_some() {
                let ids = self.pending.range(seq..seq + batch.len() as u64).copied();
                self.expedited.extend(ids.collect::<Vec<_>>());
            }
            self.record_request(RequestRecord {
                request: r.clone(),
                first_seq: seq,
                end_seq: seq + batch.len() as u64,
                issued_at_ms: issued_ms,
                applied_at_ms: now_ms,
                deadline_ms,
            });
        }
        true
    }

    /// Records one batch of a delete request (ignored if already recorded, as on a replay).
    pub fn record_request(&mut self, r: RequestRecord) {
        let key = (r.request.id, r.first_seq);
        if self.requests.contains_key(&key) {
            return;
        }
        self.buffered.push(encode(&Entry::Request(r.clone())));
        self.requests.insert(key, r);
    }

    /// Every request the ledger still holds a batch of, by id, with its batches combined.
    pub fn requests(&self) -> Vec<RequestStatus> {
        let mut out: Vec<RequestStatus> = Vec::new();
        for ((id, _), r) in &self.requests {
            let ids: Vec<u64> =
                self.records.range(r.first_seq..r.end_seq).map(|(k, _)| *k).collect();
            let dels: Vec<&Deletion> = ids.iter().filter_map(|k| self.records.get(k)).collect();
            let pending = dels.iter().filter(|d| !d.is_persisted()).count() as u64;
            let persisted = dels.iter().filter_map(|d| d.persisted_at_ms).max();
            let persisted =
                if pending > 0 { None } else { Some(persisted.unwrap_or(r.applied_at_ms)) };
            match out.last_mut() {
                Some(s) if s.request.id == *id => {
                    // An uncounted batch leaves the request uncounted.
                    s.request.rows = s.request.rows.zip(r.request.rows).map(|(a, b)| a + b);
                    s.issued_at_ms = s.issued_at_ms.min(r.issued_at_ms);
                    s.applied_at_ms = s.applied_at_ms.max(r.applied_at_ms);
                    s.deadline_ms = s.deadline_ms.min(r.deadline_ms);
                    s.deletes += dels.len() as u64;
                    s.pending += pending;
                    s.persisted_at_ms = match (s.persisted_at_ms, persisted) {
                        (Some(a), Some(b)) if s.pending == 0 => Some(a.max(b)),
                        _ => None,
                    };
                    s.delete_ids.extend(ids);
                }
                _ => out.push(RequestStatus {
                    request: r.request.clone(),
                    issued_at_ms: r.issued_at_ms,
                    applied_at_ms: r.applied_at_ms,
                    deadline_ms: r.deadline_ms,
                    deletes: dels.len() as u64,
                    pending,
                    persisted_at_ms: persisted,
                    delete_ids: ids,
                }),
            }
        }
        out
    }

    /// Pending range deletes whose deadline is at or before `due_by`, earliest deadline first.
    pub fn pending_ranges_due_by(&self, due_by: u64) -> impl Iterator<Item = &Deletion> + '_ {
        self.pending_ranges_by_due
            .range(..=(Deadline::At(due_by), u64::MAX))
            .filter_map(|(_, id)| self.records.get(id))
    }

    /// Pending expedited deletes (see [`Ledger::persist_one`]), oldest first.
    pub fn expedited(&self) -> impl Iterator<Item = &Deletion> + '_ {
        self.expedited.iter().filter_map(|id| self.records.get(id))
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
        // Kept until written: a failed write (a full disk) is retried with the next sync.
        self.writer.append_all(&self.buffered)?;
        self.buffered.clear();
        self.unsynced = true;
        Ok(())
    }

    /// Writes buffered records and fsyncs the file. A failed fsync is final (whether the
    /// records are durable is unknown, and a second fsync could wrongly report them so): this
    /// and every later sync fail with [`Error::Poisoned`].
    pub fn sync(&mut self) -> Result<()> {
        if self.sync_failed {
            return Err(Error::Poisoned("an earlier fsync of the deletion ledger failed".into()));
        }
        self.write_buffered()?;
        if self.unsynced {
            if let Err(e) = self.writer.sync() {
                self.sync_failed = true;
                return Err(Error::Poisoned(format!("fsync of the deletion ledger failed: {e}")));
            }
            self.unsynced = false;
        }
        Ok(())
    }

    /// Forgets deletes persisted more than `retention_ms` before `now_ms`, and rewrites the file
    /// (under a new `number`) once it has grown well beyond its live records.
    pub fn prune(&mut self, now_ms: u64, keep: Keep, number: impl FnOnce() -> u64) -> Result<()> {
        let (mut pruned, mut early) = (false, false);
        while let Some(&(t, id)) = self.persisted.front() {
            let expired = t.saturating_add(keep.retention_ms) <= now_ms;
            if !expired && self.persisted.len() <= keep.max_persisted {
                break;
            }
            self.persisted.pop_front();
            self.records.remove(&id);
            if !expired {
                self.dropped_early += 1;
                early = true;
            }
            pruned = true;
        }
        if pruned {
            // A request goes with the last of its deletes (and, while the count is over, at
            // once: the time condition keeps a request recorded here without a delete of its
            // own for its retention).
            let records = &self.records;
            self.requests.retain(|_, r| {
                records.range(r.first_seq..r.end_seq).next().is_some()
                    || (!early && r.applied_at_ms.saturating_add(keep.retention_ms) > now_ms)
            });
        }
        if self.writer.len() <= (4 * self.base_len).max(1 << 20) {
            return Ok(());
        }
        self.sync()?;
        // The new file gets its name only once it holds everything (the newest file wins on
        // open): written as a temporary file, fsynced, renamed, and the directory fsynced.
        let (old, new) = (self.number, number());
        let tmp = self.dir.join(format!("{}.tmp", file_name(new)));
        let path = self.dir.join(file_name(new));
        let written = (|| {
            let mut w = RecordWriter::create(&tmp)?;
            w.append_all(&self.encoded_state())?;
            w.sync()?;
            let len = w.len();
            std::fs::rename(&tmp, &path).at(&path)?;
            Ok(len)
        })();
        let len = match written {
            Ok(len) => len,
            Err(e) => {
                // Nothing changed: the old file goes on.
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
        };
        // From here the new file is the ledger (it wins on open if its name survives).
        self.writer = RecordWriter::open_append(&path, len)?;
        self.number = new;
        self.base_len = len;
        if let Err(e) = crate::fs::sync_dir(&self.dir) {
            self.sync_failed = true;
            return Err(Error::Poisoned(format!("fsync of the ledger's directory failed: {e}")));
        }
        let _ = std::fs::remove_file(self.dir.join(file_name(old)));
        Ok(())
    }

    /// The ids of the deletes recorded as persisted.
    pub fn persisted_ids(&self) -> std::collections::HashSet<u64> {
        self.records.values().filter(|d| d.is_persisted()).map(|d| d.id).collect()
    }

    /// Writes every record into ledger file `number` of `dir` (a checkpoint's copy: issue times
    /// and persistence times carry over), for a copy of the engine's files taken after `persisted` was
    /// read ([`Ledger::persisted_ids`]) that holds every write up to sequence number `upto`:
    /// a delete persisted since is written as not persisted, since the files copied may
    /// predate the compaction that persisted it; a delete (or request batch) after `upto` is
    /// left out, since the copy does not hold it (a record of it would later be taken as
    /// persisted while the data it covers is still in the copy).
    pub fn write_copy_as_of(
        &self,
        dir: &Path,
        number: u64,
        persisted: &std::collections::HashSet<u64>,
        upto: u64,
    ) -> Result<()> {
        let issued = self.records.values().filter(|d| d.id <= upto).map(|d| {
            if d.is_persisted() && !persisted.contains(&d.id) {
                encode(&Entry::Issued(Deletion { persisted_at_ms: None, ..d.clone() }))
            } else {
                encode(&Entry::Issued(d.clone()))
            }
        });
        let requests = self
            .requests
            .values()
            .filter(|r| r.first_seq <= upto)
            .map(|r| encode(&Entry::Request(r.clone())));
        let state: Vec<Vec<u8>> = issued.chain(requests).collect();
        let mut writer = RecordWriter::create(&dir.join(file_name(number)))?;
        writer.append_all(&state)?;
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

    /// Records held (pending and persisted deletes).
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Persisted records forgotten before their retention ended, over the count kept, since
    /// the ledger was opened.
    pub fn dropped_early(&self) -> u64 {
        self.dropped_early
    }

    /// Point and range deletes not yet persisted, oldest first.
    pub fn pending(&self) -> impl Iterator<Item = &Deletion> + '_ {
        self.pending.iter().filter_map(|id| self.records.get(id))
    }
}

fn encode(e: &Entry) -> Vec<u8> {
    postcard::to_allocvec(e).unwrap_or_default()
}

fn apply(
    records: &mut BTreeMap<u64, Deletion>,
    requests: &mut BTreeMap<(u64, u64), RequestRecord>,
    e: Entry,
) {
    match e {
        Entry::RequestV1(r) => {
            let r: RequestRecord = r.into();
            requests.entry((r.request.id, r.first_seq)).or_insert(r);
        }
        Entry::Request(r) => {
            requests.entry((r.request.id, r.first_seq)).or_insert(r);
        }
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
            deadline_ms: Deadline::At(at + 100),
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
    fn a_copy_as_of_earlier_keeps_deletes_persisted_since_pending() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Ledger::open(dir.path(), &[], 1).unwrap();
        for id in 1..=3 {
            l.issue(point(id, id * 10));
        }
        l.persist_one(1, 100);
        let before = l.persisted_ids();
        assert_eq!(before, [1].into_iter().collect());
        // A compaction persists 2 after the copy's files were read.
        l.persist_one(2, 200);
        let copy = tempfile::tempdir().unwrap();
        l.write_copy_as_of(copy.path(), 5, &before, 3).unwrap();
        let c = Ledger::open(copy.path(), &[5], 6).unwrap();
        let persisted: Vec<u64> =
            c.list().iter().filter(|d| d.is_persisted()).map(|d| d.id).collect();
        assert_eq!(persisted, vec![1], "2 is pending in the copy");
        assert_eq!(c.pending().map(|d| d.id).collect::<Vec<_>>(), vec![2, 3]);
        // A copy holding writes up to 2 only: delete 3 is not in it, and has no record there
        // (one would later be taken as persisted while the copy still holds what it covers).
        let short = tempfile::tempdir().unwrap();
        l.write_copy_as_of(short.path(), 5, &before, 2).unwrap();
        let c = Ledger::open(short.path(), &[5], 6).unwrap();
        assert_eq!(c.list().iter().map(|d| d.id).collect::<Vec<_>>(), vec![1, 2]);
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
        l.prune(1_000, Keep { retention_ms: 100, max_persisted: 10 }, || 2).unwrap();
        assert_eq!(l.list().iter().map(|d| d.id).collect::<Vec<_>>(), vec![2]);
        assert_eq!(l.dropped_early(), 0);
    }

    #[test]
    fn prune_keeps_at_most_the_newest_persisted_records() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Ledger::open(dir.path(), &[], 1).unwrap();
        let keep = Keep { retention_ms: 1_000_000, max_persisted: 3 };
        for id in 1..=10 {
            l.issue(point(id, id * 10));
            l.record_request(RequestRecord {
                request: DeleteRequest {
                    id: 100 + id,
                    kind: "delete".into(),
                    text: String::new(),
                    rows: Some(1),
                    deadline_ms: None,
                    issued_by: String::new(),
                },
                first_seq: id,
                end_seq: id + 1,
                issued_at_ms: id * 10,
                applied_at_ms: id * 10,
                deadline_ms: Deadline::Never,
            });
            // Persisted one by one, in order; the last stays pending.
            if id < 10 {
                l.persist_below(id + 1, id * 10 + 5);
            }
            l.prune(id * 10 + 6, keep, || 1_000 + id).unwrap();
            assert!(l.persisted.len() <= 3, "after {id}: {:?}", l.persisted);
        }
        // The pending delete and the three newest persisted ones remain, with their requests.
        assert_eq!(l.list().iter().map(|d| d.id).collect::<Vec<_>>(), vec![7, 8, 9, 10]);
        let requests: Vec<u64> = l.requests().iter().map(|r| r.request.id).collect();
        assert_eq!(requests, vec![107, 108, 109, 110]);
        assert_eq!((l.len(), l.dropped_early()), (4, 6));
    }
}
