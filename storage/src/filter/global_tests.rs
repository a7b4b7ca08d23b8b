//! The global filter, maintained edit by edit, names exactly the runs holding a range's cells:
//! never fewer (no false negative), and no more than a filter rebuilt from the same files.

use std::collections::BTreeSet;
use std::ops::Bound;
use std::sync::Arc;

use proptest::prelude::*;

use super::global::{CellCollector, Cells, FileCells, GlobalFilter, GlobalSpec};

const SPEC: GlobalSpec = GlobalSpec { key_len: 16, shift: 4 };

fn key(series: u8, t: u64) -> Vec<u8> {
    let mut k = vec![0, 0, 0, 0, 0, 0, 0, series];
    k.extend_from_slice(&t.to_be_bytes());
    k
}

#[derive(Debug, Clone)]
struct File {
    id: u64,
    level: usize,
    keys: BTreeSet<Vec<u8>>,
    cells: Arc<Cells>,
}

fn file(id: u64, level: usize, keys: BTreeSet<Vec<u8>>) -> File {
    let mut c = CellCollector::new(SPEC);
    for k in &keys {
        c.add(k);
    }
    File { id, level, keys, cells: Arc::new(c.finish()) }
}

fn fc(f: &File) -> FileCells {
    (f.level, f.id, Some(f.cells.clone()))
}

#[derive(Debug, Clone)]
enum Step {
    /// A flush: a level-0 file of these `(series, time)` keys, plus one key of another length.
    Flush(Vec<(u8, u64)>, bool),
    /// Files (indexes into the live list) merged into one file at a level.
    Merge(Vec<usize>, usize),
    /// A file moved to another level, unchanged.
    Move(usize, usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (prop::collection::vec((0u8..6, 0u64..512), 1..20), any::<bool>())
            .prop_map(|(k, f)| Step::Flush(k, f)),
        1 => (prop::collection::vec(0usize..100, 1..6), 0usize..5).prop_map(|(i, l)| Step::Merge(i, l)),
        1 => (0usize..100, 0usize..5).prop_map(|(i, l)| Step::Move(i, l)),
    ]
}

/// Does `f` hold a key whose cell lies in the cells of `[a, b]` of `series`?
fn holds_cell(f: &File, series: u8, a: u64, b: u64) -> bool {
    let head = &key(series, 0)[..8];
    f.keys.iter().any(|k| {
        if k.len() != 16 {
            return k.len() >= 8 && &k[..8] == head;
        }
        &k[..8] == head && {
            let t = u64::from_be_bytes(k[8..].try_into().expect("8 bytes"));
            (a >> SPEC.shift..=b >> SPEC.shift).contains(&(t >> SPEC.shift))
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn edits_keep_the_filter_exact(steps in prop::collection::vec(step(), 1..120)) {
        let mut g = GlobalFilter::new(SPEC);
        let mut live: Vec<File> = Vec::new();
        let mut next_id = 1u64;
        for st in steps {
            let (removed, added): (Vec<File>, Vec<File>) = match st {
                Step::Flush(keys, foreign) => {
                    let mut set: BTreeSet<Vec<u8>> = keys.iter().map(|&(s, t)| key(s, t)).collect();
                    if foreign {
                        let mut k = key(keys[0].0, keys[0].1);
                        k.push(0); // longer: sorts right after the key
                        set.insert(k);
                    }
                    next_id += 1;
                    (vec![], vec![file(next_id, 0, set)])
                }
                Step::Merge(picks, level) if !live.is_empty() => {
                    let picked: BTreeSet<usize> = picks.iter().map(|i| i % live.len()).collect();
                    let removed: Vec<File> = picked.iter().map(|&i| live[i].clone()).collect();
                    let keys = removed.iter().flat_map(|f| f.keys.iter().cloned()).collect();
                    next_id += 1;
                    (removed, vec![file(next_id, level, keys)])
                }
                Step::Move(i, level) if !live.is_empty() => {
                    let f = live[i % live.len()].clone();
                    let moved = File { level, ..f.clone() };
                    (vec![f], vec![moved])
                }
                _ => continue,
            };
            let r: Vec<FileCells> = removed.iter().map(fc).collect();
            let a: Vec<FileCells> = added.iter().map(fc).collect();
            g = g.apply(&r, &a);
            live.retain(|f| !removed.iter().any(|x| x.id == f.id));
            live.extend(added);

            let rebuilt = GlobalFilter::new(SPEC).apply(&[], &live.iter().map(fc).collect::<Vec<_>>());
            prop_assert_eq!(g.len(), rebuilt.len());
            for series in 0..7u8 {
                for (a, b) in [(0u64, 0u64), (0, 15), (16, 40), (100, 164), (300, 511), (0, 511)] {
                    let (lo, hi) = (key(series, a), key(series, b));
                    let range = (Bound::Included(lo.as_slice()), Bound::Included(hi.as_slice()));
                    let c = g.candidates(range.0, range.1).expect("one head");
                    let fresh = rebuilt.candidates(range.0, range.1).expect("one head");
                    for f in &live {
                        let keep = g.keeps(&c, f.level, f.id);
                        let want = holds_cell(f, series, a, b);
                        if f.level == 0 {
                            // Level-0 files beyond the slots are unindexed: always read.
                            prop_assert!(keep.is_none_or(|k| k == want), "{f:?} {series} {a}..{b}");
                        } else {
                            let level_holds = live
                                .iter()
                                .any(|o| o.level == f.level && holds_cell(o, series, a, b));
                            prop_assert_eq!(keep, Some(level_holds), "{:?} {} {}..{}", f, series, a, b);
                            prop_assert_eq!(keep, rebuilt.keeps(&fresh, f.level, f.id));
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn ranges_outside_one_head_are_not_answered() {
    let g = GlobalFilter::new(SPEC);
    let (a, b) = (key(1, 5), key(2, 5));
    assert!(g.candidates(Bound::Included(&a[..]), Bound::Included(&b[..])).is_none());
    assert!(g.candidates(Bound::Unbounded, Bound::Included(&b[..])).is_none());
    let short = [0u8; 9];
    assert!(g.candidates(Bound::Included(&short[..]), Bound::Included(&b[..])).is_none());
    // An empty range names no run.
    let c = g.candidates(Bound::Excluded(&a[..]), Bound::Excluded(&a[..])).expect("one head");
    assert_eq!(g.keeps(&c, 1, 7), Some(false));
}
