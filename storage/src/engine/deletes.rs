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

use parking_lot::{Mutex, RwLock};

use super::clearance::LogClearance;
use super::retention::Rule;
use super::windows::WindowState;
use super::{Engine, Inner};
use crate::batch::WriteBatch;
use crate::compaction::policy::CompactionTask;
use crate::fade::policy::{pick_expired, FadeInput, PendingRange};
use crate::fade::{Deadlines, DeleteStamp};
use crate::gloran::eve::Eve;
use crate::kiwi::TimeWindow;
use crate::ledger::Ledger;
use crate::ledger::{Deadline, Deletion, DeletionKind, RequestStatus};
use crate::sst::{FileMeta, Table};
use crate::Result;

/// What the engine keeps about deletes, each with its own lock.
#[derive(Debug)]
pub(super) struct Deletes {
    /// How range deletes are kept.
    pub(super) ranges: RangeDeletes,
    /// The deletion ledger.
    pub(super) ledger: Mutex<Ledger>,
    /// What the caller's log no longer holds (`Options::external_log`; everything without one).
    pub(super) log_clearance: RwLock<Arc<LogClearance>>,
    /// Active time-window deletes.
    pub(super) windows: RwLock<Arc<Vec<TimeWindow>>>,
    /// Their execution and punch jobs.
    pub(super) window_state: Mutex<WindowState>,
    /// Retention rules (a copy of the manifest's, for readers and writers).
    pub(super) rules: RwLock<Arc<Vec<Rule>>>,
}

impl Deletes {
    /// The delete state of an engine opened with `ledger`, `eve` and retention `rules`.
    pub(super) fn new(
        ledger: Ledger,
        ranges: RangeDeletes,
        rules: Vec<Rule>,
        external_log: bool,
    ) -> Deletes {
        Deletes {
            ranges,
            windows: RwLock::new(Arc::new(super::windows::pending_windows(&ledger))),
            window_state: Mutex::new(WindowState::default()),
            ledger: Mutex::new(ledger),
            // Without a log of its own the caller holds nothing the engine must wait for.
            log_clearance: RwLock::new(Arc::new(LogClearance::below(match external_log {
                true => 0,
                false => u64::MAX,
            }))),
            rules: RwLock::new(Arc::new(rules)),
        }
    }
}

/// How the engine keeps range deletes, chosen once at open from
/// [`crate::Options::range_delete_mode`] (which must be the mode the manifest records).
#[derive(Debug)]
pub(super) enum RangeDeletes {
    /// GLORAN: rectangles in each memtable's buffer and in the global index of the version,
    /// with the entry validity estimator over every live one.
    Gloran { eve: RwLock<Eve> },
    /// Fragmented tombstones in each memtable and in a block of every SST.
    Tombstones,
}

impl RangeDeletes {
    /// The estimator over the live range deletes (GLORAN).
    pub(super) fn eve(&self) -> Option<&RwLock<Eve>> {
        match self {
            RangeDeletes::Gloran { eve } => Some(eve),
            RangeDeletes::Tombstones => None,
        }
    }

    /// True in tombstone mode: each file carries the tombstones that apply to it.
    pub(super) fn in_files(&self) -> bool {
        matches!(self, RangeDeletes::Tombstones)
    }
}

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
        self.inner.deletes.ledger.lock().list()
    }

    /// One delete of the ledger.
    pub fn deletion(&self, id: u64) -> Option<Deletion> {
        self.inner.deletes.ledger.lock().get(id).cloned()
    }

    /// The persistence watermark: every point and range delete with a lower id (sequence number)
    /// is physically gone from the engine's files, memtables and WAL (the caller's log aside).
    pub fn persistence_watermark(&self) -> u64 {
        self.inner.persistence_watermark()
    }

    /// Every delete request the ledger holds, with where its deletes stand.
    pub fn delete_requests(&self) -> Vec<RequestStatus> {
        self.inner.deletes.ledger.lock().requests()
    }

    /// Scans every memtable, live SST and WAL segment for values delete `id` covers (entries
    /// in its key range with a lower sequence number), reading every version, shadowed or not.
    pub fn verify_deletion(&self, id: u64) -> Result<DeletionCheck> {
        let coverage = self.coverage(&[id])?;
        let scans = self.audit_listing(&coverage, usize::MAX)?;
        let mut check = DeletionCheck {
            id,
            sources_scanned: scans.len(),
            entries_scanned: scans.iter().map(|s| s.entries).sum(),
            remaining: vec![],
        };
        for s in scans {
            for f in s.examples {
                let location = if s.kind == "sst" { s.name.clone() } else { s.kind.clone() };
                check.remaining.push(RemainingEntry { location, key: f.key, seq: f.seq });
            }
        }
        Ok(check)
    }
}

