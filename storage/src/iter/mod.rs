//! Cursors over internal entries and the merged, snapshot-filtered iterator users see.
//!
//! Internal order is key ascending, then sequence number descending, so the first entry of a key
//! is its newest version.

mod level;
mod merge;
mod user;

use bytes::Bytes;

pub(crate) use level::LevelCursor;
pub(crate) use merge::MergeCursor;
pub use user::EngineIter;

use crate::batch::EntryKind;
use crate::Result;

/// A cursor over internal entries in internal order.
pub(crate) trait EntryCursor: Send {
    /// Positions at the first entry whose key is `>= target`.
    fn seek(&mut self, target: &[u8]) -> Result<()>;
    /// Advances to the next entry.
    fn next(&mut self) -> Result<()>;
    /// True while positioned on an entry.
    fn valid(&self) -> bool;
    /// Key of the current entry.
    fn key(&self) -> &[u8];
    /// Sequence number of the current entry.
    fn seq(&self) -> u64;
    /// Kind of the current entry.
    fn kind(&self) -> EntryKind;
    /// Value of the current entry (empty for tombstones).
    fn value(&self) -> Bytes;
    /// Value of the current entry, borrowed until the cursor moves.
    fn value_ref(&self) -> &[u8];
    /// Key of the current entry as shared bytes.
    fn key_bytes(&self) -> Bytes {
        Bytes::copy_from_slice(self.key())
    }
}

/// Compares two internal entries: key ascending, then sequence number descending.
#[inline]
pub(crate) fn internal_cmp(ak: &[u8], aseq: u64, bk: &[u8], bseq: u64) -> std::cmp::Ordering {
    key_cmp(ak, bk).then(bseq.cmp(&aseq))
}

/// Byte-wise (lexicographic) order of two keys, as `a.cmp(b)`, eight bytes per step: keys are
/// short (a row key is 20 bytes), and a call to `memcmp` per comparison cost more than the
/// comparison in skiplist searches and merges.
#[inline]
pub(crate) fn key_cmp(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let n = a.len().min(b.len());
    let (mut ac, mut bc) = (a[..n].chunks_exact(8), b[..n].chunks_exact(8));
    for (x, y) in ac.by_ref().zip(bc.by_ref()) {
        let (x, y) = (u64::from_be_bytes(word(x)), u64::from_be_bytes(word(y)));
        if x != y {
            return x.cmp(&y);
        }
    }
    for (x, y) in ac.remainder().iter().zip(bc.remainder()) {
        if x != y {
            return x.cmp(y);
        }
    }
    a.len().cmp(&b.len())
}

/// An eight-byte chunk as an array (`chunks_exact(8)` yields only those).
#[inline]
fn word(c: &[u8]) -> [u8; 8] {
    let mut w = [0u8; 8];
    w.copy_from_slice(c);
    w
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        /// `key_cmp` orders keys exactly as slices order.
        #[test]
        fn key_cmp_is_slice_order(
            a in proptest::collection::vec(0u8..4, 0..40),
            b in proptest::collection::vec(0u8..4, 0..40),
            shared in 0usize..40,
        ) {
            // Keys sharing a prefix (as row keys of one table or series do) often.
            let mut b2 = a[..shared.min(a.len())].to_vec();
            b2.extend_from_slice(&b);
            prop_assert_eq!(super::key_cmp(&a, &b), a.as_slice().cmp(b.as_slice()));
            prop_assert_eq!(super::key_cmp(&a, &b2), a.as_slice().cmp(b2.as_slice()));
            prop_assert_eq!(super::key_cmp(&b2, &a), b2.as_slice().cmp(a.as_slice()));
            prop_assert_eq!(super::key_cmp(&a, &a), std::cmp::Ordering::Equal);
        }
    }
}
