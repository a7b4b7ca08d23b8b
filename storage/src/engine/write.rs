//! The write path: WAL append, memtable insert, memtable sealing and write stalls.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::{Engine, Inner, SuperVersion, WriterState};
use crate::batch::{BatchOp, EntryKind, WriteBatch};
use crate::memtable::Memtable;
use crate::wal::{Wal, WalPos};
use crate::SyncMode;
use crate::{Error, Result};

/// A write appended to the WAL and the memtable, not yet known durable (see [`Engine::stage`]).
#[must_use = "a staged write is durable only once `durable` returns"]
pub struct Staged {
    inner: Arc<Inner>,
    sync_to: Option<WalPos>,
}

impl std::fmt::Debug for Staged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Staged").field("sync_to", &self.sync_to).finish()
    }
}

impl Staged {
    /// Waits until the write is durable as [`crate::SyncMode`] promises (under `Always`, until
    /// an fsync covers it; it becomes visible to reads then).
    pub fn durable(self) -> Result<()> {
        match self.sync_to {
            None => Ok(()),
            Some(pos) => self.inner.sync_wal(Some(pos)),
        }
    }
}

impl Engine {
    /// Applies `batch` atomically. Operation `i` gets sequence number `seq + i`; `seq` must be above
    /// every sequence number written before. Returns once the write is durable as
    /// [`crate::SyncMode`] promises.
    pub fn write(&self, batch: &WriteBatch, seq: u64) -> Result<()> {
        self.stage(batch, seq)?.durable()
    }

    /// The first half of [`Engine::write`]: orders and applies the write, without waiting for
    /// it to be durable. A caller that numbers writes under its own lock stages under it and
    /// waits for [`Staged::durable`] after releasing it, so concurrent writers share fsyncs.
    pub fn stage(&self, batch: &WriteBatch, seq: u64) -> Result<Staged> {
        let sync_to = self.inner.write(batch, seq)?;
        Ok(Staged { inner: self.inner.clone(), sync_to })
    }

    /// Writes one key.
    pub fn put(&self, key: impl Into<Bytes>, value: impl Into<Bytes>, seq: u64) -> Result<()> {
        let mut b = WriteBatch::new();
        b.put(key, value);
        self.write(&b, seq)
    }

    /// Deletes one key.
    pub fn delete(&self, key: impl Into<Bytes>, seq: u64) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete(key);
        self.write(&b, seq)
    }

    /// Deletes every key in `[lo, hi)` written with a sequence number below `seq`; an empty `hi`
    /// means the end of the key space. Writes after it (higher sequence numbers) stay visible,
    /// and snapshots below `seq` still see the old data.
    pub fn delete_range(&self, lo: impl Into<Bytes>, hi: impl Into<Bytes>, seq: u64) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete_range(lo, hi);
        self.write(&b, seq)
    }
}

impl Inner {
    /// Applies a write; returns where the WAL must be fsynced to before it is acknowledged.
    fn write(&self, batch: &WriteBatch, seq: u64) -> Result<Option<WalPos>> {
        self.check_writable()?;
        batch.validate()?;
        self.check_retention(batch)?;
        if batch.is_empty() {
            return Ok(None);
        }
        let last = seq
            .checked_add(batch.len() as u64 - 1)
            .ok_or_else(|| Error::InvalidArgument("sequence number overflows".into()))?;
        let mut w = self.writer.lock();
        if seq <= w.last_seq {
            return Err(Error::InvalidArgument(format!(
                "sequence number {seq} is not above the last written {}",
                w.last_seq
            )));
        }
        self.make_room(&mut w)?;
        let issued_ms = batch.issued_at().unwrap_or_else(|| self.opts.clock.now_ms());
        // Under `SyncMode::Always` the write becomes visible once an fsync covers it.
        let mut sync_to = None;
        if let Some(wal) = &mut w.wal {
            if let Err(e) = wal.append(batch, seq, issued_ms) {
                // Cut back off (a full disk): the write fails, the engine goes on.
                return Err(if wal.is_broken() { self.poison(e) } else { e });
            }
            self.counters.wal_writes.fetch_add(1, Ordering::Relaxed);
            if self.opts.sync == SyncMode::Always {
                sync_to = Some(wal.pos());
            }
        }
        let due = self.issue_deletes(batch, seq, issued_ms);
        let mem = self.sv.read().mem.clone();
        if let Some(ms) = due {
            mem.note_delete_due(ms);
        }
        let mut puts = mem.batch();
        for (i, op) in batch.ops().iter().enumerate() {
            let s = seq + i as u64;
            match op {
                BatchOp::Put { key, value } => puts.insert(key, s, EntryKind::Put, value.clone()),
                BatchOp::Delete { key } => puts.insert(key, s, EntryKind::Delete, Bytes::new()),
                BatchOp::DeleteRange { lo, hi } => {
                    // Published to the buffer and EVE before the sequence number becomes visible.
                    mem.insert_range(lo.clone(), hi.clone(), s);
                    if let Some(eve) = self.deletes.ranges.eve() {
                        eve.write().insert(lo, hi, s);
                    }
                }
                BatchOp::DeleteTimeRange { t_lo, t_hi, lo, hi } => {
                    mem.record_delete(s);
                    self.tuning.layout.counters.window_delete();
                    self.add_window(crate::kiwi::TimeWindow {
                        seq: s,
                        t_lo: *t_lo,
                        t_hi: *t_hi,
                        lo: lo.to_vec(),
                        hi: hi.to_vec(),
                    });
                    self.notify_bg(true);
                }
            }
        }
        drop(puts); // publishes the memtable's totals
        w.last_seq = last;
        if sync_to.is_none() {
            self.visible_seq.fetch_max(last, Ordering::Release);
        }
        Ok(sync_to)
    }

