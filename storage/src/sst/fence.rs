//! In-memory fence pointers of one table, laid out for cache-friendly binary search.
//!
//! Tile first keys are searched through a contiguous array of their 8-byte big-endian prefixes;
//! only tiles whose prefix ties with the probe's are compared in full (keys are in one arena).

use super::TileMeta;

/// Fence pointers of the tiles of one table.
#[derive(Debug, Default)]
pub(crate) struct Fences {
    prefixes: Vec<u64>,
    first: KeyArena,
    last: KeyArena,
}

#[derive(Debug, Default)]
struct KeyArena {
    bytes: Vec<u8>,
    ends: Vec<u32>,
}

impl KeyArena {
    fn push(&mut self, k: &[u8]) {
        self.bytes.extend_from_slice(k);
        self.ends.push(self.bytes.len() as u32);
    }

    fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.bytes[start..self.ends[i] as usize]
    }
}

/// The first 8 bytes of `key`, big-endian, zero-padded: order-preserving for a prefix compare.
#[inline]
fn prefix(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(b)
}

impl Fences {
    /// Bytes held.
    pub fn memory_bytes(&self) -> usize {
        self.prefixes.len() * 8
            + self.first.bytes.len()
            + self.last.bytes.len()
            + (self.first.ends.len() + self.last.ends.len()) * 4
    }

    /// Builds the fences of `tiles` (in key order).
    pub fn new(tiles: &[TileMeta]) -> Self {
        let mut f = Fences::default();
        for t in tiles {
            f.prefixes.push(prefix(&t.first_key));
            f.first.push(&t.first_key);
            f.last.push(&t.last_key);
        }
        f
    }

    /// Index of the tile whose key range holds `key`, if any.
    #[inline]
    pub fn tile_for(&self, key: &[u8]) -> Option<usize> {
        let p = prefix(key);
        let lo = self.prefixes.partition_point(|&x| x < p);
        let ties = self.prefixes[lo..].partition_point(|&x| x == p);
        // Tiles before `lo` start below `key`; among the ties, compare full keys.
        let mut a = lo;
        let mut b = lo + ties;
        while a < b {
            let mid = (a + b) / 2;
            if self.first.get(mid) <= key {
                a = mid + 1;
            } else {
                b = mid;
            }
        }
        let t = a.checked_sub(1)?;
        (key <= self.last.get(t)).then_some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tile(first: &[u8], last: &[u8]) -> TileMeta {
        TileMeta {
            first_key: first.to_vec(),
            last_key: last.to_vec(),
            first_page: 0,
            pages: 1,
            filter_offset: 0,
            filter_len: 0,
        }
    }

    #[test]
    fn finds_tiles_with_shared_and_short_prefixes() {
        let tiles = vec![
            tile(b"a", b"abc"),
            tile(b"abcdefgh1", b"abcdefgh5"),
            tile(b"abcdefgh7", b"abcdefgh9"),
            tile(b"b", b"c"),
        ];
        let f = Fences::new(&tiles);
        let naive = |k: &[u8]| {
            let t = tiles.partition_point(|t| t.first_key.as_slice() <= k).checked_sub(1)?;
            (k <= tiles[t].last_key.as_slice()).then_some(t)
        };
        for k in [
            &b""[..],
            b"a",
            b"ab",
            b"abc",
            b"abcd",
            b"abcdefgh1",
            b"abcdefgh3",
            b"abcdefgh6",
            b"abcdefgh7",
            b"abcdefgh9",
            b"abcdefgh99",
            b"b",
            b"bb",
            b"c",
            b"d",
        ] {
            assert_eq!(f.tile_for(k), naive(k), "{:?}", String::from_utf8_lossy(k));
        }
    }
}
