//! Pieces of the range-delete skyline: key-disjoint intervals with the sequence numbers of the
//! range deletes that cover them.
//!
//! A range delete `[lo, hi)` at sequence number `s` is the rectangle `[lo, hi) x [0, s)` in
//! key x sequence space: it deletes every entry `(k, e)` with `lo <= k < hi` and `e < s`.
//! Disjointization cuts overlapping rectangles at their endpoints into key-disjoint pieces; each
//! piece keeps the covering sequence numbers, newest first, one per snapshot stripe (readers at
//! an older snapshot must still see the older delete: a newer one may be invisible to them).

use bytes::Bytes;
use smallvec::SmallVec;

/// Sequence numbers covering a piece, strictly descending.
pub type SeqList = SmallVec<[u64; 2]>;

/// An empty `hi` means "no upper bound" (the end of the key space).
#[inline]
pub fn before_end(key: &[u8], hi: &[u8]) -> bool {
    hi.is_empty() || key < hi
}

/// Orders two upper bounds (empty = +infinity).
#[inline]
pub fn cmp_end(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    match (a.is_empty(), b.is_empty()) {
        (true, true) => std::cmp::Ordering::Equal,
        (true, false) => std::cmp::Ordering::Greater,
        (false, true) => std::cmp::Ordering::Less,
        (false, false) => a.cmp(b),
    }
}

/// A key-disjoint interval `[lo, hi)` and the range deletes covering it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    /// Inclusive lower key.
    pub lo: Bytes,
    /// Exclusive upper key; empty = end of the key space.
    pub hi: Bytes,
    /// Covering sequence numbers, newest first.
    pub seqs: SeqList,
}

impl Piece {
    /// True if `key` lies in `[lo, hi)`.
    #[inline]
    pub fn contains(&self, key: &[u8]) -> bool {
        self.lo.as_ref() <= key && before_end(key, &self.hi)
    }

    /// Newest covering sequence number a reader at `t` sees.
    #[inline]
    pub fn visible(&self, t: u64) -> Option<u64> {
        visible(&self.seqs, t)
    }

    /// Newest sequence number.
    pub fn max_seq(&self) -> u64 {
        self.seqs.first().copied().unwrap_or(0)
    }
}

/// Index of the piece of `pieces` (key-sorted, disjoint) containing `key`.
#[inline]
pub fn find_index(pieces: &[Piece], key: &[u8]) -> Option<usize> {
    let i = pieces.partition_point(|p| p.lo.as_ref() <= key).checked_sub(1)?;
    pieces[i].contains(key).then_some(i)
}

/// The piece of `pieces` (key-sorted, disjoint) containing `key`.
#[inline]
pub fn find<'a>(pieces: &'a [Piece], key: &[u8]) -> Option<&'a Piece> {
    find_index(pieces, key).map(|i| &pieces[i])
}

/// Newest sequence number in `seqs` (descending) that is `<= t`.
#[inline]
pub fn visible(seqs: &[u64], t: u64) -> Option<u64> {
    seqs.iter().copied().find(|&s| s <= t)
}

/// Keeps the newest sequence number of each snapshot stripe and drops those at or below the
/// garbage-collection watermark `gc` (no entry they could delete remains).
pub fn collapse(seqs: &mut SeqList, snapshots: &[u64], gc: u64) {
    let stripe = |s: u64| snapshots.partition_point(|&x| x < s);
    let mut last = usize::MAX;
    seqs.retain(|s| {
        let st = stripe(*s);
        let keep = st != last && *s > gc;
        last = st;
        keep
    });
}

