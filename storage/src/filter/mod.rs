//! Range filters: does a file hold any key in `[lo, hi]`, answered from memory before the file
//! is opened.
//!
//! - `rosetta`: Rosetta (Luo et al., SIGMOD 2020), one per SST: a Bloom filter per binary
//!   prefix length of the key's time part, so a short range is decomposed into dyadic prefixes,
//!   each probed once and "doubted" down to the finest level. Built at flush and compaction,
//!   stored in the SST's filter block.
//! - `global`: GRF (Wang et al., SIGMOD 2024), adapted: one filter per engine version naming
//!   the runs (level-0 files, deeper levels) that may hold a range, probed once per scan
//!   instead of once per file. An option (`Options::global_range_filter`).
//!
//! Keys are split into a *head* (every byte but the last 8: for EbbDB rows the table and
//! series) and a *tail* (the last 8 bytes as a big-endian `u64`: the time). A range filter
//! answers for ranges inside one head, which is what a one-series time-range query is. The
//! tail is bucketed (`tail >> shift`), with the shift chosen from the range sizes the engine
//! saw, so a typical range spans at most 16 buckets (Rosetta's sweet spot); the
//! levels kept are the bucket and its `heights - 1` parents, plus one level of heads (a
//! series-existence filter).

mod alloc;
pub(crate) mod global;
pub(crate) mod rosetta;

#[cfg(test)]
mod global_tests;
#[cfg(test)]
mod tests;

/// How the range filters of new files are built.
#[derive(Debug, Clone, PartialEq)]
pub struct RangeFilterOptions {
    /// Length of the keys the filter covers (EbbDB rows: 20). Keys of other lengths are
    /// recorded by head only and make queries of their head answer "maybe".
    pub key_len: usize,
    /// Memory per key of the file, in bits, for the bucket levels (the head level adds
    /// 10 bits per distinct head).
    pub bits_per_key: f64,
    /// The range size (in tail units) assumed before the engine has seen short range scans;
    /// EbbDB's default is about 73 minutes of nanoseconds (`2^42`).
    pub default_range: u64,
    /// Buckets a typical range spans (rounded to a power of two; default 16). More buckets
    /// make a range's edges sharper but cost more probes, each a chance of a false positive;
    /// ranges of at most this many tail units get one bucket per tail value.
    pub range_buckets: u64,
}

impl Default for RangeFilterOptions {
    fn default() -> Self {
        RangeFilterOptions {
            key_len: 20,
            bits_per_key: 10.0,
            default_range: 1 << 42,
            range_buckets: 16,
        }
    }
}

/// The parameters of one filter build.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RangeFilterSpec {
    pub key_len: usize,
    /// Tail bits dropped: a bucket is `tail >> shift`.
    pub shift: u32,
    /// Bucket levels kept: heights `0..heights` (height 0 is the bucket itself).
    pub heights: u32,
    pub bits_per_key: f64,
    /// Typical range in buckets (weights the levels' memory).
    pub range_buckets: u64,
}

impl RangeFilterSpec {
    /// The spec for ranges of about `range` tail units.
    pub fn for_range(opts: &RangeFilterOptions, range: u64) -> RangeFilterSpec {
        let per = 63 - opts.range_buckets.clamp(1, 1 << 20).leading_zeros(); // log2, rounded down
        let shift = (64 - (range.max(1) - 1).leading_zeros()).saturating_sub(per).min(63);
        let range_buckets = (range >> shift).max(1);
        let heights = (64 - range_buckets.leading_zeros() + 2).min(64 - shift + 1);
        RangeFilterSpec {
            key_len: opts.key_len,
            shift,
            heights,
            bits_per_key: opts.bits_per_key,
            range_buckets,
        }
    }
}
