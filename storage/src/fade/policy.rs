//! Which file a delete deadline forces into compaction: a pure function of the live files, the
//! pending range deletes and the time.

use super::{Deadlines, DeleteStamp};
use crate::compaction::policy::{rewrite_task, task_for, CompactionReason, CompactionTask};
use crate::sst::FileMeta;

/// A range delete not yet persisted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingRange {
    /// Sequence number (deletion id).
    pub seq: u64,
    /// Inclusive lower key.
    pub lo: Vec<u8>,
    /// Exclusive upper key (empty: the end of the key space).
    pub hi: Vec<u8>,
    /// Due base (ms): its issue time under the default deadline (see
    /// [`crate::fade::DeleteStamp`]).
    pub issued_ms: u64,
}

impl PendingRange {
    /// True if `f` may still hold data this delete covers: it overlaps the range, holds entries
    /// older than the delete, and was written before the delete was applied.
    pub fn blocked_by(&self, f: &FileMeta) -> bool {
        let p = &f.props;
        p.min_seq < self.seq
            && p.rd_applied < self.seq
            && f.overlaps(Some(&self.lo), None)
            && (self.hi.is_empty() || f.smallest() < self.hi.as_slice())
    }
}

/// Inputs of [`pick_expired`] besides the files.
#[derive(Debug, Clone)]
pub struct FadeInput<'a> {
    /// Current time (ms).
    pub now_ms: u64,
    /// The deadline split.
    pub deadlines: Deadlines,
    /// Size ratio T.
    pub size_ratio: u32,
    /// Pending range deletes, oldest first.
    pub pending_ranges: &'a [PendingRange],
    /// Sequence number of the oldest live snapshot: deletes newer than it cannot be persisted
    /// while it lives (it still reads their data), so they never make a file due.
    pub oldest_snapshot: Option<u64>,
}

/// Why a file is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Due {
    /// A point delete's stamp: the file must leave its level.
    Point(u64),
    /// A pending range delete: the file must be rewritten.
    Range(u64),
}

impl Due {
    fn at(self) -> u64 {
        match self {
            Due::Point(t) | Due::Range(t) => t,
        }
    }
}

fn file_due(f: &FileMeta, level: usize, bottom: usize, input: &FadeInput<'_>) -> Option<Due> {
    let allowed = |seq: u64| input.oldest_snapshot.is_none_or(|s| seq <= s);
    let point =
        f.props.oldest_delete.filter(|st: &DeleteStamp| allowed(st.seq)).map(|st| {
            Due::Point(input.deadlines.level_due(st.ms, level, bottom, input.size_ratio))
        });
    let range = input
        .pending_ranges
        .iter()
        .filter(|r| allowed(r.seq))
        .find(|r| r.blocked_by(f))
        .map(|r| Due::Range(input.deadlines.range_due(r.issued_ms)));
    match (point, range) {
        (Some(p), Some(r)) => Some(if r.at() < p.at() { r } else { p }),
        (p, r) => p.or(r),
    }
}