/// The due base of a delete issued at `issued_ms` and due at `deadline_ms` (see
/// [`DeleteStamp`]).
pub(super) fn due_base(deadlines: Option<Deadlines>, issued_ms: u64, deadline_ms: Deadline) -> u64 {
    match (deadlines, deadline_ms) {
        (Some(d), Deadline::At(ms)) => ms.saturating_sub(d.total_ms),
        _ => issued_ms,
    }
}

/// The deadline of a batch's deletes issued at `issued_ms`: the engine's delete deadline after
/// issue, or the batch request's own if that is earlier.
pub(super) fn batch_deadline(
    deadlines: Option<Deadlines>,
    batch: &WriteBatch,
    issued_ms: u64,
) -> Deadline {
    let default = deadlines.map_or(Deadline::Never, |d| Deadline::At(d.final_due(issued_ms)));
    match batch.request().and_then(|r| r.deadline_ms) {
        Some(r) => Deadline::At(r).min(default),
        None => default,
    }
}

impl Inner {
    pub(super) fn deadlines(&self) -> Option<Deadlines> {
        self.opts.delete_deadline.map(Deadlines::new)
    }

    /// The stamp of delete `seq`: its due base (deadline minus `D_th`, which is its issue time
    /// under the default deadline; see [`DeleteStamp`]); now if unknown.
    pub(crate) fn delete_stamp(&self, seq: u64) -> DeleteStamp {
        let ms = self
            .deletes
            .ledger
            .lock()
            .get(seq)
            .map(|d| self.due_base(d.issued_at_ms, d.deadline_ms));
        DeleteStamp { seq, ms: ms.unwrap_or_else(|| self.opts.clock.now_ms()) }
    }

    /// The due base of a delete issued at `issued_ms` and due at `deadline_ms`.
    fn due_base(&self, issued_ms: u64, deadline_ms: Deadline) -> u64 {
        due_base(self.deadlines(), issued_ms, deadline_ms)
    }

    /// Records the deletes of `batch` (first sequence number `seq`) in the ledger, with the
    /// request they carry out. Returns their due base (see [`DeleteStamp`]), if it has any.
    pub(super) fn issue_deletes(
        &self,
        batch: &WriteBatch,
        seq: u64,
        issued_ms: u64,
    ) -> Option<u64> {
        let deadline = batch_deadline(self.deadlines(), batch, issued_ms);
        let now = self.opts.clock.now_ms();
        self.deletes
            .ledger
            .lock()
            .issue_batch(batch, seq, issued_ms, deadline, now)
            .then(|| self.due_base(issued_ms, deadline))
    }

    /// Pending range deletes (GLORAN mode; in tombstone mode their fragments carry stamps)
    /// whose deadline is at or before `deadline_by` (ms), earliest deadline first.
    fn pending_ranges(&self, deadline_by: u64) -> Vec<PendingRange> {
        if self.deletes.ranges.in_files() {
            return Vec::new();
        }
        self.deletes
            .ledger
            .lock()
            .pending_ranges_due_by(deadline_by)
            .filter_map(|d| match &d.kind {
                DeletionKind::Range { lo, hi } => Some(PendingRange {
                    seq: d.id,
                    lo: lo.clone(),
                    hi: hi.clone(),
                    issued_ms: self.due_base(d.issued_at_ms, d.deadline_ms),
                }),
                _ => None,
            })
            .collect()
    }

    /// The compaction a delete deadline forces now, if any.
    pub(super) fn pick_deadline(&self, metas: &[Vec<&FileMeta>]) -> Option<CompactionTask> {
        let deadlines = self.deadlines()?;
        let now_ms = self.opts.clock.now_ms();
        // Only range deletes within the reserve of their deadline can make a file due.
        let pending = self.pending_ranges(now_ms.saturating_add(deadlines.reserve_ms));
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
        let mut retired = self.files.retired.lock();
        retired.retain(|w| w.strong_count() > 0);
        retired.push(Arc::downgrade(t));
    }

