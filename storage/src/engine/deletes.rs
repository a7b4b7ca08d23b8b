//! Delete deadlines in the engine: the deletion ledger, FADE's compaction picks, the persistence
//! watermark, and checking that a delete's covered data is gone.
//!
//! **Persistence watermark.** `W` is the smallest of: the oldest delete of every memtable (its
//! WAL segment lives as long as it does), the stamp of every live SST and of every obsolete SST
//! still open (pinned by a reader), and every pending range delete that some such file or
//! memtable may still hold covered data of. Every point and range delete below `W` is physically
//! gone; the ledger marks it persisted when a flush or compaction moves `W` past it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use super::{Engine, Inner};
use crate::batch::{BatchOp, EntryKind, WriteBatch};
use crate::compaction::policy::CompactionTask;
use crate::fade::policy::{pick_expired, FadeInput, PendingRange};
use crate::fade::{Deadlines, DeleteStamp};
use crate::iter::EntryCursor;
use crate::ledger::{Deletion, DeletionKind};
use crate::memtable::MemCursor;
use crate::sst::{FileMeta, Table, TableCursor};
use crate::{Error, RangeDeleteMode, Result};

/// An entry a delete covers that is still stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemainingEntry {
    /// Where: an SST file name, or `memtable`.
    pub location: String,
    /// The key.
    pub key: Vec<u8>,
    /// Its sequence number (below the delete's).
    pub seq: u64,
}

/// What [`Engine::verify_deletion`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletionCheck {
    /// The delete checked.
    pub id: u64,
    /// SSTs and memtables scanned.
    pub sources_scanned: usize,
    /// Entries read inside the delete's key range.
    pub entries_scanned: u64,
    /// Values the delete covers that are still stored (empty once it is persisted).
    pub remaining: Vec<RemainingEntry>,
}

impl Engine {
    /// Every delete the ledger holds, oldest first.
    pub fn deletions(&self) -> Vec<Deletion> {
        self.inner.ledger.lock().list()
    }

    /// One delete of the ledger.
    pub fn deletion(&self, id: u64) -> Option<Deletion> {
        self.inner.ledger.lock().get(id).cloned()
    }

    /// The persistence watermark: every point and range delete with a lower id (sequence number)
    /// is physically gone from the engine's files, memtables and WAL.
    pub fn persistence_watermark(&self) -> u64 {
        self.inner.persistence_watermark()
    }

    /// Scans every memtable and live SST for values delete `id` covers (entries in its key range
    /// with a lower sequence number), reading every version, shadowed or not.
    pub fn verify_deletion(&self, id: u64) -> Result<DeletionCheck> {
        let d = self
            .deletion(id)
            .ok_or_else(|| Error::InvalidArgument(format!("no deletion with id {id}")))?;
        let (lo, hi, window) = match &d.kind {
            DeletionKind::Point { key } => (key.clone(), None, None),
            DeletionKind::Range { lo, hi } => (lo.clone(), Some(hi.clone()), None),
            DeletionKind::TimeWindow { t_lo, t_hi, lo, hi } => {
                (lo.clone(), Some(hi.clone()), Some(*t_lo..*t_hi))
            }
        };
        let dkey = &self.inner.opts.delete_key;
        let inside = |k: &[u8]| match &hi {
            None => k == lo.as_slice(),
            Some(h) => h.is_empty() || k < h.as_slice(),
        };
        let covered = |k: &[u8]| window.as_ref().is_none_or(|w| w.contains(&dkey.extract(k)));
        let sv = self.inner.current();
        let mut sources: Vec<(String, Box<dyn EntryCursor>)> = Vec::new();
        for m in std::iter::once(&sv.mem).chain(&sv.imms) {
            sources.push(("memtable".into(), Box::new(MemCursor::new(m.clone()))));
        }
        for t in sv.version.all_tables() {
            let name = crate::sst::file_name(t.id());
            sources.push((name, Box::new(TableCursor::new(t.clone(), false))));
        }
        let mut check = DeletionCheck {
            id,
            sources_scanned: sources.len(),
            entries_scanned: 0,
            remaining: vec![],
        };
        for (location, mut c) in sources {
            c.seek(&lo)?;
            while c.valid() && inside(c.key()) {
                check.entries_scanned += 1;
                if c.seq() < id && c.kind() == EntryKind::Put && covered(c.key()) {
                    let (key, seq) = (c.key().to_vec(), c.seq());
                    check.remaining.push(RemainingEntry { location: location.clone(), key, seq });
                }
                c.next()?;
            }
        }
        Ok(check)
    }
}

impl Inner {
    pub(super) fn deadlines(&self) -> Option<Deadlines> {
        self.opts.delete_deadline.map(Deadlines::new)
    }

