//! The key x sequence space a set of deletes covers.

use crate::ledger::{Deletion, DeletionKind};
use crate::options::DeleteKeyExtractor;

/// One delete as a rectangle: keys `[lo, hi)` (`hi` `None`: unbounded) below sequence number
/// `seq`, optionally only at delete keys (times) in a window.
#[derive(Debug, Clone)]
struct Rect {
    lo: Vec<u8>,
    hi: Option<Vec<u8>>,
    seq: u64,
    window: Option<(u64, u64)>,
}

/// What a set of deletes covers: a put of `key` at `seq` is covered if some delete of the set
/// has `key` in its range, a higher sequence number, and (for a time window) the key's time
/// inside its window.
#[derive(Clone)]
pub struct Coverage {
    /// Sorted by `lo`.
    rects: Vec<Rect>,
    /// `reach[i]`: the largest `hi` among `rects[..=i]` (`None`: unbounded).
    reach: Vec<Option<Vec<u8>>>,
    delete_key: DeleteKeyExtractor,
}

impl std::fmt::Debug for Coverage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coverage").field("deletes", &self.rects.len()).finish()
    }
}

fn max_hi(a: &Option<Vec<u8>>, b: &Option<Vec<u8>>) -> Option<Vec<u8>> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y).clone()),
        _ => None,
    }
}

impl Coverage {
    /// The coverage of `deletes`, with `delete_key` giving a key's time (for time windows).
    pub fn new(deletes: &[Deletion], delete_key: DeleteKeyExtractor) -> Coverage {
        let mut rects: Vec<Rect> = deletes
            .iter()
            .map(|d| match &d.kind {
                DeletionKind::Point { key } => {
                    let mut hi = key.clone();
                    hi.push(0);
                    Rect { lo: key.clone(), hi: Some(hi), seq: d.id, window: None }
                }
                DeletionKind::Range { lo, hi } => Rect {
                    lo: lo.clone(),
                    hi: (!hi.is_empty()).then(|| hi.clone()),
                    seq: d.id,
                    window: None,
                },
                DeletionKind::TimeWindow { t_lo, t_hi, lo, hi } => Rect {
                    lo: lo.clone(),
                    hi: (!hi.is_empty()).then(|| hi.clone()),
                    seq: d.id,
                    window: Some((*t_lo, *t_hi)),
                },
            })
            .collect();
        rects.sort_by(|a, b| a.lo.cmp(&b.lo));
        let mut reach: Vec<Option<Vec<u8>>> = Vec::with_capacity(rects.len());
        for r in &rects {
            let next = match reach.last() {
                Some(prev) => max_hi(prev, &r.hi),
                None => r.hi.clone(),
            };
            reach.push(next);
        }
        Coverage { rects, reach, delete_key }
    }

    /// True if no delete is in the set.
    pub fn is_empty(&self) -> bool {
        self.rects.is_empty()
    }

    /// Number of deletes in the set.
    pub fn len(&self) -> usize {
        self.rects.len()
    }

    /// The key ranges the deletes span, sorted by lower bound (`None`: unbounded above), for
    /// scans that seek.
    pub fn key_ranges(&self) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> + '_ {
        self.rects.iter().map(|r| (r.lo.as_slice(), r.hi.as_deref()))
    }

    /// True if a put of `key` at sequence number `seq` is covered.
    pub fn covers(&self, key: &[u8], seq: u64) -> bool {
        let end = self.rects.partition_point(|r| r.lo.as_slice() <= key);
        for i in (0..end).rev() {
            if self.reach[i].as_deref().is_some_and(|h| h <= key) {
                break; // nothing at or before i reaches `key`
            }
            let r = &self.rects[i];
            let inside = r.hi.as_deref().is_none_or(|h| key < h);
            if inside
                && seq < r.seq
                && r.window.is_none_or(|(lo, hi)| (lo..hi).contains(&self.delete_key.extract(key)))
            {
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn del(id: u64, kind: DeletionKind) -> Deletion {
        Deletion {
            id,
            kind,
            issued_at_ms: 0,
            deadline_ms: crate::ledger::Deadline::Never,
            applied_at_ms: 0,
            persisted_at_ms: None,
        }
    }

    #[test]
    fn covers_points_ranges_and_windows_below_their_sequence() {
        let dk = DeleteKeyExtractor::new(|k: &[u8]| u64::from(*k.last().unwrap_or(&0)));
        let c = Coverage::new(
            &[
                del(10, DeletionKind::Range { lo: b"b".to_vec(), hi: b"d".to_vec() }),
                del(20, DeletionKind::Point { key: b"x".to_vec() }),
                del(
                    30,
                    DeletionKind::TimeWindow {
                        t_lo: 5,
                        t_hi: 7,
                        lo: b"m".to_vec(),
                        hi: Vec::new(),
                    },
                ),
                del(40, DeletionKind::Range { lo: b"a".to_vec(), hi: b"z".to_vec() }),
            ],
            dk,
        );
        assert!(c.covers(b"c", 9));
        assert!(c.covers(b"c", 39), "the wide range covers it too");
        assert!(!c.covers(b"c", 40));
        assert!(c.covers(b"x", 19));
        assert!(!c.covers(b"z", 1), "hi is exclusive");
        assert!(c.covers(b"zz\x05", 29), "time window, unbounded above");
        assert!(!c.covers(b"zz\x08", 29), "outside the window");
        assert!(!c.covers(b"0", 1), "below every range");
        assert_eq!(c.len(), 4);
    }
}
