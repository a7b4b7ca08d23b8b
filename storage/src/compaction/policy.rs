//! Which compaction to run next: a pure function of the live files per level.

use crate::sst::FileMeta;
use crate::Options;

/// Why a compaction was chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CompactionReason {
    /// Level 0 reached its file-count trigger.
    Level0FileCount,
    /// A level exceeded its target size (score = size / target).
    LevelSize(f64),
    /// Requested through `compact_range`.
    Manual,
    /// A range scan merged these levels (RangeReduce's Bounded-Merge).
    RangeReduce,
    /// A delete deadline (FADE) forced it, this long after the deadline.
    Deadline {
        /// Milliseconds past the deadline when picked (0: picked at the deadline).
        overdue_ms: u64,
    },
}

/// A compaction to execute: merge `inputs` (at `level`) with `overlapping` (at `output_level`).
/// `output_level == level` rewrites a single file in place.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactionTask {
    /// Level the inputs come from.
    pub level: usize,
    /// Level the outputs go to (`level + 1`, or `level` for an in-place rewrite).
    pub output_level: usize,
    /// Input file ids at `level`.
    pub inputs: Vec<u64>,
    /// Input file ids at `output_level` that overlap the inputs' key range.
    pub overlapping: Vec<u64>,
    /// True if the single input can move down without rewriting.
    pub trivial_move: bool,
    /// True if no deeper level overlaps the key range, so tombstones can be dropped.
    pub bottommost: bool,
    /// Why it was chosen.
    pub reason: CompactionReason,
}

/// Picks the most urgent compaction, or `None` if every level is within its target.
///
/// Scores: level 0 = files / `level0_compaction_trigger`; level i = bytes / target(i). The highest
/// score >= 1 wins, ties to the shallower level. At level i >= 1 the file with the smallest
/// overlap ratio (bytes it would rewrite in level i+1 per byte moved) is picked, ties to the file
/// holding the most tombstones. The last level is never compacted by size.
pub fn pick(levels: &[Vec<&FileMeta>], opts: &Options) -> Option<CompactionTask> {
    let last = levels.len().checked_sub(1)?;
    let mut best: Option<(f64, usize)> = None;
    for (level, files) in levels.iter().enumerate().take(last) {
        let score = if level == 0 {
            files.len() as f64 / opts.level0_compaction_trigger.max(1) as f64
        } else {
            files.iter().map(|f| f.size).sum::<u64>() as f64 / opts.level_target_size(level) as f64
        };
        if score >= 1.0 && best.is_none_or(|(s, _)| score > s) {
            best = Some((score, level));
        }
    }
    let (score, level) = best?;
    if level == 0 {
        let inputs = levels[0].clone();
        return Some(task_for(levels, 0, &inputs, CompactionReason::Level0FileCount));
    }
    let next = &levels[level + 1];
    let file = levels[level].iter().min_by(|a, b| {
        let ra = overlap_bytes(next, a) as f64 / a.size.max(1) as f64;
        let rb = overlap_bytes(next, b) as f64 / b.size.max(1) as f64;
        ra.total_cmp(&rb).then(b.props.tombstones.cmp(&a.props.tombstones))
    })?;
    Some(task_for(levels, level, &[*file], CompactionReason::LevelSize(score)))
}

/// With [`Options::level_renaming`]: the deepest non-empty level `d >= 1`, if it reached its
/// target size and level `d + 1` exists and is empty (levels `1..=d` then move down by one).
pub fn level_rename(levels: &[Vec<&FileMeta>], opts: &Options) -> Option<usize> {
    if !opts.level_renaming {
        return None;
    }
    let d = (1..levels.len()).rev().find(|&l| !levels[l].is_empty())?;
    let below = levels.get(d + 1)?;
    let size: u64 = levels[d].iter().map(|f| f.size).sum();
    (below.is_empty() && size >= opts.level_target_size(d)).then_some(d)
}

fn overlap_bytes(files: &[&FileMeta], f: &FileMeta) -> u64 {
    files.iter().filter(|o| o.overlaps(Some(f.smallest()), Some(f.largest()))).map(|o| o.size).sum()
}

/// Builds the task that compacts `inputs` (files at `level`) into `level + 1`.
pub fn task_for(
    levels: &[Vec<&FileMeta>],
    level: usize,
    inputs: &[&FileMeta],
    reason: CompactionReason,
) -> CompactionTask {
    let lo = inputs.iter().map(|f| f.smallest()).min().unwrap_or_default();
    let hi = inputs.iter().map(|f| f.largest()).max().unwrap_or_default();
    let output_level = level + 1;
    let overlapping: Vec<u64> = levels
        .get(output_level)
        .map(|files| {
            files.iter().filter(|f| f.overlaps(Some(lo), Some(hi))).map(|f| f.id).collect()
        })
        .unwrap_or_default();
    // The merge rewrites the overlapping files too, whose range may reach beyond the inputs'.
    // Tombstones may be dropped only if nothing deeper overlaps that whole range.
    let (mut out_lo, mut out_hi) = (lo, hi);
    for f in levels.get(output_level).into_iter().flatten().filter(|f| overlapping.contains(&f.id))
    {
        out_lo = out_lo.min(f.smallest());
        out_hi = out_hi.max(f.largest());
    }
    let bottommost = levels
        .iter()
        .skip(output_level + 1)
        .all(|files| !files.iter().any(|f| f.overlaps(Some(out_lo), Some(out_hi))));
    CompactionTask {
        level,
        output_level,
        inputs: inputs.iter().map(|f| f.id).collect(),
        trivial_move: inputs.len() == 1 && overlapping.is_empty(),
        overlapping,
        bottommost,
        reason,
    }
}

