//! How the delete deadline `D_th` is split between the memtable, the levels, and the last
//! compaction's own run time.

use std::time::Duration;

/// The deadline split of an engine: `memtable_ms + levels_ms + reserve_ms = total_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// `D_th` in milliseconds.
    pub total_ms: u64,
    /// Longest a delete may wait in a memtable (a tenth of `D_th`).
    pub memtable_ms: u64,
    /// The levels' share: by its end a delete has reached the deepest level, or the files
    /// holding data of a range delete are due for their rewrite.
    pub levels_ms: u64,
    /// Kept back at the end (a tenth of `D_th`): the time the compaction that persists a delete
    /// takes to run, and the caller's log purge after it. A compaction due at the very deadline
    /// would end after it.
    pub reserve_ms: u64,
}

impl Deadlines {
    /// The split of `d_th`.
    pub fn new(d_th: Duration) -> Self {
        let total_ms = d_th.as_millis().min(u64::MAX as u128) as u64;
        let memtable_ms = total_ms / 10;
        let reserve_ms = total_ms / 10;
        Deadlines {
            total_ms,
            memtable_ms,
            levels_ms: total_ms - memtable_ms - reserve_ms,
            reserve_ms,
        }
    }

    /// When a delete issued at `issued_ms` must be out of the memtable.
    pub fn memtable_due(&self, issued_ms: u64) -> u64 {
        issued_ms.saturating_add(self.memtable_ms)
    }

    /// When a delete issued at `issued_ms` must have left `level` (or, at or below level
    /// `bottom - 1`, been merged into the deepest level and so persisted), in a tree whose deepest
    /// non-empty level is `bottom` and size ratio is `t`. The last merge is due the reserve
    /// before the final deadline.
    pub fn level_due(&self, issued_ms: u64, level: usize, bottom: usize, t: u32) -> u64 {
        let f = leave_fraction(level, bottom, t);
        let budget = (self.levels_ms as f64 * f).round() as u64;
        issued_ms.saturating_add(self.memtable_ms).saturating_add(budget)
    }

    /// When files still holding data of a range delete issued at `issued_ms` are compacted: the
    /// reserve before its deadline, so the rewrite finishes in time.
    pub fn range_due(&self, issued_ms: u64) -> u64 {
        issued_ms.saturating_add(self.memtable_ms).saturating_add(self.levels_ms)
    }

    /// When a delete issued at `issued_ms` must be persisted.
    pub fn final_due(&self, issued_ms: u64) -> u64 {
        issued_ms.saturating_add(self.total_ms)
    }
}

/// Cumulative share of the level budget by which a delete must have left `level`:
/// `(T^(level+1) - 1) / (T^bottom - 1)`, and 1 for `level + 1 >= bottom`. The per-level shares
/// (differences of consecutive values) grow by `T` per level, the split note 004 §2.1 derives as
/// optimal for uniformly picked files.
pub fn leave_fraction(level: usize, bottom: usize, t: u32) -> f64 {
    if level + 1 >= bottom {
        return 1.0;
    }
    let t = f64::from(t.max(2));
    (t.powi(level as i32 + 1) - 1.0) / (t.powi(bottom as i32) - 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_sum_to_the_budget_and_grow_by_t() {
        for t in [2u32, 4, 10] {
            for bottom in 1..7usize {
                let cum: Vec<f64> = (0..bottom).map(|l| leave_fraction(l, bottom, t)).collect();
                assert!((cum[bottom - 1] - 1.0).abs() < 1e-12, "last share completes the budget");
                let shares: Vec<f64> =
                    (0..bottom).map(|l| cum[l] - if l == 0 { 0.0 } else { cum[l - 1] }).collect();
                let sum: f64 = shares.iter().sum();
                assert!((sum - 1.0).abs() < 1e-12);
                for w in shares.windows(2) {
                    assert!((w[1] / w[0] - f64::from(t)).abs() < 1e-9, "{shares:?}");
                }
            }
        }
        // One level, or none below: the whole budget, no division by zero.
        assert_eq!(leave_fraction(0, 0, 10), 1.0);
        assert_eq!(leave_fraction(0, 1, 10), 1.0);
        assert_eq!(leave_fraction(5, 2, 10), 1.0);
    }

    #[test]
    fn deadlines_split_memtable_levels_and_reserve() {
        let d = Deadlines::new(Duration::from_secs(1000));
        assert_eq!((d.memtable_ms, d.levels_ms, d.reserve_ms), (100_000, 800_000, 100_000));
        assert_eq!(d.memtable_due(5), 100_005);
        assert_eq!(d.final_due(5), 1_000_005);
        // Deepest level 3, T = 10: L0 must be left after 9/999 of the level budget.
        assert_eq!(d.level_due(0, 0, 3, 10), 100_000 + (800_000.0 * 9.0 / 999.0f64).round() as u64);
        assert!(d.level_due(0, 1, 3, 10) < d.level_due(0, 2, 3, 10));
        // The last merge, and a range delete's rewrite, are due the reserve before the deadline:
        // they need time to run.
        for (level, bottom) in [(2, 3), (0, 1), (0, 0)] {
            assert_eq!(d.level_due(7, level, bottom, 10), d.final_due(7) - d.reserve_ms);
        }
        assert_eq!(d.range_due(7), d.final_due(7) - d.reserve_ms);
        // Odd totals lose nothing to rounding.
        let d = Deadlines::new(Duration::from_millis(1009));
        assert_eq!(d.memtable_ms + d.levels_ms + d.reserve_ms, d.total_ms);
    }
}
