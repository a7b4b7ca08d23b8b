//! A Bloom filter over the keys of one memtable, so lookups of keys it does not hold (most lookups,
//! once the data outgrows the memtable) skip the skiplist search and its cache misses.

use std::sync::atomic::{AtomicU64, Ordering};

/// Probes per key.
const K: u32 = 6;
/// Words per block: every probe of a key falls in one 512-bit block (one or two cache lines),
/// so an insert or a lookup costs one cache miss instead of `K`.
const BLOCK: usize = 8;

/// A fixed-size, concurrently updated, blocked Bloom filter.
#[derive(Debug)]
pub(crate) struct MemFilter {
    words: Box<[AtomicU64]>,
}

impl MemFilter {
    /// A filter with one bit per 16 bytes of memtable capacity: about 11 bits per entry for
    /// 180-byte entries, degrading gracefully for smaller ones. 0 disables it.
    pub fn new(capacity_bytes: usize) -> Self {
        let words = (capacity_bytes / 16).div_ceil(64).next_multiple_of(BLOCK);
        MemFilter { words: (0..words).map(|_| AtomicU64::new(0)).collect() }
    }

    #[inline]
    fn positions(&self, hash: u64) -> impl Iterator<Item = (usize, u64)> + '_ {
        let blocks = (self.words.len() / BLOCK) as u64;
        // The block from the high half of the hash (multiply-shift range reduction), the bits
        // inside it from a remix of the whole hash.
        let base = (((hash >> 32) * blocks) >> 32) as usize * BLOCK;
        let bits = hash.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (0..K).map(move |i| {
            let bit = (bits >> (i * 9)) & 511;
            (base + (bit / 64) as usize, 1u64 << (bit % 64))
        })
    }

    /// Adds a key hash.
    pub fn insert(&self, hash: u64) {
        if self.words.is_empty() {
            return;
        }
        for (w, mask) in self.positions(hash) {
            // Relaxed suffices: the skiplist insert that follows publishes the entry, and a
            // reader that sees the entry's sequence number as visible synchronised with it.
            self.words[w].fetch_or(mask, Ordering::Relaxed);
        }
    }

    /// False only if the key was never inserted.
    pub fn may_contain(&self, hash: u64) -> bool {
        self.words.is_empty()
            || self
                .positions(hash)
                .all(|(w, mask)| self.words[w].load(Ordering::Relaxed) & mask != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_false_negatives() {
        let f = MemFilter::new(1 << 16);
        let h = |i: u64| crate::sst::bloom::key_hash(&i.to_be_bytes());
        for i in 0..300 {
            f.insert(h(i));
        }
        assert!((0..300).all(|i| f.may_contain(h(i))));
        let fp = (1000..11_000).filter(|&i| f.may_contain(h(i))).count();
        assert!(fp < 200, "{fp} false positives in 10000");
        assert!(MemFilter::new(0).may_contain(h(1)));
    }
}