    /// The stamp of delete `seq` (its issue time from the ledger; now if unknown).
    pub(crate) fn delete_stamp(&self, seq: u64) -> DeleteStamp {
        let ms = self.ledger.lock().issued_ms(seq);
        DeleteStamp { seq, ms: ms.unwrap_or_else(|| self.opts.clock.now_ms()) }
    }

    /// Records the deletes of `batch` (first sequence number `seq`) in the ledger.
    pub(super) fn issue_deletes(&self, batch: &WriteBatch, seq: u64, issued_ms: u64) {
        if !batch.has_deletes() {
            return;
        }
        let now = self.opts.clock.now_ms();
        let deadline = self.deadlines().map_or(u64::MAX, |d| d.final_due(issued_ms));
        let mut ledger = self.ledger.lock();
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
            ledger.issue(Deletion {
                id: seq + i as u64,
                kind,
                issued_at_ms: issued_ms,
                deadline_ms: deadline,
                applied_at_ms: now,
                persisted_at_ms: None,
            });
        }
    }

    /// Pending range deletes (GLORAN mode; in tombstone mode their fragments carry stamps).
    ///
    /// Only those issued at or before `issued_by` (ms): deadlines follow issue order, so the
    /// scan stops at the first later one and costs nothing while no deadline is near.
    fn pending_ranges(&self, issued_by: u64) -> Vec<PendingRange> {
        if self.opts.range_delete_mode != RangeDeleteMode::Gloran {
            return Vec::new();
        }
        self.ledger
            .lock()
            .pending()
            .take_while(|d| d.issued_at_ms <= issued_by)
            .filter_map(|d| match &d.kind {
                DeletionKind::Range { lo, hi } => Some(PendingRange {
                    seq: d.id,
                    lo: lo.clone(),
                    hi: hi.clone(),
                    issued_ms: d.issued_at_ms,
                }),
                _ => None,
            })
            .collect()
    }

    /// The compaction a delete deadline forces now, if any.
    pub(super) fn pick_deadline(&self, metas: &[Vec<&FileMeta>]) -> Option<CompactionTask> {
        let deadlines = self.deadlines()?;
        let now_ms = self.opts.clock.now_ms();
        // Only range deletes whose deadline has come can make a file due.
        let pending = self.pending_ranges(now_ms.saturating_sub(deadlines.total_ms));
        let input = FadeInput {
            now_ms,
            deadlines,
            size_ratio: self.opts.size_ratio,
            pending_ranges: &pending,
            oldest_snapshot: self.snapshots.seqs().first().copied(),
        };
        pick_expired(metas, &input)
    }

    /// Remembers an obsolete table until its last reader lets go (it still holds data).
    pub(super) fn retire(&self, t: &Arc<Table>) {
        t.mark_obsolete();
        let mut retired = self.retired.lock();
        retired.retain(|w| w.strong_count() > 0);
        retired.push(Arc::downgrade(t));
    }

    /// See the module docs.
    pub(crate) fn persistence_watermark(&self) -> u64 {
        let sv = self.current();
        let mut w = self.visible_seq.load(Ordering::Acquire).saturating_add(1);
        let retired: Vec<Arc<Table>> =
            self.retired.lock().iter().filter_map(Weak::upgrade).collect();
        let files: Vec<&FileMeta> =
            sv.version.all_tables().chain(&retired).map(|t| t.meta()).collect();
        let mems: Vec<_> = std::iter::once(&sv.mem).chain(&sv.imms).collect();
        for m in &mems {
            if let Some(s) = m.oldest_delete() {
                w = w.min(s);
            }
        }
        for f in &files {
            if let Some(st) = f.props.oldest_delete {
                w = w.min(st.seq);
            }
        }
        if self.opts.range_delete_mode == RangeDeleteMode::Gloran {
            // The oldest pending range delete something may still hold data of (usually the
            // first one looked at).
            let ledger = self.ledger.lock();
            for d in ledger.pending() {
                if d.id >= w {
                    break;
                }
                let DeletionKind::Range { lo, hi } = &d.kind else { continue };
                let r = PendingRange { seq: d.id, lo: lo.clone(), hi: hi.clone(), issued_ms: 0 };
                let in_mem = mems.iter().any(|m| m.min_entry_seq() < r.seq);
                if in_mem || files.iter().any(|f| r.blocked_by(f)) {
                    w = r.seq;
                    break;
                }
            }
        }
        w
    }

    /// Marks deletes below the watermark persisted and writes the ledger; forgets old records.
    pub(super) fn advance_ledger(&self) -> Result<()> {
        let w = self.persistence_watermark();
        let now = self.opts.clock.now_ms();
        let retention = self.opts.ledger_retention.as_millis() as u64;
        let mut ledger = self.ledger.lock();
        let res = (|| {
            if ledger.persist_below(w, now) > 0 {
                ledger.sync()?;
            }
            ledger.prune(now, retention, || self.alloc_file_id())
        })();
        drop(ledger);
        res.and_then(|_| self.advance_windows()).map_err(|e| self.poison(e))
    }
}