/// The compaction a missed (or reached) deadline forces, most overdue file first; `None` if no
/// file is due. A due level-0 file takes all of level 0 along (its files overlap); a file with
/// deeper data below it merges down one level; a file with nothing below it, or one due for a
/// range delete that a trivial move would not apply, is rewritten in place.
pub fn pick_expired(levels: &[Vec<&FileMeta>], input: &FadeInput<'_>) -> Option<CompactionTask> {
    let bottom = levels.iter().rposition(|l| !l.is_empty())?;
    let mut best: Option<(u64, usize, u64, &FileMeta, Due)> = None;
    for (level, files) in levels.iter().enumerate() {
        for f in files {
            let Some(due) = file_due(f, level, bottom, input) else { continue };
            if due.at() > input.now_ms {
                continue;
            }
            // Earliest deadline first; ties to the shallower level, then more tombstones.
            let key = (due.at(), level, u64::MAX - f.props.tombstones);
            if best.is_none_or(|(a, l, t, _, _)| key < (a, l, t)) {
                best = Some((key.0, key.1, key.2, f, due));
            }
        }
    }
    let (at, level, _, f, due) = best?;
    let reason = CompactionReason::Deadline { overdue_ms: input.now_ms - at };
    let deeper = levels
        .iter()
        .skip(level + 1)
        .any(|fs| fs.iter().any(|o| o.overlaps(Some(f.smallest()), Some(f.largest()))));
    let mut task = if level == 0 {
        task_for(levels, 0, &levels[0], reason)
    } else if level + 1 < levels.len() && deeper {
        task_for(levels, level, &[f], reason)
    } else {
        rewrite_task(levels, level, f)
    };
    if task.trivial_move && matches!(due, Due::Range(_)) {
        task = rewrite_task(levels, level, f);
    }
    task.reason = reason;
    Some(task)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::sst::TableProps;

    fn file(id: u64, lo: u8, hi: u8, stamp: Option<(u64, u64)>) -> FileMeta {
        FileMeta {
            id,
            size: 10,
            props: TableProps {
                smallest: vec![lo],
                largest: vec![hi],
                min_seq: 1,
                max_seq: 1000,
                oldest_delete: stamp.map(|(seq, ms)| DeleteStamp { seq, ms }),
                ..Default::default()
            },
        }
    }

    fn view(levels: &[Vec<FileMeta>]) -> Vec<Vec<&FileMeta>> {
        levels.iter().map(|l| l.iter().collect()).collect()
    }

    fn input(now_ms: u64, ranges: &[PendingRange]) -> FadeInput<'_> {
        FadeInput {
            now_ms,
            deadlines: Deadlines::new(Duration::from_millis(1000)),
            size_ratio: 10,
            pending_ranges: ranges,
            oldest_snapshot: None,
        }
    }

    #[test]
    fn nothing_due_nothing_picked() {
        let levels = vec![vec![], vec![file(1, 0, 9, Some((5, 0)))], vec![file(2, 0, 9, None)]];
        // Level 1 of a tree whose deepest level is 2: due at 100 + 800 * 1 = 900, the reserve
        // (100) before the deadline, so the merge into the last level ends by 1000.
        assert_eq!(pick_expired(&view(&levels), &input(899, &[])), None);
        let t = pick_expired(&view(&levels), &input(900, &[])).unwrap();
        assert_eq!((t.level, t.output_level, t.inputs.clone()), (1, 2, vec![1]));
        assert_eq!(t.overlapping, vec![2]);
    }

    #[test]
    fn earliest_deadline_first_and_shallower_on_ties() {
        let levels = vec![
            vec![],
            vec![file(1, 0, 9, Some((5, 100))), file(3, 20, 29, Some((4, 50)))],
            vec![file(2, 0, 50, Some((1, 50)))],
            vec![file(9, 0, 50, None)],
        ];
        // Level 1 due at ms + 100 + 800 * 9/99 (~173); level 2 at ms + 900.
        let t = pick_expired(&view(&levels), &input(10_000, &[])).unwrap();
        assert_eq!(t.inputs, vec![3], "most overdue first");
        assert!(matches!(t.reason, CompactionReason::Deadline { .. }));
    }

    #[test]
    fn nothing_below_means_rewrite_in_place() {
        let levels = vec![vec![], vec![file(1, 0, 9, None)], vec![file(2, 20, 29, Some((5, 0)))]];
        let t = pick_expired(&view(&levels), &input(5_000, &[])).unwrap();
        assert_eq!((t.level, t.output_level, t.inputs.clone()), (2, 2, vec![2]));
        assert!(t.bottommost);
    }

    #[test]
    fn level0_takes_all_level0_files() {
        let levels = vec![
            vec![file(5, 0, 9, None), file(4, 5, 20, Some((3, 0)))],
            vec![file(1, 0, 30, None)],
        ];
        let t = pick_expired(&view(&levels), &input(5_000, &[])).unwrap();
        assert_eq!((t.level, t.inputs.clone(), t.overlapping.clone()), (0, vec![5, 4], vec![1]));
    }

    #[test]
    fn pending_range_rewrites_blocking_files_only() {
        let r = PendingRange { seq: 500, lo: vec![10], hi: vec![20], issued_ms: 0 };
        let mut applied = file(2, 15, 30, None);
        applied.props.rd_applied = 600; // written after the delete was applied
        let levels = vec![vec![], vec![file(1, 0, 9, None), applied], vec![file(3, 19, 40, None)]];
        let ranges = [r];
        // Due the reserve (a tenth) before the deadline, so the rewrite ends in time.
        assert_eq!(pick_expired(&view(&levels), &input(899, &ranges)), None);
        let t = pick_expired(&view(&levels), &input(900, &ranges)).unwrap();
        assert_eq!((t.level, t.output_level, t.inputs.clone()), (2, 2, vec![3]));
    }

    #[test]
    fn snapshots_older_than_a_delete_hold_it_back() {
        let levels = vec![vec![], vec![file(1, 0, 9, Some((50, 0)))]];
        let mut i = input(1_000_000, &[]);
        i.oldest_snapshot = Some(40);
        assert_eq!(pick_expired(&view(&levels), &i), None);
        i.oldest_snapshot = Some(50);
        assert!(pick_expired(&view(&levels), &i).is_some());
    }
}
