//! EVE, the entry validity estimator: answers "may any range delete newer than this entry cover
//! its key?" from memory, with no false negatives, so most lookups of live keys skip the index.
//!
//! EVE is a chain of range-aware estimators (RAEs), each a Bloom filter over *cells* of a
//! virtual bit array. A key maps to an order-preserving coordinate (its first 16 bytes as a
//! big-endian integer, zero-padded); a range `[lo, hi)` is inserted as at most four aligned cells
//! of width `2^g`, for the smallest `g` that covers `[coord(lo), coord(hi)]` (inclusive when
//! truncating to 16 bytes can map keys below `hi` onto `coord(hi)`, exclusive otherwise). A query probes the key's cell
//! at every width `g` the RAE has used. When an RAE reaches its capacity the next one doubles it;
//! each RAE knows the largest sequence number it holds, so a query for an entry newer than an RAE
//! (and so than every older RAE) stops without probing.
//!
//! **Sequence sketch.** A Bloom filter cannot tell a key deleted by a range delete from a key
//! re-written after it: both are "covered", and the second kind is common (deleted ranges are
//! written again). Each RAE therefore also keeps a max-sketch of sequence numbers over coarser
//! cells (four filter cells wide, so a range touches at most two): each such cell raises two slots
//! of an array to the delete's sequence number (relative to the RAE's first one, saturating). The
//! smaller of a cell's two slots bounds from above the newest delete inserted there, so an entry
//! newer than that bound is live without touching the index, and there are still no false
//! negatives: collisions only raise the bound.

/// Cells a range is inserted as, at most.
const MAX_CELLS: u128 = 4;

/// Order-preserving coordinate of a key.
#[inline]
fn coord(key: &[u8]) -> u128 {
    let mut b = [0u8; 16];
    let n = key.len().min(16);
    b[..n].copy_from_slice(&key[..n]);
    u128::from_be_bytes(b)
}

#[inline]
fn cell(c: u128, g: u32) -> u128 {
    if g >= 128 {
        0
    } else {
        c >> g
    }
}

#[inline]
fn cell_hash(g: u32, cell: u128) -> u64 {
    let mut buf = [0u8; 17];
    buf[0] = g as u8;
    buf[1..].copy_from_slice(&cell.to_le_bytes());
    xxhash_rust::xxh3::xxh3_64(&buf)
}

/// One range-aware estimator.
#[derive(Debug, Clone)]
struct Rae {
    words: Vec<u64>,
    hashes: u32,
    capacity: usize,
    count: usize,
    max_seq: u64,
    widths: [u64; 3],
    /// Max-sketch of sequence numbers: `0` empty, else `seq - base + 1` (saturating).
    seqs: Vec<u32>,
    /// Sequence number of the first delete inserted.
    base: u64,
}

/// Sketch slots a sketch cell raises.
const SEQ_SLOTS_PER_CELL: usize = 2;

/// Sketch cells are `2^SKETCH_SHIFT` times wider than filter cells, so a range raises at most
/// two of them (it is at most `MAX_CELLS` filter cells wide).
const SKETCH_SHIFT: u32 = 2;

impl Rae {
    fn new(capacity: usize, bits_per_record: u32, seq_slots_per_record: u32) -> Self {
        let bits = (capacity * bits_per_record as usize).max(64);
        // About MAX_CELLS positions per record.
        let hashes = ((bits_per_record as f64 / MAX_CELLS as f64) * std::f64::consts::LN_2)
            .round()
            .clamp(1.0, 16.0) as u32;
        Rae {
            words: vec![0; bits.div_ceil(64)],
            hashes,
            capacity,
            count: 0,
            max_seq: 0,
            widths: [0; 3],
            seqs: vec![0; capacity * seq_slots_per_record as usize],
            base: 0,
        }
    }

    fn seq_slots(&self, h: u64) -> [usize; SEQ_SLOTS_PER_CELL] {
        let n = self.seqs.len() as u64;
        let h = h.rotate_left(32) ^ 0x9e37_79b9_7f4a_7c15;
        [(h % n) as usize, ((h >> 32).wrapping_mul(0xff51_afd7_ed55_8ccd) % n) as usize]
    }

    /// Upper bound of the newest delete inserted at the cell hashed `h` (`u64::MAX`: unknown).
    fn newest_at(&self, h: u64) -> u64 {
        if self.seqs.is_empty() {
            return u64::MAX;
        }
        let q = self.seq_slots(h).iter().map(|&i| self.seqs[i]).min().unwrap_or(u32::MAX);
        match q {
            0 => 0, // never raised: nothing inserted at this cell (a Bloom false positive)
            u32::MAX => u64::MAX,
            q => self.base + u64::from(q) - 1,
        }
    }