/// Builds the task that rewrites one file in place at its own level (manual compaction of the
/// deepest level, so deleted and shadowed entries are purged).
pub fn rewrite_task(levels: &[Vec<&FileMeta>], level: usize, file: &FileMeta) -> CompactionTask {
    let bottommost = levels.iter().skip(level + 1).all(|files| {
        !files.iter().any(|f| f.overlaps(Some(file.smallest()), Some(file.largest())))
    });
    CompactionTask {
        level,
        output_level: level,
        inputs: vec![file.id],
        overlapping: Vec::new(),
        trivial_move: false,
        bottommost,
        reason: CompactionReason::Manual,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sst::TableProps;

    fn file(id: u64, lo: u8, hi: u8, size: u64) -> FileMeta {
        FileMeta {
            id,
            size,
            props: TableProps { smallest: vec![lo], largest: vec![hi], ..Default::default() },
        }
    }

    fn opts() -> Options {
        Options { base_level_size: 100, level0_compaction_trigger: 2, ..Options::default() }
    }

    fn view(levels: &[Vec<FileMeta>]) -> Vec<Vec<&FileMeta>> {
        levels.iter().map(|l| l.iter().collect()).collect()
    }

    #[test]
    fn nothing_to_do_when_within_targets() {
        let levels = vec![vec![file(1, 0, 9, 10)], vec![file(2, 0, 9, 50)], vec![]];
        assert_eq!(pick(&view(&levels), &opts()), None);
    }

    #[test]
    fn level0_takes_all_files_and_overlaps() {
        let levels = vec![
            vec![file(5, 10, 20, 10), file(4, 15, 30, 10)],
            vec![file(1, 0, 9, 10), file(2, 12, 18, 10), file(3, 40, 50, 10)],
            vec![file(9, 25, 26, 10)],
        ];
        let t = pick(&view(&levels), &opts()).unwrap();
        assert_eq!(t.level, 0);
        assert_eq!(t.inputs, vec![5, 4]);
        assert_eq!(t.overlapping, vec![2]);
        assert!(!t.trivial_move);
        assert!(!t.bottommost, "level 2 overlaps [10, 30]");
    }

    #[test]
    fn size_trigger_picks_min_overlap_file_and_trivial_moves() {
        let levels =
            vec![vec![], vec![file(1, 0, 9, 80), file(2, 20, 29, 80)], vec![file(3, 0, 5, 500)]];
        let t = pick(&view(&levels), &opts()).unwrap();
        assert_eq!((t.level, t.inputs.clone()), (1, vec![2]));
        assert!(t.trivial_move && t.bottommost);
        assert!(matches!(t.reason, CompactionReason::LevelSize(s) if (s - 1.6).abs() < 1e-9));
    }

    #[test]
    fn bottommost_covers_the_overlapping_files_range() {
        // Input [10, 20] overlaps level-2 file [5, 40]; level 3 holds [30, 35], outside the input
        // but inside what the merge rewrites: tombstones must be kept.
        let levels = vec![
            vec![],
            vec![file(1, 10, 20, 200)],
            vec![file(2, 5, 40, 10)],
            vec![file(3, 30, 35, 10)],
        ];
        let t = task_for(&view(&levels), 1, &[&levels[1][0]], CompactionReason::Manual);
        assert_eq!(t.overlapping, vec![2]);
        assert!(!t.bottommost);
    }

    #[test]
    fn highest_score_wins_ties_to_shallower() {
        let levels = vec![
            vec![file(7, 0, 1, 1), file(8, 0, 1, 1)], // score 1.0
            vec![file(1, 0, 9, 100)],                 // score 1.0
            vec![],
        ];
        assert_eq!(pick(&view(&levels), &opts()).unwrap().level, 0);
    }

    #[test]
    fn level_renaming_only_when_the_deepest_level_is_full_and_room_below() {
        let big = file(1, 0, 100, 300 << 20);
        let small = file(2, 0, 100, 1 << 20);
        let opts = Options { level_renaming: true, num_levels: 4, ..Options::default() };
        let l = |files: Vec<Vec<&FileMeta>>| level_rename(&files, &opts);
        // Level 1 over its 256 MiB target, level 2 empty: rename levels 1..=1.
        assert_eq!(l(vec![vec![], vec![&big], vec![], vec![]]), Some(1));
        // Deepest level not full, or no room below it: no rename.
        assert_eq!(l(vec![vec![], vec![&small], vec![], vec![]]), None);
        assert_eq!(l(vec![vec![], vec![&big], vec![&small], vec![]]), None);
        assert_eq!(l(vec![vec![], vec![], vec![], vec![&big]]), None);
        assert_eq!(l(vec![vec![&big], vec![], vec![], vec![]]), None, "level 0 is not renamed");
        let off = Options { level_renaming: false, ..opts.clone() };
        assert_eq!(level_rename(&[vec![], vec![&big], vec![], vec![]], &off), None);
    }
}
