//! An active time-window delete.

use crate::sst::PageMeta;

/// A time-window delete: entries with delete key in `[t_lo, t_hi)`, sort key in `[lo, hi)` (empty
/// bounds: unbounded) and sequence number below `seq`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeWindow {
    /// Sequence number of the delete.
    pub seq: u64,
    /// Inclusive lower delete key.
    pub t_lo: u64,
    /// Exclusive upper delete key.
    pub t_hi: u64,
    /// Inclusive lower sort key (empty: unbounded).
    pub lo: Vec<u8>,
    /// Exclusive upper sort key (empty: unbounded).
    pub hi: Vec<u8>,
}

impl TimeWindow {
    /// True if the key range holds `key`.
    pub fn holds_key(&self, key: &[u8]) -> bool {
        key >= self.lo.as_slice() && (self.hi.is_empty() || key < self.hi.as_slice())
    }

    /// True if the window covers an entry with this key and delete key (any older version).
    pub fn covers(&self, key: &[u8], dkey: u64) -> bool {
        (self.t_lo..self.t_hi).contains(&dkey) && self.holds_key(key)
    }

    /// True if a reader at `t` must not see the version `seq` of `key` (delete key `dkey`).
    pub fn hides(&self, key: &[u8], dkey: u64, seq: u64, t: u64) -> bool {
        self.seq <= t && seq < self.seq && self.covers(key, dkey)
    }

    /// True if no entry of the page can be covered.
    pub(crate) fn misses_page(&self, p: &PageMeta) -> bool {
        p.max_dkey < self.t_lo
            || p.min_dkey >= self.t_hi
            || p.max_key.as_slice() < self.lo.as_slice()
            || (!self.hi.is_empty() && p.min_key.as_slice() >= self.hi.as_slice())
    }

    /// True if every entry of the page is covered (given every entry is older than the delete).
    pub(crate) fn contains_page(&self, p: &PageMeta) -> bool {
        p.min_dkey >= self.t_lo
            && p.max_dkey < self.t_hi
            && self.holds_key(&p.min_key)
            && self.holds_key(&p.max_key)
    }
}
