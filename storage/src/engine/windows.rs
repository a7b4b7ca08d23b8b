//! Time-window deletes in the engine (see [`crate::kiwi`]): registering them, hiding covered
//! entries from reads, executing them as page drops, punching freed regions, and marking them
//! persisted.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use bytes::Bytes;

use super::{Engine, Inner};
use crate::gloran::piece::SeqList;
use crate::kiwi::drop::drop_window;
use crate::kiwi::punch::{gaps, punch};
use crate::kiwi::TimeWindow;
use crate::ledger::DeletionKind;
use crate::sst::Table;
use crate::version::{Opened, VersionEdit};
use crate::{Result, WriteBatch};

/// Regions of an SST to free once no reader holds an older layout of it.
#[derive(Debug)]
pub(super) struct PunchJob {
    path: PathBuf,
    regions: Vec<(u64, u64)>,
    waits: Vec<Weak<Table>>,
    /// Windows whose persistence waits for this job.
    windows: Vec<u64>,
}

/// Execution state of the active windows.
#[derive(Debug, Default)]
pub(super) struct WindowState {
    pub(super) executed: BTreeSet<u64>,
    punches: Vec<PunchJob>,
    /// Per file id, the superseded table objects (older layouts) still open.
    superseded: HashMap<u64, Vec<Weak<Table>>>,
}

impl Engine {
    /// Deletes every entry whose delete key (time) is in `[t_lo, t_hi)` and whose sort key is in
    /// `[lo, hi)` (empty: unbounded), written below `seq`. Reads stop returning them at once; the
    /// background executes the delete by dropping pages (see [`crate::kiwi`]).
    pub fn delete_time_range(
        &self,
        t_lo: u64,
        t_hi: u64,
        lo: impl Into<Bytes>,
        hi: impl Into<Bytes>,
        seq: u64,
    ) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete_time_range(t_lo, t_hi, lo, hi);
        self.write(&b, seq)
    }
}

impl Inner {
    /// The active windows (a reader keeps the list it started with).
    pub(crate) fn windows(&self) -> Arc<Vec<TimeWindow>> {
        self.deletes.windows.read().clone()
    }

    /// Makes a window active (before its sequence number becomes visible).
    pub(super) fn add_window(&self, w: TimeWindow) {
        let mut ws = self.deletes.windows.write();
        if ws.iter().any(|x| x.seq == w.seq) {
            return;
        }
        let mut list = (**ws).clone();
        list.push(w);
        *ws = Arc::new(list);
    }

    /// True if an active window hides version `seq` of `key` from a reader at `t`.
    pub(crate) fn window_hides(
        windows: &[TimeWindow],
        dkey: u64,
        key: &[u8],
        seq: u64,
        t: u64,
    ) -> bool {
        windows.iter().any(|w| w.hides(key, dkey, seq, t))
    }

    /// Adds the windows at or below `upto` covering `key` (and newer than `min_seq`) to `seqs`,
    /// keeping it newest first (flush and compaction drop what they cover).
    pub(super) fn add_window_seqs(
        &self,
        windows: &[TimeWindow],
        key: &[u8],
        min_seq: u64,
        upto: u64,
        seqs: &mut SeqList,
    ) {
        if windows.is_empty() {
            return;
        }
        let dkey = self.opts.delete_key.extract(key);
        let before = seqs.len();
        for w in windows {
            if w.seq <= upto && w.seq > min_seq && w.covers(key, dkey) {
                seqs.push(w.seq);
            }
        }
        if seqs.len() > before {
            seqs.sort_unstable_by(|a, b| b.cmp(a));
            seqs.dedup();
        }
    }

    /// Executes every active window not yet executed (and not held back by an older snapshot)
    /// on the live SSTs. Returns `false` if there was nothing to do. Holds the compaction lock.
    pub(super) fn execute_windows(&self) -> Result<bool> {
        if self.windows().is_empty() {
            return Ok(false); // the common case: no locks taken
        }
        // Serialised with flushes and compactions: one that started before a window was added
        // (and so does not drop what it covers) commits its outputs before the window executes.
        let _serial = self.background.compaction.lock();
        let _flush = self.background.flush.lock();
        let todo: Vec<TimeWindow> = {
            let state = self.deletes.window_state.lock();
            // The visible sequence number first: a snapshot taken after this read is at or above
            // it, so it is newer than every window considered here. Read the other way round, a
            // snapshot taken in between could be missed and its rows dropped under it.
            let visible = self.visible_seq.load(Ordering::Acquire);
            let oldest_snapshot = self.snapshots.seqs().first().copied();
            self.windows()
                .iter()
                .filter(|w| w.seq <= visible && !state.executed.contains(&w.seq))
                .filter(|w| oldest_snapshot.is_none_or(|s| s >= w.seq))
                .cloned()
                .collect()
        };
        if todo.is_empty() {
            return Ok(false);
        }
        for w in &todo {
            // A full disk postpones the window (its appended pages are cut off on the retry).
            self.execute_window(w).map_err(|e| self.abort_step(e))?;
        }
        Ok(true)
    }