    /// Group commit: returns once an fsync covers the WAL up to `upto` (`None`: everything
    /// appended so far), and makes every write that fsync covers visible. Writers arriving
    /// while one fsync runs wait for it, then the first of them fsyncs for all the others.
    pub(super) fn sync_wal(&self, upto: Option<WalPos>) -> Result<()> {
        let mut synced = self.wal_synced.lock();
        if upto.is_some_and(|p| *synced >= p) {
            return Ok(());
        }
        // After a failed fsync the state of the file is unknown: never report it synced.
        self.check_not_poisoned()?;
        let (handle, end, seq) = {
            let w = self.writer.lock();
            let Some(wal) = &w.wal else { return Ok(()) };
            (wal.sync_handle(), wal.pos(), w.last_seq)
        };
        if upto.is_some_and(|p| p.number < end.number) || end <= *synced {
            // Sealing fsynced that WAL and made its writes visible; or nothing is new.
            return Ok(());
        }
        if let Err(e) = handle.sync() {
            return Err(self.poison(e));
        }
        self.counters.wal_syncs.fetch_add(1, Ordering::Relaxed);
        *synced = end;
        self.visible_seq.fetch_max(seq, Ordering::Release);
        Ok(())
    }

    /// Seals a full memtable and stalls while flushes or level-0 compactions are behind.
    fn make_room(&self, w: &mut WriterState) -> Result<()> {
        let mut stalled = false;
        loop {
            self.check_writable()?;
            let sv = self.current();
            self.report_memtables(&sv);
            let bytes = sv.mem.approximate_bytes();
            // Full, or holding a share of a spent write budget (see `WriteBudget`).
            let early = self.opts.write_budget.as_ref().filter(|b| b.spent());
            let full = bytes >= self.opts.write_buffer_size
                || early.is_some_and(|b| bytes >= b.early_seal_bytes());
            let too_many_imms = sv.imms.len() >= self.opts.max_immutable_memtables;
            let l0_full = sv.version.levels[0].len() >= self.opts.level0_stop_writes_trigger;
            if full && !too_many_imms && !l0_full {
                self.seal(w)?;
                return Ok(());
            }
            if !l0_full && !full {
                return Ok(());
            }
            if !stalled {
                stalled = true;
                self.counters.write_stalls.fetch_add(1, Ordering::Relaxed);
            }
            // No one else will make room, or the last flush or compaction failed on a full
            // disk: do it here, so the write fails at once if the disk is still full, and goes
            // on as soon as space is back. Under an external log (Raft) a refused write would
            // stop the group, so it waits for the background threads instead (the leader
            // refuses new writes below the reserve).
            let disk_full = self.disk_full().is_some() && !self.opts.external_log;
            if !self.opts.background_threads || disk_full {
                let progressed =
                    if too_many_imms { self.flush_oldest()? } else { self.compact_once()? };
                if progressed {
                    continue;
                }
                if !self.opts.background_threads {
                    return Ok(()); // nothing can run: let the memtable grow rather than hang
                }
            }
            self.notify_bg(true);
            let mut bg = self.background.state.lock();
            if bg.shutdown {
                return Err(Error::Closed);
            }
            self.background.cv.wait_for(&mut bg, Duration::from_millis(50));
        }
    }

    /// Replaces the active memtable with an empty one (and a new WAL file, after fsyncing the
    /// old one, so only the newest WAL ever has an unsynced tail).
    pub(super) fn seal(&self, w: &mut WriterState) -> Result<()> {
        let wal_number = if self.opts.wal {
            if let Some(old) = &w.wal {
                if let Err(e) = old.sync() {
                    return Err(self.poison(e));
                }
            }
            self.visible_seq.fetch_max(w.last_seq, Ordering::Release);
            let n = self.alloc_file_id();
            let wal = Wal::create(&self.dir, n, self.opts.fail_points.clone())?;
            w.wal = Some(wal);
            n
        } else {
            0
        };
        {
            let mut sv = self.sv.write();
            let mut imms = Vec::with_capacity(sv.imms.len() + 1);
            imms.push(sv.mem.clone());
            imms.extend(sv.imms.iter().cloned());
            *sv = Arc::new(SuperVersion {
                mem: Arc::new(
                    Memtable::new(wal_number, self.opts.write_buffer_size)
                        .summarized(self.opts.page_summary.as_ref(), &self.opts.delete_key),
                ),
                imms,
                version: sv.version.clone(),
            });
        }
        self.notify_bg(false);
        Ok(())
    }

    /// Seals the active memtable if it holds anything.
    pub(super) fn seal_active(&self) -> Result<()> {
        let mut w = self.writer.lock();
        if self.current().mem.is_empty() {
            return Ok(());
        }
        self.seal(&mut w)
    }

    /// Seals the active memtable if it is older than the configured maximum age, or holds a
    /// delete due to leave it (see [`crate::fade::Deadlines::memtable_due`]). Never blocks on
    /// the write lock (a writer holding it will seal by size soon enough).
    pub(super) fn seal_if_old(&self) -> Result<()> {
        let too_old = |mem: &Memtable| {
            let by_age = self.opts.memtable_max_age.is_some_and(|a| mem.created().elapsed() >= a);
            let by_delete = match (self.deadlines(), mem.delete_due()) {
                (Some(d), Some(ms)) => d.memtable_due(ms) <= self.opts.clock.now_ms(),
                _ => false,
            };
            !mem.is_empty() && (by_age || by_delete)
        };
        if !too_old(&self.current().mem) {
            return Ok(());
        }
        if let Some(mut w) = self.writer.try_lock() {
            if too_old(&self.current().mem) {
                self.seal(&mut w)?;
            }
        }
        Ok(())
    }
}
