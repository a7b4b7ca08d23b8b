//! Engine statistics.

use std::sync::atomic::Ordering;

use super::Inner;

/// Files and bytes at one level.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LevelStats {
    /// Number of files.
    pub files: usize,
    /// Bytes on disk.
    pub bytes: u64,
    /// Entries (including tombstones).
    pub entries: u64,
    /// Point tombstones.
    pub tombstones: u64,
}

/// A point-in-time view of the engine's shape and counters.
#[derive(Debug, Clone, Default)]
pub struct EngineStats {
    /// Per level, level 0 first.
    pub levels: Vec<LevelStats>,
    /// Bytes in the active memtable.
    pub memtable_bytes: usize,
    /// Sealed memtables waiting for flush.
    pub immutable_memtables: usize,
    /// Range-index levels: (DR-trees, pieces) per index level, level 0 first.
    pub range_index_levels: Vec<(usize, u64)>,
    /// Bytes of range-index files on disk.
    pub range_index_bytes: u64,
    /// Bytes of EVE filters in memory.
    pub eve_bytes: u64,
    /// EVE estimators in the chain.
    pub eve_estimators: usize,
    /// Bytes of SST filters, fence pointers and page indexes held in memory (grows with the data;
    /// about `bloom_bits_per_key / 8` bytes per key plus two keys per page).
    pub table_memory_bytes: u64,
    /// Bytes held by the page cache.
    pub page_cache_bytes: u64,
    /// Configured page cache capacity.
    pub page_cache_capacity: u64,
    /// Flushes completed.
    pub flushes: u64,
    /// Merging compactions completed.
    pub compactions: u64,
    /// Files moved down a level without rewriting.
    pub trivial_moves: u64,
    /// Bytes written by flushes.
    pub bytes_flushed: u64,
    /// Bytes written by compactions.
    pub bytes_compacted: u64,
    /// Times a writer had to wait for flush or compaction.
    pub write_stalls: u64,
    /// Write batches appended to the WAL.
    pub wal_writes: u64,
    /// WAL fsyncs by writers and the interval thread (group commit shares one among writers).
    pub wal_syncs: u64,
    /// Range-delete checks of a found version (GLORAN mode: lookups and scans).
    pub range_checks: u64,
    /// Of those, the ones EVE answered "live" without consulting the index.
    pub range_checks_eve_skipped: u64,
    /// Time-window deletes: pages dropped without being read.
    pub window_pages_dropped: u64,
    /// Time-window deletes: pages read because they straddle a window.
    pub window_pages_read: u64,
    /// Time-window deletes: pages written again without their covered entries.
    pub window_pages_rewritten: u64,
    /// Time-window deletes: bytes of pages read.
    pub window_bytes_read: u64,
    /// Time-window deletes: bytes appended to files (pages, filter and index blocks, footers).
    pub window_bytes_written: u64,
    /// Range scans inside one head (series): files whose range filter was probed.
    pub range_filter_probes: u64,
    /// Pages summarized scans answered from their summaries (not read).
    pub summarized_pages: u64,
    /// Memtable runs summarized scans answered from the summaries kept as their rows arrived
    /// (not read).
    pub summarized_runs: u64,
    /// Of those, files the filter showed hold nothing in the range (not opened).
    pub range_filter_skips: u64,
    /// Range scans inside one head answered by the global range filter (one probe each).
    pub global_filter_probes: u64,
    /// Files those probes showed hold nothing in the range (not opened).
    pub global_filter_skips: u64,
    /// Cells in the current version's global range filter (0 without one).
    pub global_filter_cells: u64,
    /// Memory of the current version's global range filter, in bytes.
    pub global_filter_bytes: u64,
    /// Deletes the deletion ledger holds (pending and persisted).
    pub deletion_records: u64,
    /// Persisted deletes the ledger forgot before their retention ended, over the count it
    /// keeps (`ledger_max_persisted`), since the engine opened.
    pub deletion_records_dropped_early: u64,
    /// Highest applied sequence number.
    pub last_seq: u64,
    /// Highest sequence number persisted in SSTs.
    pub persisted_seq: u64,
}