    fn execute_window(&self, w: &TimeWindow) -> Result<()> {
        let started = std::time::Instant::now();
        let (mut bytes, mut removed) = (0u64, 0u64);
        let sv = self.current();
        let mut edit = VersionEdit::default();
        let mut opened = Opened::default();
        let mut replaced: Vec<Arc<Table>> = Vec::new();
        let mut gone: Vec<Arc<Table>> = Vec::new();
        for (level, files) in sv.version.levels.iter().enumerate() {
            for t in files {
                let Some(out) = drop_window(t, w, &self.opts)? else { continue };
                let c = &self.counters;
                c.window_pages_dropped.fetch_add(out.pages_dropped, Ordering::Relaxed);
                c.window_pages_read.fetch_add(out.pages_read, Ordering::Relaxed);
                c.window_pages_rewritten.fetch_add(out.pages_rewritten, Ordering::Relaxed);
                c.window_bytes_read.fetch_add(out.bytes_read, Ordering::Relaxed);
                c.window_bytes_written.fetch_add(out.bytes_written, Ordering::Relaxed);
                bytes += out.bytes_written;
                removed += out.entries_removed;
                edit.deleted.push((level as u32, t.id()));
                match out.meta {
                    Some(meta) => {
                        let table = Arc::new(t.reopen(&self.dir, meta.clone())?);
                        opened.tables.insert(meta.id, table);
                        edit.added.push((level as u32, meta));
                        replaced.push(t.clone());
                    }
                    None => gone.push(t.clone()),
                }
            }
        }
        let touched = edit.deleted.len();
        if !edit.deleted.is_empty() {
            self.commit(edit, &opened, None)?;
        }
        let record = super::CompactionRecord {
            kind: "time_window",
            reason: "window",
            input_files: touched,
            output_files: opened.tables.len(),
            bytes_written: bytes,
            entries_in: removed,
            ..Default::default()
        };
        self.record_history(started, record);
        let mut state = self.deletes.window_state.lock();
        for old in &replaced {
            let Some(new) = opened.tables.get(&old.id()) else { continue };
            let entry = state.superseded.entry(old.id()).or_default();
            entry.retain(|x| x.strong_count() > 0);
            entry.push(Arc::downgrade(old));
            let waits = entry.clone();
            let regions = gaps(&new.referenced_regions(), new.meta().size);
            state.punches.push(PunchJob {
                path: new.path().to_path_buf(),
                regions,
                waits,
                windows: vec![w.seq],
            });
        }
        state.executed.insert(w.seq);
        drop(state);
        for t in &gone {
            self.retire(t);
        }
        Ok(())
    }

    /// Runs the punch jobs no reader blocks any more, then marks executed windows persisted
    /// once nothing can hold their covered entries: no punch pending for them, no memtable with
    /// older entries, and no obsolete file still open.
    pub(super) fn advance_windows(&self) -> Result<()> {
        let ready: Vec<PunchJob> = {
            let mut state = self.deletes.window_state.lock();
            if state.executed.is_empty() && state.punches.is_empty() {
                return Ok(());
            }
            let (ready, waiting) = std::mem::take(&mut state.punches)
                .into_iter()
                .partition(|j| j.waits.iter().all(|w| w.strong_count() == 0));
            state.punches = waiting;
            ready
        };
        for job in &ready {
            punch(&job.path, &job.regions)?;
        }
        let sv = self.current();
        let retired_open = self.files.retired.lock().iter().any(|w| w.strong_count() > 0);
        let mut state = self.deletes.window_state.lock();
        let blocked: BTreeSet<u64> =
            state.punches.iter().flat_map(|j| j.windows.iter().copied()).collect();
        let done: Vec<u64> = state
            .executed
            .iter()
            .copied()
            .filter(|s| !blocked.contains(s) && !retired_open)
            .filter(|&s| self.log_clearance().is_clear(s))
            .filter(|&s| std::iter::once(&sv.mem).chain(&sv.imms).all(|m| m.min_entry_seq() > s))
            .collect();
        if done.is_empty() {
            return Ok(());
        }
        let now = self.opts.clock.now_ms();
        {
            let mut ledger = self.deletes.ledger.lock();
            for &s in &done {
                ledger.persist_one(s, now);
            }
            ledger.sync()?;
        }
        for s in &done {
            state.executed.remove(s);
        }
        drop(state);
        let mut ws = self.deletes.windows.write();
        let list: Vec<TimeWindow> = ws.iter().filter(|w| !done.contains(&w.seq)).cloned().collect();
        *ws = Arc::new(list);
        Ok(())
    }
}

/// The active windows recorded as pending in a ledger (re-executed after a restart).
pub(super) fn pending_windows(ledger: &crate::ledger::Ledger) -> Vec<TimeWindow> {
    ledger
        .pending_windows()
        .filter_map(|d| match &d.kind {
            DeletionKind::TimeWindow { t_lo, t_hi, lo, hi } => Some(TimeWindow {
                seq: d.id,
                t_lo: *t_lo,
                t_hi: *t_hi,
                lo: lo.clone(),
                hi: hi.clone(),
            }),
            _ => None,
        })
        .collect()
}
