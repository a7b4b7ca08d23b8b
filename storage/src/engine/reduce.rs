//! RangeReduce's Bounded-Merge, as query-driven compaction: a range scan that merges the
//! levels leaves a hint, and when no other compaction is due the background compacts the
//! level-`i` files the range touched into level `i + 1`, if both gates of the paper pass:
//! level `i` holds at least half a file of the range (size gate) and at least `ratio` times
//! what level `i + 1` holds of it (ratio gate); the deepest such pair wins.
//!
//! Differences from the paper (Kaushik et al.): whole level-`i` files move, not only their
//! in-range part (so no remainder fragments are written; the write-back is an ordinary
//! compaction, crash-safe through the manifest and safe with snapshots, range deletes, the
//! ledger and delete stamps like any other); the merge runs in the background after the scan,
//! not in the scan; level 0 is never a source.

use std::collections::VecDeque;

use parking_lot::Mutex;

use super::Inner;
use crate::compaction::policy::{self, CompactionReason, CompactionTask};
use crate::version::Version;

/// Scans remembered for a write-back at most.
const MAX_HINTS: usize = 16;

/// Ranges recent scans merged, newest last.
#[derive(Debug, Default)]
pub(super) struct Hints(Mutex<VecDeque<(Vec<u8>, Vec<u8>)>>);

impl Hints {
    fn push(&self, lo: &[u8], hi: &[u8]) {
        let mut q = self.0.lock();
        if q.iter().any(|(a, b)| a.as_slice() == lo && b.as_slice() == hi) {
            return;
        }
        if q.len() == MAX_HINTS {
            q.pop_front();
        }
        q.push_back((lo.to_vec(), hi.to_vec()));
    }

    fn pop(&self) -> Option<(Vec<u8>, Vec<u8>)> {
        self.0.lock().pop_back()
    }
}

/// The deepest level `i >= 1` whose range bytes `est[i]` pass both gates against `est[i + 1]`.
pub(crate) fn choose_level(est: &[u64], half_file: u64, ratio: f64) -> Option<usize> {
    (1..est.len().saturating_sub(1)).rev().find(|&i| {
        let (x, y) = (est[i], est[i + 1]);
        x >= half_file && y >= half_file && x as f64 >= ratio * y as f64
    })
}

impl Inner {
    /// Records that a scan over `[lo, hi]` merged every level (RangeReduce on).
    pub(super) fn hint_range(&self, lo: &[u8], hi: &[u8]) {
        if self.opts.range_reduce.is_some() {
            self.tuning.reduce_hints.push(lo, hi);
            self.notify_bg(true);
        }
    }

    /// The query-driven compaction of the newest remembered range that passes the gates
    /// (ranges that do not are forgotten).
    pub(super) fn reduce_task(&self, v: &Version) -> Option<CompactionTask> {
        let ratio = self.opts.range_reduce?;
        while let Some((lo, hi)) = self.tuning.reduce_hints.pop() {
            let (l, h) = (Some(lo.as_slice()), Some(hi.as_slice()));
            let est: Vec<u64> = v
                .levels
                .iter()
                .map(|files| {
                    let touched = files.iter().filter(|t| t.meta().overlaps(l, h));
                    touched.map(|t| t.range_bytes(&lo, &hi)).sum()
                })
                .collect();
            let half = self.opts.target_file_size / 2;
            let Some(level) = choose_level(&est, half, ratio) else { continue };
            let metas = v.metas();
            let inputs: Vec<_> =
                metas[level].iter().copied().filter(|f| f.overlaps(l, h)).collect();
            return Some(policy::task_for(&metas, level, &inputs, CompactionReason::RangeReduce));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates() {
        // Level 2 has half a file and at least a tenth of level 3: 2 into 3 (the deepest pair).
        assert_eq!(choose_level(&[0, 100, 50, 400, 0], 50, 0.1), Some(2));
        // Level 1 too small for the size gate; level 2 below the ratio of level 3.
        assert_eq!(choose_level(&[0, 10, 50, 600, 0], 50, 0.1), None);
        // Nothing below: nothing to merge into.
        assert_eq!(choose_level(&[0, 100, 0, 0], 50, 0.1), None);
        assert_eq!(choose_level(&[], 50, 0.1), None);
    }
}
