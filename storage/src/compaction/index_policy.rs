//! Which range-index (LSM-DRtree) merge to run next: a pure function of the index levels.

use crate::gloran::DrMeta;
use crate::options::RangeIndexOptions;

/// A merge of whole index levels into `output_level`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexTask {
    /// (index level, file id) of every input.
    pub inputs: Vec<(usize, u64)>,
    /// Level the merged DR-tree goes to.
    pub output_level: usize,
}

/// Picks an index merge: all of level 0 plus level 1 once level 0 holds `level0_trigger` trees;
/// otherwise the shallowest level `i >= 1` over `base_level_pieces * T^(i-1)` pieces merges into
/// level `i + 1` (full-level merges keep one tree per level and every level newer than the next).
pub fn pick_index(levels: &[Vec<&DrMeta>], opts: &RangeIndexOptions) -> Option<IndexTask> {
    let all = |l: usize| levels.get(l).into_iter().flatten().map(move |m| (l, m.id));
    if levels.first().is_some_and(|l0| l0.len() >= opts.level0_trigger) && levels.len() > 1 {
        return Some(IndexTask { inputs: all(0).chain(all(1)).collect(), output_level: 1 });
    }
    let mut cap = opts.base_level_pieces;
    let last = levels.len().saturating_sub(1);
    for (l, level) in levels.iter().enumerate().take(last).skip(1) {
        let pieces: u64 = level.iter().map(|m| m.props.pieces).sum();
        if pieces > cap {
            return Some(IndexTask {
                inputs: all(l).chain(all(l + 1)).collect(),
                output_level: l + 1,
            });
        }
        cap = cap.saturating_mul(opts.size_ratio.max(2) as u64);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gloran::DrProps;

    fn m(id: u64, pieces: u64) -> DrMeta {
        DrMeta { id, size: 0, props: DrProps { pieces, ..Default::default() } }
    }

    #[test]
    fn level0_trigger_then_level_sizes() {
        let opts =
            RangeIndexOptions { level0_trigger: 2, base_level_pieces: 10, ..Default::default() };
        let (a, b, c, d) = (m(1, 3), m(2, 3), m(3, 11), m(4, 50));
        let levels = vec![vec![&a, &b], vec![&c], vec![&d]];
        assert_eq!(
            pick_index(&levels, &opts),
            Some(IndexTask { inputs: vec![(0, 1), (0, 2), (1, 3)], output_level: 1 })
        );
        let levels = vec![vec![&a], vec![&c], vec![&d]];
        assert_eq!(
            pick_index(&levels, &opts),
            Some(IndexTask { inputs: vec![(1, 3), (2, 4)], output_level: 2 })
        );
        let levels = vec![vec![&a], vec![&b], vec![&d]];
        assert_eq!(pick_index(&levels, &opts), None, "the last level is never merged by size");
    }
}
