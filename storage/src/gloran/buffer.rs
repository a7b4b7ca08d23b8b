//! The in-memory range-delete buffer of one memtable: a key-disjoint skyline kept in a B-tree.
//!
//! Every range delete written while a memtable is active lands in its buffer; the buffer is
//! flushed with the memtable (as one DR-tree at index level 0), so the engine's persisted
//! sequence number covers range deletes exactly as it covers puts.

use std::collections::BTreeMap;
use std::ops::Bound;

use bytes::Bytes;
use parking_lot::RwLock;

use super::piece::{before_end, combine, visible, Piece, SeqList};

/// A concurrent skyline of range deletes, all sequence numbers kept (snapshots are applied when
/// the buffer is flushed).
#[derive(Debug, Default)]
pub(crate) struct RangeBuffer {
    map: RwLock<BTreeMap<Bytes, (Bytes, SeqList)>>,
}

impl RangeBuffer {
    /// Records the range delete `[lo, hi) @ seq`. `seq` must exceed every sequence number in the
    /// buffer (the engine's writer guarantees it). Empty ranges are ignored.
    pub fn insert(&self, lo: Bytes, hi: Bytes, seq: u64) {
        if !before_end(&lo, &hi) {
            return;
        }
        let mut map = self.map.write();
        // Pieces overlapping [lo, hi): the one starting before lo, if it reaches past lo, then
        // every piece starting inside the range.
        let mut starts: Vec<Bytes> = Vec::new();
        if let Some((plo, (phi, _))) = map.range(..lo.clone()).next_back() {
            if before_end(&lo, phi) {
                starts.push(plo.clone());
            }
        }
        starts.extend(
            map.range((Bound::Included(lo.clone()), Bound::Unbounded))
                .take_while(|(plo, _)| before_end(plo, &hi))
                .map(|(plo, _)| plo.clone()),
        );
        let overlapping: Vec<Piece> = starts
            .into_iter()
            .filter_map(|plo| map.remove(&plo).map(|(phi, seqs)| Piece { lo: plo, hi: phi, seqs }))
            .collect();
        let new = [Piece { lo, hi, seqs: SeqList::from_slice(&[seq]) }];
        for p in combine(&[&overlapping, &new], None, 0) {
            map.insert(p.lo, (p.hi, p.seqs));
        }
    }

    /// True if no range delete was recorded.
    pub fn is_empty(&self) -> bool {
        self.map.read().is_empty()
    }

    /// Newest covering sequence number of `key` visible at `t`.
    pub fn visible(&self, key: &[u8], t: u64) -> Option<u64> {
        let map = self.map.read();
        let (_, (hi, seqs)) =
            map.range::<[u8], _>((Bound::Unbounded, Bound::Included(key))).next_back()?;
        if !before_end(key, hi) {
            return None;
        }
        visible(seqs, t)
    }

    /// All covering sequence numbers of `key`, newest first.
    pub fn covering(&self, key: &[u8]) -> SeqList {
        let map = self.map.read();
        match map.range::<[u8], _>((Bound::Unbounded, Bound::Included(key))).next_back() {
            Some((_, (hi, seqs))) if before_end(key, hi) => seqs.clone(),
            _ => SeqList::new(),
        }
    }

    /// The pieces, in key order.
    pub fn pieces(&self) -> Vec<Piece> {
        self.map
            .read()
            .iter()
            .map(|(lo, (hi, seqs))| Piece { lo: lo.clone(), hi: hi.clone(), seqs: seqs.clone() })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(x: u8) -> Bytes {
        Bytes::copy_from_slice(&[x])
    }

    #[test]
    fn overlapping_nested_and_unbounded_inserts() {
        let b = RangeBuffer::default();
        b.insert(k(10), k(20), 1);
        b.insert(k(15), k(30), 2); // partial overlap
        b.insert(k(12), k(13), 3); // nested
        b.insert(k(40), Bytes::new(), 4); // to the end of the key space
        b.insert(k(50), k(50), 5); // empty: ignored
        assert_eq!(b.visible(&[9], u64::MAX), None);
        assert_eq!(b.visible(&[10], u64::MAX), Some(1));
        assert_eq!(b.visible(&[12], u64::MAX), Some(3));
        assert_eq!(b.visible(&[12], 2), Some(1), "older snapshot sees the older delete");
        assert_eq!(b.visible(&[16], u64::MAX), Some(2));
        assert_eq!(b.visible(&[16], 1), Some(1));
        assert_eq!(b.visible(&[29], 1), None);
        assert_eq!(b.visible(&[30], u64::MAX), None);
        assert_eq!(b.visible(&[255, 255, 255], u64::MAX), Some(4));
        assert_eq!(b.covering(&[12]).as_slice(), &[3, 1]);
        let pieces = b.pieces();
        assert!(pieces.windows(2).all(|w| w[0].hi <= w[1].lo));
    }
}