    fn positions(&self, h: u64) -> impl Iterator<Item = (usize, u64)> + '_ {
        let bits = self.words.len() as u64 * 64;
        let (mut h1, h2) = (h, h.rotate_left(27) | 1);
        (0..self.hashes).map(move |_| {
            let b = h1 % bits;
            h1 = h1.wrapping_add(h2);
            ((b / 64) as usize, 1u64 << (b % 64))
        })
    }

    fn set(&mut self, h: u64) {
        let pos: Vec<_> = self.positions(h).collect();
        for (w, m) in pos {
            self.words[w] |= m;
        }
    }

    fn test(&self, h: u64) -> bool {
        self.positions(h).all(|(w, m)| self.words[w] & m != 0)
    }

    fn insert(&mut self, lo: &[u8], hi: &[u8], seq: u64) {
        let a = coord(lo);
        let b = match hi.len() {
            0 => u128::MAX,
            // A key below such an end maps strictly below it (only keys equal to `hi` up to
            // trailing zero bytes can share its coordinate), so the end is exclusive.
            1..=16 if hi[hi.len() - 1] != 0 => coord(hi).saturating_sub(1),
            _ => coord(hi),
        };
        let b = b.max(a);
        let mut g = 0u32;
        while g < 128 && cell(b, g) - cell(a, g) >= MAX_CELLS {
            g += 1;
        }
        self.widths[(g / 64) as usize] |= 1 << (g % 64);
        let (ca, cb) = (cell(a, g), cell(b, g));
        if self.count == 0 {
            self.base = seq;
        }
        let mut c = ca;
        loop {
            self.set(cell_hash(g, c));
            if c == cb {
                break;
            }
            c += 1;
        }
        if !self.seqs.is_empty() {
            let q = u32::try_from(seq.saturating_sub(self.base) + 1).unwrap_or(u32::MAX);
            let g2 = g + SKETCH_SHIFT;
            let (ca, cb) = (cell(a, g2), cell(b, g2));
            let mut c = ca;
            loop {
                for i in self.seq_slots(cell_hash(g2, c)) {
                    self.seqs[i] = self.seqs[i].max(q);
                }
                if c == cb {
                    break;
                }
                c += 1;
            }
        }
        self.count += 1;
        self.max_seq = self.max_seq.max(seq);
    }

    /// False only if no delete in this RAE newer than `seq` covers `key`.
    fn may_cover_newer(&self, key: &[u8], seq: u64) -> bool {
        let k = coord(key);
        for (i, word) in self.widths.iter().enumerate() {
            let mut w = *word;
            while w != 0 {
                let g = i as u32 * 64 + w.trailing_zeros();
                w &= w - 1;
                if self.test(cell_hash(g, cell(k, g)))
                    && self.newest_at(cell_hash(g + SKETCH_SHIFT, cell(k, g + SKETCH_SHIFT))) > seq
                {
                    return true;
                }
            }
        }
        false
    }
}

/// The chain of RAEs.
#[derive(Debug, Clone)]
pub(crate) struct Eve {
    chain: Vec<Rae>,
    initial_capacity: usize,
    bits_per_record: u32,
    seq_slots_per_record: u32,
    generation: u64,
}

impl Eve {
    /// An empty chain whose first RAE holds `initial_capacity` records, with `bits_per_record`
    /// Bloom bits and `seq_slots_per_record` sequence-sketch slots (4 bytes each; 0 disables the
    /// sketch) per record.
    pub fn new(initial_capacity: usize, bits_per_record: u32, seq_slots_per_record: u32) -> Self {
        Eve {
            chain: Vec::new(),
            initial_capacity: initial_capacity.max(1),
            bits_per_record,
            seq_slots_per_record,
            generation: 0,
        }
    }

    /// Records the range delete `[lo, hi) @ seq`; `seq` exceeds every earlier one.
    pub fn insert(&mut self, lo: &[u8], hi: &[u8], seq: u64) {
        let full = self.chain.last().is_none_or(|r| r.count >= r.capacity);
        if full {
            let cap = self.chain.last().map_or(self.initial_capacity, |r| r.capacity * 2);
            self.chain.push(Rae::new(cap, self.bits_per_record, self.seq_slots_per_record));
        }
        if let Some(r) = self.chain.last_mut() {
            r.insert(lo, hi, seq);
        }
    }

    /// False only if no range delete newer than `seq` covers `key`.
    pub fn may_be_deleted(&self, key: &[u8], seq: u64) -> bool {
        for r in self.chain.iter().rev() {
            if seq >= r.max_seq {
                return false;
            }
            if r.may_cover_newer(key, seq) {
                return true;
            }
        }
        false
    }

