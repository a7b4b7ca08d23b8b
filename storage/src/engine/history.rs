//! A bounded history of recent flushes, compactions and time-window executions (what
//! `system.compactions` shows).

use std::collections::VecDeque;
use std::time::Instant;

use super::{Engine, Inner};

/// How many records are kept.
pub const HISTORY_LEN: usize = 1024;

/// One finished flush, compaction or time-window execution.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompactionRecord {
    /// When it finished (engine clock, ms since the Unix epoch).
    pub finished_at_ms: u64,
    /// `flush`, `compaction`, `trivial_move`, `level_rename` or `time_window`.
    pub kind: &'static str,
    /// Why: `level0`, `size`, `manual`, `deadline`, `memtable`, `window`.
    pub reason: &'static str,
    /// Input level.
    pub level: usize,
    /// Output level.
    pub output_level: usize,
    /// Files read (memtables for a flush).
    pub input_files: usize,
    /// Files written (or rewritten in place, for time windows).
    pub output_files: usize,
    /// Bytes written.
    pub bytes_written: u64,
    /// Entries read.
    pub entries_in: u64,
    /// Entries written.
    pub entries_out: u64,
    /// Wall time taken.
    pub duration_ms: u64,
}

impl Engine {
    /// Recent flushes, compactions and time-window executions, oldest first (up to
    /// 1,024).
    pub fn compaction_history(&self) -> Vec<CompactionRecord> {
        self.inner.background.history.lock().iter().cloned().collect()
    }
}

impl Inner {
    /// Appends a record (`started` is when the work began).
    pub(super) fn record_history(&self, started: Instant, mut r: CompactionRecord) {
        r.finished_at_ms = self.opts.clock.now_ms();
        r.duration_ms = started.elapsed().as_millis() as u64;
        let mut h = self.background.history.lock();
        if h.len() == HISTORY_LEN {
            h.pop_front();
        }
        h.push_back(r);
    }
}

/// An empty history.
pub(super) fn new_history() -> parking_lot::Mutex<VecDeque<CompactionRecord>> {
    parking_lot::Mutex::new(VecDeque::with_capacity(64))
}