/// Merges key-disjoint, sorted piece lists into one: the covering sequence numbers of every
/// elementary interval are united, then (if `stripes` is given) collapsed per snapshot stripe and
/// garbage-collected below `gc`; adjacent pieces with equal lists are coalesced.
pub fn combine(inputs: &[&[Piece]], stripes: Option<&[u64]>, gc: u64) -> Vec<Piece> {
    let snaps = stripes.map(|s| {
        let mut v = s.to_vec();
        v.sort_unstable();
        v
    });
    let mut pos = vec![0usize; inputs.len()];
    let mut out: Vec<Piece> = Vec::new();
    // Current sweep position: the next elementary interval starts here.
    let mut cursor: Option<Bytes> = None;
    loop {
        // Lowest start of any remaining piece not yet passed, and the lowest boundary after it.
        let mut start: Option<Bytes> = None;
        for (i, list) in inputs.iter().enumerate() {
            if let Some(p) = list.get(pos[i]) {
                let lo = match &cursor {
                    Some(c) if c > &p.lo => c.clone(),
                    _ => p.lo.clone(),
                };
                if start.as_ref().is_none_or(|s| lo < *s) {
                    start = Some(lo);
                }
            }
        }
        let Some(x) = start else { break };
        // The interval [x, y) ends at the nearest boundary after x.
        let mut y: Option<Bytes> = None; // None = +inf
        let mut seqs = SeqList::new();
        for (i, list) in inputs.iter().enumerate() {
            let Some(p) = list.get(pos[i]) else { continue };
            let bound = if p.lo > x {
                p.lo.clone()
            } else {
                seqs.extend_from_slice(&p.seqs);
                p.hi.clone()
            };
            if !bound.is_empty() && y.as_ref().is_none_or(|yy| bound < *yy) {
                y = Some(bound);
            }
        }
        let hi = y.clone().unwrap_or_default();
        seqs.sort_unstable_by(|a, b| b.cmp(a));
        seqs.dedup();
        match &snaps {
            Some(snaps) => collapse(&mut seqs, snaps, gc),
            None => seqs.retain(|s| *s > gc),
        }
        if !seqs.is_empty() {
            match out.last_mut() {
                Some(last) if last.hi == x && last.seqs == seqs => last.hi = hi.clone(),
                _ => out.push(Piece { lo: x.clone(), hi: hi.clone(), seqs }),
            }
        }
        // Advance every input whose current piece ends at or before the new cursor.
        for (i, list) in inputs.iter().enumerate() {
            while let Some(p) = list.get(pos[i]) {
                let ended = match &y {
                    None => p.hi.is_empty(),
                    Some(yy) => !p.hi.is_empty() && p.hi <= *yy,
                };
                if ended {
                    pos[i] += 1;
                } else {
                    break;
                }
            }
        }
        match y {
            Some(yy) => cursor = Some(yy),
            None => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn b(x: u8) -> Bytes {
        Bytes::copy_from_slice(&[x])
    }

    /// Brute-force oracle: newest visible covering seq for key `k` at read seq `t`.
    fn oracle(records: &[(u8, Option<u8>, u64)], k: u8, t: u64) -> Option<u64> {
        records
            .iter()
            .filter(|(lo, hi, s)| *lo <= k && hi.is_none_or(|h| k < h) && *s <= t)
            .map(|r| r.2)
            .max()
    }

    fn single(lo: u8, hi: Option<u8>, s: u64) -> Vec<Piece> {
        vec![Piece {
            lo: b(lo),
            hi: hi.map(b).unwrap_or_default(),
            seqs: SeqList::from_slice(&[s]),
        }]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

        /// Combining records one at a time, in any grouping, equals the brute-force newest-visible
        /// answer at every snapshot, and the output is sorted, disjoint and coalesced.
        #[test]
        fn combine_matches_brute_force(
            recs in prop::collection::vec((0u8..40, prop::option::weighted(0.9, 0u8..41), 1u64..60), 0..25),
            snaps in prop::collection::vec(0u64..60, 0..4),
            split in 0usize..25,
        ) {
            let recs: Vec<_> = recs.into_iter()
                .filter(|(lo, hi, _)| hi.is_none_or(|h| h > *lo))
                .enumerate()
                .map(|(i, (lo, hi, s))| (lo, hi, s * 100 + i as u64)) // distinct seqs
                .collect();
            let split = split.min(recs.len());
            let mut a: Vec<Piece> = Vec::new();
            for r in &recs[..split] {
                a = combine(&[&a, &single(r.0, r.1, r.2)], None, 0);
            }
            let mut bb: Vec<Piece> = Vec::new();
            for r in &recs[split..] {
                bb = combine(&[&single(r.0, r.1, r.2), &bb], None, 0);
            }
            let snaps: Vec<u64> = snaps.iter().map(|s| s * 100 + 50).collect();
            let all = combine(&[&a, &bb], Some(&snaps), 0);
            for w in all.windows(2) {
                prop_assert!(cmp_end(&w[0].hi, &w[1].lo) != std::cmp::Ordering::Greater);
                prop_assert!(!(w[0].hi == w[1].lo && w[0].seqs == w[1].seqs), "not coalesced");
            }
            for p in &all {
                prop_assert!(before_end(&p.lo, &p.hi), "empty piece");
                prop_assert!(p.seqs.windows(2).all(|w| w[0] > w[1]));
            }
            let mut readers = snaps.clone();
            readers.push(u64::MAX);
            for k in 0u8..42 {
                for &t in &readers {
                    let got = all.iter().find(|p| p.contains(&[k])).and_then(|p| p.visible(t));
                    prop_assert_eq!(got, oracle(&recs, k, t), "key {} at {}", k, t);
                }
            }
        }
    }

    #[test]
    fn collapse_keeps_newest_per_stripe_and_drops_collected() {
        let mut s = SeqList::from_slice(&[90, 80, 40, 30, 10]);
        collapse(&mut s, &[35, 85], 15);
        assert_eq!(s.as_slice(), &[90, 80, 30]);
    }

    #[test]
    fn unbounded_pieces() {
        let a = single(5, None, 10);
        let c = combine(&[&a, &single(7, Some(9), 20)], None, 0);
        assert_eq!(c.len(), 3);
        assert!(c[2].hi.is_empty() && c[2].contains(&[255, 255]));
        assert_eq!(c[1].seqs.as_slice(), &[20, 10]);
        assert_eq!(combine(&[&c], None, 0), c);
        assert_eq!(combine(&[&c], None, 10).len(), 1, "gc drops the pieces only seq 10 covered");
        let latest_only = combine(&[&c], Some(&[]), 0);
        assert_eq!(latest_only[1].seqs.as_slice(), &[20], "no snapshots: newest only");
    }
}