    /// Drops RAEs holding only deletes at or below the GC watermark.
    ///
    /// Readers that captured an older [`Eve::generation`] may hold files from before those deletes
    /// were applied and must not trust the answers any more.
    pub fn gc(&mut self, watermark: u64) {
        let keep =
            self.chain.iter().position(|r| r.max_seq > watermark).unwrap_or(self.chain.len());
        if keep > 0 {
            self.chain.drain(..keep);
            self.generation += 1;
        }
    }

    /// Bumped whenever [`Eve::gc`] drops anything.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Number of RAEs.
    pub fn len(&self) -> usize {
        self.chain.len()
    }

    /// Bytes of filter memory.
    pub fn memory_bytes(&self) -> usize {
        self.chain.iter().map(|r| r.words.len() * 8 + r.seqs.len() * 4).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn id(x: u64) -> Vec<u8> {
        let mut k = x.to_be_bytes().to_vec();
        k.extend_from_slice(b"00000000");
        k
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

        /// No false negatives across rollovers, key lengths and unbounded ranges.
        #[test]
        fn no_false_negatives(
            ranges in prop::collection::vec((any::<u16>(), 1u16..300, prop::bool::weighted(0.05)), 1..200),
            probes in prop::collection::vec((any::<u16>(), 0u64..2100), 50),
        ) {
            let mut eve = Eve::new(7, 10, 2);
            let mut recs = Vec::new();
            for (i, (lo, len, unbounded)) in ranges.iter().enumerate() {
                let seq = 10 + i as u64 * 10;
                let lo_k = id(*lo as u64);
                let hi_k = if *unbounded { Vec::new() } else { id(*lo as u64 + *len as u64) };
                eve.insert(&lo_k, &hi_k, seq);
                recs.push((lo_k, hi_k, seq));
            }
            prop_assert!(eve.len() > 1 || ranges.len() <= 7);
            for (p, q) in probes {
                let k = id(p as u64);
                let mut k_long = k.clone();
                k_long.extend_from_slice(b"tail-beyond-16-bytes");
                for key in [&k, &k_long] {
                    for (lo, hi, s) in &recs {
                        let covered = lo.as_slice() <= key.as_slice()
                            && (hi.is_empty() || key.as_slice() < hi.as_slice());
                        if covered {
                            prop_assert!(eve.may_be_deleted(key, s - 1), "false negative");
                        }
                    }
                    let newer = recs.iter().any(|(lo, hi, s)| {
                        *s > q && lo.as_slice() <= key.as_slice()
                            && (hi.is_empty() || key.as_slice() < hi.as_slice())
                    });
                    prop_assert!(!newer || eve.may_be_deleted(key, q), "false negative at {q}");
                }
            }
        }
    }

    #[test]
    fn newer_entries_skip_and_false_positive_rate_is_low() {
        let mut eve = Eve::new(1000, 16, 4);
        for i in 0..1000u64 {
            eve.insert(&id(i * 1000), &id(i * 1000 + 16), 100 + i);
        }
        assert!(!eve.may_be_deleted(&id(5000), 2000), "entry newer than every delete");
        assert!(eve.may_be_deleted(&id(5000), 10));
        let fp = (0..100_000u64)
            .map(|i| i * 10 + 500)
            .filter(|&x| x % 1000 >= 48) // far from every range and its cells
            .filter(|&x| eve.may_be_deleted(&id(x), 0))
            .count();
        assert!(fp < 6000, "{fp} false positives of about 95000");
        eve.gc(1099);
        assert_eq!(eve.len(), 0);
    }

    /// Keys written again after the range delete that covered them are answered "live" by the
    /// sequence sketch (a plain Bloom filter would say "maybe" for every one).
    #[test]
    fn rewritten_keys_skip_with_the_sequence_sketch() {
        let (n, step) = (10_000u64, 1000u64);
        let mut with = Eve::new(n as usize, 16, 4);
        let mut without = Eve::new(n as usize, 16, 0);
        for i in 0..n {
            let seq = 100 + i * step;
            for eve in [&mut with, &mut without] {
                eve.insert(&id(i * 64), &id(i * 64 + 16), seq);
            }
        }
        // Key 3 of each range, rewritten half a step after its delete: later deletes exist, so
        // the newest RAE's largest sequence number alone cannot rule them out.
        let rewritten = |eve: &Eve| {
            (0..n)
                .filter(|&i| eve.may_be_deleted(&id(i * 64 + 3), 100 + i * step + step / 2))
                .count()
        };
        let (a, b) = (rewritten(&with), rewritten(&without));
        assert!(b as u64 > n * 9 / 10, "without the sketch nearly all say maybe: {b}");
        assert!((a as u64) < n / 5, "with the sketch most are live: {a} of {n}");
        // Entries older than their covering delete are still reported.
        assert!((0..n).all(|i| with.may_be_deleted(&id(i * 64 + 3), 99 + i * step)));
    }
}
