//! Rosetta: one range filter per SST (see the [module docs](super)).
//!
//! Layout (little-endian), stored in the SST's filter block:
//!
//! ```text
//! 'R' | version 1 | key_len u16 | shift u8 | heights u8 | flags u8 | 0
//! head level:          bits u64 | k u8 | bits/8 bytes
//! bucket level j = 0.. bits u64 | k u8 | bits/8 bytes     (heights of them)
//! ```
//!
//! The head level holds `(HEAD, head)` for every head of a `key_len` key and `(FOREIGN, head)`
//! for the first `key_len - 8` bytes of every key of another length (flag 1: a key of another
//! length exists and heads are empty). Bucket level `j` holds `(head, bucket >> j)`. A level of
//! 0 bits answers "maybe".

use std::ops::Bound;

use bytes::Bytes;

use super::alloc::allocate;
use super::global::one_head;
use super::RangeFilterSpec;
use crate::coding::u64_at;

/// Filter version: 2 uses cache-line blocked Bloom filters. Version 1 filters (plain Bloom
/// filters, never in a release) are ignored: their files answer "maybe".
const VERSION: u8 = 2;
const HEADER_LEN: usize = 8;
const FLAG_FOREIGN_ANY: u8 = 1;
const TAG_HEAD: u64 = 0x9e37_79b9_7f4a_7c15;
const TAG_FOREIGN: u64 = 0xc2b2_ae3d_27d4_eb4f;
/// Bloom probes one query may spend before it answers "maybe".
const PROBE_BUDGET: u32 = 512;
/// Bits per distinct head in the head level.
const HEAD_BITS: u64 = 10;

#[inline]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[inline]
pub(crate) fn head_hash(head: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(head)
}

#[inline]
fn prefix_hash(head: u64, height: u32, value: u64) -> u64 {
    mix(head ^ mix(value.wrapping_add(u64::from(height + 1).wrapping_mul(TAG_HEAD))))
}

/// The last 8 bytes of a key (at least 8 bytes long) as a big-endian integer: the time.
pub(crate) fn tail(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&key[key.len() - 8..]);
    u64::from_be_bytes(b)
}

/// Bits of one Bloom block: a probe touches one cache line.
const BLOCK_BITS: u64 = 512;

/// The k bit positions of hash `h` in an array of `bits` bits (a multiple of 512): one
/// 512-bit block chosen by `h`, k bits inside it by double hashing of a second hash.
#[inline]
fn positions(h: u64, bits: u64, k: u32) -> impl Iterator<Item = u64> {
    let block = ((u128::from(h) * u128::from(bits / BLOCK_BITS)) >> 64) as u64 * BLOCK_BITS;
    let g = mix(h ^ 0x5851_f42d_4c95_7f2d);
    let g2 = g.rotate_left(32) | 1;
    (0..u64::from(k)).map(move |i| block + (g.wrapping_add(i.wrapping_mul(g2)) >> 55))
}

/// Collects the keys of one SST (in key order) and encodes its filter.
#[derive(Debug)]
pub(crate) struct RosettaBuilder {
    spec: RangeFilterSpec,
    head_len: usize,
    last_key: Vec<u8>,
    last_head: Option<(Vec<u8>, u64)>,
    heads: Vec<u64>,
    foreign: Vec<u64>,
    foreign_any: bool,
    /// Distinct `(head hash, bucket)` in key order.
    entries: Vec<(u64, u64)>,
    keys: u64,
}

impl RosettaBuilder {
    pub fn new(spec: RangeFilterSpec) -> Option<Self> {
        if spec.key_len < 8 || spec.key_len > usize::from(u16::MAX) || spec.shift >= 64 {
            return None;
        }
        Some(RosettaBuilder {
            spec,
            head_len: spec.key_len - 8,
            last_key: Vec::new(),
            last_head: None,
            heads: Vec::new(),
            foreign: Vec::new(),
            foreign_any: false,
            entries: Vec::new(),
            keys: 0,
        })
    }

    /// Adds a key; keys arrive in order, versions of one key repeat it.
    pub fn add(&mut self, key: &[u8]) {
        if key == self.last_key.as_slice() {
            return;
        }
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        if key.len() != self.spec.key_len {
            if key.len() >= self.head_len {
                if self.head_len == 0 {
                    self.foreign_any = true;
                } else {
                    let h = head_hash(&key[..self.head_len]);
                    if self.foreign.last() != Some(&h) {
                        self.foreign.push(h);
                    }
                }
            }
            return;
        }
        self.keys += 1;
        let head = &key[..self.head_len];
        let hh = match &self.last_head {
            Some((h, hh)) if h.as_slice() == head => *hh,
            _ => {
                let hh = head_hash(head);
                self.heads.push(hh);
                self.last_head = Some((head.to_vec(), hh));
                hh
            }
        };
        let e = (hh, tail(key) >> self.spec.shift);
        if self.entries.last() != Some(&e) {
            self.entries.push(e);
        }
    }