impl Inner {
    pub(super) fn stats(&self) -> EngineStats {
        let sv = self.current();
        let c = &self.counters;
        let grf = &sv.version.grf;
        let (eve_bytes, eve_estimators) = self.deletes.ranges.eve().map_or((0, 0), |e| {
            let e = e.read();
            (e.memory_bytes() as u64, e.len())
        });
        let (deletion_records, deletion_records_dropped_early) = {
            let l = self.deletes.ledger.lock();
            (l.len() as u64, l.dropped_early())
        };
        EngineStats {
            levels: sv
                .version
                .levels
                .iter()
                .map(|files| LevelStats {
                    files: files.len(),
                    bytes: files.iter().map(|t| t.meta().size).sum(),
                    entries: files.iter().map(|t| t.meta().props.entries).sum(),
                    tombstones: files.iter().map(|t| t.meta().props.tombstones).sum(),
                })
                .collect(),
            range_index_levels: sv
                .version
                .rd_levels
                .iter()
                .map(|l| (l.len(), l.iter().map(|t| t.meta().props.pieces).sum()))
                .collect(),
            range_index_bytes: sv.version.all_trees().map(|t| t.meta().size).sum(),
            eve_bytes,
            eve_estimators,
            memtable_bytes: sv.mem.approximate_bytes(),
            table_memory_bytes: sv
                .version
                .all_tables()
                .map(|t| t.memory_bytes() as u64)
                .sum::<u64>()
                + sv.version.all_trees().map(|t| t.memory_bytes() as u64).sum::<u64>(),
            immutable_memtables: sv.imms.len(),
            page_cache_bytes: self.cache.used_bytes(),
            page_cache_capacity: self.cache.capacity_bytes(),
            flushes: c.flushes.load(Ordering::Relaxed),
            compactions: c.compactions.load(Ordering::Relaxed),
            trivial_moves: c.trivial_moves.load(Ordering::Relaxed),
            bytes_flushed: c.bytes_flushed.load(Ordering::Relaxed),
            bytes_compacted: c.bytes_compacted.load(Ordering::Relaxed),
            write_stalls: c.write_stalls.load(Ordering::Relaxed),
            wal_writes: c.wal_writes.load(Ordering::Relaxed),
            wal_syncs: c.wal_syncs.load(Ordering::Relaxed),
            range_checks: c.range_checks.load(Ordering::Relaxed),
            range_checks_eve_skipped: c.range_checks_eve_skipped.load(Ordering::Relaxed),
            window_pages_dropped: c.window_pages_dropped.load(Ordering::Relaxed),
            window_pages_read: c.window_pages_read.load(Ordering::Relaxed),
            window_pages_rewritten: c.window_pages_rewritten.load(Ordering::Relaxed),
            window_bytes_read: c.window_bytes_read.load(Ordering::Relaxed),
            window_bytes_written: c.window_bytes_written.load(Ordering::Relaxed),
            range_filter_probes: c.range_filter_probes.load(Ordering::Relaxed),
            summarized_pages: c.summarized_pages.load(Ordering::Relaxed),
            summarized_runs: c.summarized_runs.load(Ordering::Relaxed),
            range_filter_skips: c.range_filter_skips.load(Ordering::Relaxed),
            global_filter_probes: c.global_filter_probes.load(Ordering::Relaxed),
            global_filter_skips: c.global_filter_skips.load(Ordering::Relaxed),
            global_filter_cells: grf.as_ref().map_or(0, |g| g.len() as u64),
            global_filter_bytes: grf.as_ref().map_or(0, |g| g.memory_bytes() as u64),
            deletion_records,
            deletion_records_dropped_early,
            last_seq: self.visible_seq.load(Ordering::Relaxed),
            persisted_seq: self.meta.lock().persisted_seq,
        }
    }
}