    /// See the module docs.
    pub(crate) fn persistence_watermark(&self) -> u64 {
        let sv = self.current();
        let mut w = self.visible_seq.load(Ordering::Acquire).saturating_add(1);
        let retired: Vec<Arc<Table>> =
            self.files.retired.lock().iter().filter_map(Weak::upgrade).collect();
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
        if !self.deletes.ranges.in_files() {
            // The oldest pending range delete something may still hold data of (usually the
            // first one looked at).
            let ledger = self.deletes.ledger.lock();
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

    /// Marks deletes below the watermark (and the caller's log watermark) persisted and writes
    /// the ledger; forgets old records.
    pub(super) fn advance_ledger(&self) -> Result<()> {
        let clear = self.log_clearance();
        let w = self.persistence_watermark().min(clear.below);
        let early = self.cleared_expedited(w, Some(&clear)).map_err(|e| self.abort_step(e))?;
        let now = self.opts.clock.now_ms();
        let keep = self.opts.ledger_keep();
        let mut ledger = self.deletes.ledger.lock();
        let res = (|| {
            for &id in &early {
                ledger.persist_one(id, now);
            }
            if ledger.persist_below(w, now) > 0 || !early.is_empty() {
                ledger.sync()?;
            }
            ledger.prune(now, keep, || self.alloc_file_id())
        })();
        drop(ledger);
        // A full disk postpones this (the ledger's failed append was cut back off); a failed
        // fsync of the ledger is `Error::Poisoned` and poisons.
        res.and_then(|_| self.advance_windows()).map_err(|e| self.abort_step(e))
    }

    /// Expedited deletes at or above the watermark `w` (and clear of the caller's log, if
    /// `clear` is given) whose covered data is gone from the engine, checked one by one: no
    /// memtable or file may still hold a value a range delete covers (the test FADE's rewrites
    /// satisfy), and no older version of a point delete's key is stored anywhere.
    pub(super) fn cleared_expedited(
        &self,
        w: u64,
        clear: Option<&LogClearance>,
    ) -> Result<Vec<u64>> {
        let candidates: Vec<Deletion> = {
            let ledger = self.deletes.ledger.lock();
            ledger
                .expedited()
                .filter(|d| d.id >= w && clear.is_none_or(|c| c.is_clear(d.id)))
                .cloned()
                .collect()
        };
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        let sv = self.current();
        let retired: Vec<Arc<Table>> =
            self.files.retired.lock().iter().filter_map(Weak::upgrade).collect();
        let tables: Vec<&Arc<Table>> = sv.version.all_tables().chain(&retired).collect();
        let mems: Vec<_> = std::iter::once(&sv.mem).chain(&sv.imms).collect();
        let gloran = !self.deletes.ranges.in_files();
        let mut out = Vec::new();
        for d in candidates {
            let clear = match &d.kind {
                DeletionKind::Range { lo, hi } if gloran => {
                    let r =
                        PendingRange { seq: d.id, lo: lo.clone(), hi: hi.clone(), issued_ms: 0 };
                    let in_mem: Vec<usize> = mems
                        .iter()
                        .enumerate()
                        .filter(|(_, m)| m.min_entry_seq() < d.id)
                        .map(|(i, _)| i)
                        .collect();
                    let in_files: Vec<u64> = tables
                        .iter()
                        .filter(|t| r.blocked_by(t.meta()))
                        .map(|t| t.meta().id)
                        .collect();
                    if !in_mem.is_empty() || !in_files.is_empty() {
                        tracing::debug!(
                            dir = %self.dir.display(),
                            id = d.id,
                            deadline_ms = ?d.deadline_ms.ms(),
                            ?in_mem,
                            ?in_files,
                            oldest_snapshot = ?self.snapshots.seqs().first(),
                            "expedited range delete still held"
                        );
                    }
                    in_mem.is_empty() && in_files.is_empty()
                }
                DeletionKind::Point { key } => {
                    let older = |c: &mut dyn crate::iter::EntryCursor| -> Result<bool> {
                        c.seek(key)?;
                        while c.valid() && c.key() == key.as_slice() {
                            if c.seq() < d.id && c.kind() == crate::batch::EntryKind::Put {
                                return Ok(true);
                            }
                            c.next()?;
                        }
                        Ok(false)
                    };
                    let mut held = false;
                    for m in &mems {
                        held |= older(&mut crate::memtable::MemCursor::new((*m).clone()))?;
                    }
                    let mut in_files = Vec::new();
                    for t in tables.iter().filter(|t| t.meta().overlaps(Some(key), Some(key))) {
                        if older(&mut crate::sst::TableCursor::new((*t).clone(), false))? {
                            held = true;
                            in_files.push(t.meta().id);
                        }
                    }
                    if held {
                        tracing::debug!(
                            dir = %self.dir.display(),
                            id = d.id,
                            deadline_ms = ?d.deadline_ms.ms(),
                            ?in_files,
                            "expedited point delete still held"
                        );
                    }
                    !held
                }
                _ => false,
            };
            if clear {
                out.push(d.id);
            }
        }
        Ok(out)
    }
}