    /// Encodes the filter; `None` if no key was added.
    pub fn finish(self) -> Option<Vec<u8>> {
        if self.keys == 0 && self.foreign.is_empty() && !self.foreign_any {
            return None;
        }
        let heights = self.spec.heights;
        // Distinct prefixes per height (entries are in key order, so equal prefixes are adjacent).
        let mut n = vec![0u64; heights as usize];
        for (j, nj) in n.iter_mut().enumerate() {
            let mut prev: Option<(u64, u64)> = None;
            for &(h, b) in &self.entries {
                let p = (h, b >> j);
                if prev != Some(p) {
                    *nj += 1;
                    prev = Some(p);
                }
            }
        }
        let budget = self.spec.bits_per_key * self.keys as f64;
        let sizes = allocate(&n, self.spec.range_buckets, budget, f64::from(PROBE_BUDGET) / 4.0);

        let mut out = Vec::new();
        out.extend_from_slice(&[b'R', VERSION]);
        out.extend_from_slice(&(self.spec.key_len as u16).to_le_bytes());
        out.push(self.spec.shift as u8);
        out.push(heights as u8);
        out.push(if self.foreign_any { FLAG_FOREIGN_ANY } else { 0 });
        out.push(0);
        let head_n = (self.heads.len() + self.foreign.len()) as u64;
        let head_bits =
            if head_n == 0 { 0 } else { (head_n * HEAD_BITS).next_multiple_of(BLOCK_BITS) };
        let head_hashes = self
            .heads
            .iter()
            .map(|&h| mix(h ^ TAG_HEAD))
            .chain(self.foreign.iter().map(|&h| mix(h ^ TAG_FOREIGN)));
        write_level(&mut out, head_bits, 7, head_hashes);
        for (j, size) in sizes.iter().enumerate() {
            let j = j as u32;
            let mut prev: Option<(u64, u64)> = None;
            let hashes = self.entries.iter().filter_map(|&(h, b)| {
                let p = (h, b >> j);
                (prev != Some(p)).then(|| {
                    prev = Some(p);
                    prefix_hash(h, j, b >> j)
                })
            });
            write_level(&mut out, size.bits, size.k, hashes);
        }
        Some(out)
    }
}

