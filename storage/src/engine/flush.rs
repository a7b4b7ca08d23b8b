//! Flushing sealed memtables to level 0.

use std::sync::atomic::Ordering;

use super::Inner;
use crate::compaction::executor::{write_tables, CoveringFn, OutputSpec};
use crate::compaction::retention::Retention;
use crate::failpoint::points;
use crate::iter::EntryCursor;
use crate::memtable::MemCursor;
use crate::version::{Opened, VersionEdit};
use crate::Result;

impl Inner {
    /// Flushes the oldest sealed memtable. Returns `false` if there was none.
    pub(super) fn flush_oldest(&self) -> Result<bool> {
        let _serial = self.background.flush.lock();
        let started = std::time::Instant::now();
        let sv = self.current();
        let Some(mem) = sv.imms.last().cloned() else { return Ok(false) };
        // The oldest memtable left after this flush; its WAL is the oldest one still needed.
        let next_log = match sv.imms.len() {
            n if n >= 2 => sv.imms[n - 2].wal_number,
            _ => sv.mem.wal_number,
        };
        let mut cursor = MemCursor::new(mem.clone());
        cursor.seek(&[])?;
        let next_id = || self.alloc_file_id();
        // Tombstone mode: the memtable's own tombstones apply to its entries and go into the SST.
        let deletes = self.delete_view(|| mem.ranges.pieces());
        let covering_fn = |key: &[u8], min_seq: u64| deletes.covering(self, key, min_seq);
        let covering: &CoveringFn<'_> = &covering_fn;
        let spec = OutputSpec {
            dir: &self.dir,
            opts: &self.opts,
            cache: &self.cache,
            tile_pages: self.tile_pages_for(0),
            range_filter: self.range_filter_spec(),
            target_file_size: u64::MAX,
            retention: Retention::new(self.snapshots.seqs(), false),
            ranges: Some(covering),
            rd_applied: deletes.rd_applied(),
            tombstones: deletes.tombstones(0),
            stamp: &|seq| self.delete_stamp(seq),
            inherited: Vec::new(),
            expired: Some(&|key: &[u8]| deletes.expired(self, key)),
            bottommost: false,
            next_id: &next_id,
            fail: None,
        };
        let (tables, stats) = write_tables(&mut cursor, &spec).map_err(|e| self.abort_step(e))?;
        let discard = |e: crate::Error| {
            for t in &tables {
                let _ = std::fs::remove_file(t.path());
            }
            self.abort_step(e)
        };
        let tree = self.flush_ranges(&mem).map_err(discard)?;
        // A crash here leaves an SST the manifest never names: recovery deletes it.
        self.opts.fail_points.check(points::FLUSH_BEFORE_COMMIT).map_err(|e| self.poison(e))?;
        // The memtable's deletes are recorded durably before its WAL goes.
        if let Err(e) = self.deletes.ledger.lock().sync() {
            if let Some(t) = &tree {
                let _ = std::fs::remove_file(t.path());
            }
            return Err(discard(e));
        }
        let edit = VersionEdit {
            added: tables.iter().map(|t| (0, t.meta().clone())).collect(),
            rd_added: tree.iter().map(|t| (0, t.meta().clone())).collect(),
            persisted_seq: Some(mem.max_seq()),
            log_number: self.opts.wal.then_some(next_log),
            ..Default::default()
        };
        let mut opened = Opened::tables(tables.iter().cloned());
        opened.trees.extend(tree.iter().map(|t| (t.id(), t.clone())));
        if let Err(e) = self.commit(edit, &opened, Some(&mem)) {
            if !self.is_poisoned() {
                // Not committed: the outputs are nobody's.
                for p in tables.iter().map(|t| t.path()).chain(tree.iter().map(|t| t.path())) {
                    let _ = std::fs::remove_file(p);
                }
            }
            return Err(e);
        }
        self.counters.flushes.fetch_add(1, Ordering::Relaxed);
        self.record_history(
            started,
            super::CompactionRecord {
                kind: "flush",
                reason: "memtable",
                input_files: 1,
                output_files: tables.len(),
                bytes_written: stats.bytes_out,
                entries_in: stats.entries_in,
                entries_out: stats.entries_out,
                ..Default::default()
            },
        );
        self.counters.bytes_flushed.fetch_add(stats.bytes_out, Ordering::Relaxed);
        if self.opts.wal {
            self.remove_wals_below(next_log);
        }
        self.advance_ledger()?;
        self.notify_bg(true);
        Ok(true)
    }

    /// Deletes WAL files numbered below `log_number` (their memtables are flushed).
    pub(super) fn remove_wals_below(&self, log_number: u64) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return };
        for e in entries.flatten() {
            if let Some(crate::fs::FileKind::Wal(n)) =
                e.file_name().to_str().and_then(crate::fs::parse_name)
            {
                if n < log_number {
                    if let Err(err) = std::fs::remove_file(e.path()) {
                        tracing::warn!(path = %e.path().display(), error = %err, "removing WAL");
                    }
                }
            }
        }
    }
}