fn write_level(out: &mut Vec<u8>, bits: u64, k: u32, hashes: impl Iterator<Item = u64>) {
    out.extend_from_slice(&bits.to_le_bytes());
    out.push(k as u8);
    let start = out.len();
    out.resize(start + (bits / 8) as usize, 0);
    if bits == 0 {
        return;
    }
    let arr = &mut out[start..];
    for h in hashes {
        for bit in positions(h, bits, k) {
            arr[(bit / 8) as usize] |= 1 << (bit % 8);
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Level {
    off: usize,
    bits: u64,
    k: u32,
}

/// A decoded Rosetta filter (a view of the SST's filter block).
#[derive(Debug, Clone)]
pub(crate) struct Rosetta {
    data: Bytes,
    key_len: usize,
    shift: u32,
    foreign_any: bool,
    head: Level,
    levels: Vec<Level>,
}

/// Why a filter block does not decode as a [`Rosetta`] filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DecodeError {
    /// The block does not start with a range filter's header.
    #[error("not a range filter")]
    NotAFilter,
    /// A filter of an older version: the table is read without it.
    #[error("range filter of an older version")]
    OldVersion,
    /// A version this build does not know.
    #[error("range filter version {0} unknown")]
    UnknownVersion(u8),
    /// The key length, shift or number of levels is out of range.
    #[error("range filter header out of range")]
    HeaderOutOfRange,
    /// The block ends inside a level's header.
    #[error("range filter truncated")]
    Truncated,
    /// A level's size does not fit in memory.
    #[error("range filter level too large")]
    LevelTooLarge,
    /// A level's size or number of probes is invalid.
    #[error("range filter level malformed")]
    LevelMalformed,
    /// A level's bits reach past the block.
    #[error("range filter level out of bounds")]
    LevelOutOfBounds,
}

impl Rosetta {
    /// Decodes and bounds-checks a filter.
    pub fn decode(data: Bytes) -> Result<Rosetta, DecodeError> {
        if data.len() < HEADER_LEN || data[0] != b'R' {
            return Err(DecodeError::NotAFilter);
        }
        if data[1] == 1 {
            return Err(DecodeError::OldVersion);
        }
        if data[1] != VERSION {
            return Err(DecodeError::UnknownVersion(data[1]));
        }
        let key_len = usize::from(u16::from_le_bytes([data[2], data[3]]));
        let (shift, heights, flags) = (u32::from(data[4]), u32::from(data[5]), data[6]);
        if key_len < 8 || shift >= 64 || heights > 65 {
            return Err(DecodeError::HeaderOutOfRange);
        }
        let mut at = HEADER_LEN;
        let mut level = || -> Result<Level, DecodeError> {
            let head = data.get(at..at + 9).ok_or(DecodeError::Truncated)?;
            let bits = u64_at(head, 0).ok_or(DecodeError::Truncated)?;
            let k = u32::from(head[8]);
            let bytes = usize::try_from(bits / 8).map_err(|_| DecodeError::LevelTooLarge)?;
            if bits % BLOCK_BITS != 0 || (bits > 0 && !(1..=30).contains(&k)) {
                return Err(DecodeError::LevelMalformed);
            }
            let off = at + 9;
            if off.checked_add(bytes).is_none_or(|end| end > data.len()) {
                return Err(DecodeError::LevelOutOfBounds);
            }
            at = off + bytes;
            Ok(Level { off, bits, k })
        };
        let head = level()?;
        let levels = (0..heights).map(|_| level()).collect::<Result<Vec<_>, _>>()?;
        Ok(Rosetta {
            data,
            key_len,
            shift,
            foreign_any: flags & FLAG_FOREIGN_ANY != 0,
            head,
            levels,
        })
    }

    #[inline]
    fn probe(&self, l: Level, h: u64) -> bool {
        if l.bits == 0 {
            return true;
        }
        let arr = &self.data[l.off..l.off + (l.bits / 8) as usize];
        positions(h, l.bits, l.k).all(|bit| arr[(bit / 8) as usize] & (1 << (bit % 8)) != 0)
    }

    /// True if the filter can tell anything about `[lo, hi]`: both bounds are keys of the
    /// filter's length with one head.
    pub fn answers(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> bool {
        one_head(self.key_len, lo, hi).is_some()
    }

    /// False only if no key of the file lies between `lo` and `hi`. Answers "maybe" (true) for
    /// ranges that do not lie inside one head, and when the probe budget runs out.
    pub fn may_overlap(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> bool {
        let Some(range) = one_head(self.key_len, lo, hi) else { return true };
        let Some((head, a, b)) = range else { return false };
        // Keys of other lengths between the bounds share the head: the foreign entries.
        if self.foreign_any {
            return true;
        }
        let hh = head_hash(head);
        if !head.is_empty() {
            if self.probe(self.head, mix(hh ^ TAG_FOREIGN)) {
                return true;
            }
            if !self.probe(self.head, mix(hh ^ TAG_HEAD)) {
                return false;
            }
        }
        let mut budget = PROBE_BUDGET;
        let top = self.levels.len() as u32; // heights 0..top are stored
        if top == 0 {
            return true;
        }
        let (mut lo_b, hi_b) = (u128::from(a >> self.shift), u128::from(b >> self.shift));
        while lo_b <= hi_b {
            // The largest aligned block starting at lo_b inside [lo_b, hi_b].
            let align = if lo_b == 0 { 128 } else { lo_b.trailing_zeros() };
            let fit = 127 - (hi_b - lo_b + 1).leading_zeros();
            let j = align.min(fit);
            // Blocks above the stored heights are probed as their pieces at the top height.
            let jj = j.min(top - 1);
            let pieces = 1u128 << (j - jj);
            if pieces > u128::from(budget) {
                return true;
            }
            for i in 0..pieces {
                let v = ((lo_b >> jj) + i) as u64;
                if self.doubt(hh, jj, v, &mut budget) {
                    return true;
                }
            }
            lo_b += 1u128 << j;
        }
        false
    }

    /// True if prefix `v` at height `j` may have a key under it (Algorithm 2's `Doubt`).
    fn doubt(&self, hh: u64, j: u32, v: u64, budget: &mut u32) -> bool {
        if *budget == 0 {
            return true;
        }
        *budget -= 1;
        if !self.probe(self.levels[j as usize], prefix_hash(hh, j, v)) {
            return false;
        }
        if j == 0 {
            return true;
        }
        self.doubt(hh, j - 1, v << 1, budget) || self.doubt(hh, j - 1, (v << 1) | 1, budget)
    }
}
