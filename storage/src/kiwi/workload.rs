//! The operations the KiWi+ cost model weighs, counted by the engine per epoch, and the layout
//! they give.

use std::sync::atomic::{AtomicU64, Ordering};

use super::tuning::{tile_pages, WorkloadMix};
use crate::filter::rosetta::tail;
use crate::Options;

/// Operation counts of one epoch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkloadCounts {
    /// Point lookups that found a live value.
    pub lookups: u64,
    /// Point lookups that found nothing.
    pub empty_lookups: u64,
    /// Range scans inside one series: both bounds share everything but the trailing 8 bytes
    /// (the time), as `WHERE host = x AND time in [a, b)` does.
    pub short_scans: u64,
    /// Every other range scan.
    pub long_scans: u64,
    /// Time-window deletes, retention purges included.
    pub window_deletes: u64,
}

impl WorkloadCounts {
    /// The counts as the cost model's frequencies.
    pub fn mix(&self) -> WorkloadMix {
        WorkloadMix {
            empty_lookups: self.empty_lookups as f64,
            lookups: self.lookups as f64,
            short_scans: self.short_scans as f64,
            window_deletes: self.window_deletes as f64,
        }
    }
}

/// Live counters (relaxed atomics on the read path).
#[derive(Debug)]
pub(crate) struct WorkloadCounters {
    lookups: AtomicU64,
    empty_lookups: AtomicU64,
    short_scans: AtomicU64,
    long_scans: AtomicU64,
    window_deletes: AtomicU64,
    /// Short scans by the bit length of their time span (since the engine opened).
    spans: [AtomicU64; 65],
}

impl Default for WorkloadCounters {
    fn default() -> Self {
        WorkloadCounters {
            lookups: AtomicU64::new(0),
            empty_lookups: AtomicU64::new(0),
            short_scans: AtomicU64::new(0),
            long_scans: AtomicU64::new(0),
            window_deletes: AtomicU64::new(0),
            spans: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl WorkloadCounters {
    pub fn lookup(&self, found: bool) {
        let c = if found { &self.lookups } else { &self.empty_lookups };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a scan from its bounds (`None`: unbounded); true if it is short.
    pub fn scan(&self, lo: Option<&[u8]>, hi: Option<&[u8]>) -> bool {
        let (Some(l), Some(h), true) = (lo, hi, is_short(lo, hi)) else {
            self.long_scans.fetch_add(1, Ordering::Relaxed);
            return false;
        };
        self.short_scans.fetch_add(1, Ordering::Relaxed);
        let span = tail(h).saturating_sub(tail(l));
        self.spans[(64 - span.leading_zeros()) as usize].fetch_add(1, Ordering::Relaxed);
        true
    }

    /// The span (in tail units) nine in ten short scans stayed within, if any were counted.
    pub fn typical_span(&self) -> Option<u64> {
        let counts: Vec<u64> = self.spans.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let mut seen = 0;
        for (bits, c) in counts.iter().enumerate() {
            seen += c;
            if seen * 10 >= total * 9 {
                return Some(if bits == 0 { 1 } else { u64::MAX >> (64 - bits) });
            }
        }
        Some(u64::MAX)
    }

    pub fn window_delete(&self) {
        self.window_deletes.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts so far, without resetting them.
    pub fn peek(&self) -> WorkloadCounts {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        WorkloadCounts {
            lookups: l(&self.lookups),
            empty_lookups: l(&self.empty_lookups),
            short_scans: l(&self.short_scans),
            long_scans: l(&self.long_scans),
            window_deletes: l(&self.window_deletes),
        }
    }

    /// The counts so far, resetting them (the end of an epoch).
    pub fn take(&self) -> WorkloadCounts {
        let t = |c: &AtomicU64| c.swap(0, Ordering::Relaxed);
        WorkloadCounts {
            lookups: t(&self.lookups),
            empty_lookups: t(&self.empty_lookups),
            short_scans: t(&self.short_scans),
            long_scans: t(&self.long_scans),
            window_deletes: t(&self.window_deletes),
        }
    }
}

/// True for a scan inside one series: both bounds present, of one length over 8 bytes, equal
/// except in the trailing 8 (time) bytes.
pub(crate) fn is_short(lo: Option<&[u8]>, hi: Option<&[u8]>) -> bool {
    match (lo, hi) {
        (Some(lo), Some(hi)) => {
            lo.len() == hi.len() && lo.len() > 8 && lo[..lo.len() - 8] == hi[..hi.len() - 8]
        }
        _ => false,
    }
}

/// Tile sizes per level (level 0 first) for `mix` under `opts`: level 0 keeps h = 1 (flushed
/// files are compacted soon), level `i >= 1` takes the cost model's level `i`.
pub fn layout_for(opts: &Options, mix: &WorkloadMix) -> Vec<usize> {
    let levels = opts.num_levels.max(2) - 1;
    let model = tile_pages(mix, levels, opts.size_ratio, opts.pages_per_file(), opts.bloom_fpr());
    std::iter::once(1).chain(model).collect()
}

/// The per-epoch mix the layout follows, after `epochs` more epochs counted `counted`: the
/// newest counts weigh as much as all before them.
pub(crate) fn smooth(
    prev: Option<WorkloadMix>,
    counted: &WorkloadCounts,
    epochs: u64,
    retention: bool,
) -> WorkloadMix {
    let per = counted.mix();
    let k = epochs.max(1) as f64;
    let mut now = WorkloadMix {
        empty_lookups: per.empty_lookups / k,
        lookups: per.lookups / k,
        short_scans: per.short_scans / k,
        window_deletes: per.window_deletes / k,
    };
    // A retention rule purges every epoch, by time, whether or not a purge ran in this one.
    if retention {
        now.window_deletes = now.window_deletes.max(1.0);
    }
    match prev {
        None => now,
        Some(p) => WorkloadMix {
            empty_lookups: (p.empty_lookups + now.empty_lookups) / 2.0,
            lookups: (p.lookups + now.lookups) / 2.0,
            short_scans: (p.short_scans + now.short_scans) / 2.0,
            window_deletes: (p.window_deletes + now.window_deletes) / 2.0,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_scans_are_one_series() {
        let k = |s: u8, t: u8| [[0, 0, 0, 1, s].as_slice(), &[0; 7], &[t]].concat();
        assert!(is_short(Some(&k(1, 0)), Some(&k(1, 9))));
        assert!(!is_short(Some(&k(1, 0)), Some(&k(2, 0))));
        assert!(!is_short(Some(&k(1, 0)), None));
        assert!(!is_short(Some(&[1, 2, 3]), Some(&[1, 2, 4])));
        let c = WorkloadCounters::default();
        c.scan(Some(&k(1, 0)), Some(&k(1, 9)));
        c.scan(None, None);
        c.lookup(false);
        c.window_delete();
        let got = c.take();
        assert_eq!(
            (got.short_scans, got.long_scans, got.empty_lookups, got.window_deletes),
            (1, 1, 1, 1)
        );
        assert_eq!(c.peek(), WorkloadCounts::default());
    }

    #[test]
    fn smoothing_and_retention() {
        let quiet = WorkloadCounts::default();
        assert_eq!(smooth(None, &quiet, 1, false).window_deletes, 0.0);
        assert_eq!(smooth(None, &quiet, 1, true).window_deletes, 1.0);
        let busy = WorkloadCounts { short_scans: 100, ..quiet };
        let m = smooth(Some(smooth(None, &busy, 1, false)), &quiet, 1, false);
        assert_eq!(m.short_scans, 50.0);
        // Four epochs counted at once: their average.
        assert_eq!(smooth(None, &busy, 4, false).short_scans, 25.0);
    }

    #[test]
    fn more_scans_shrink_tiles_more_deletes_grow_them() {
        let opts = Options::default();
        let base =
            WorkloadMix { empty_lookups: 1e3, lookups: 1e3, short_scans: 1e3, window_deletes: 1.0 };
        let h = layout_for(&opts, &base);
        let scans = layout_for(&opts, &WorkloadMix { short_scans: 1e6, ..base });
        let deletes = layout_for(&opts, &WorkloadMix { window_deletes: 50.0, ..base });
        assert_eq!(h.len(), opts.num_levels);
        assert_eq!(h[0], 1);
        for i in 1..h.len() {
            assert!(scans[i] <= h[i] && h[i] <= deletes[i], "{scans:?} {h:?} {deletes:?}");
        }
        assert!(scans[1] < h[1] && h[1] < deletes[1], "{scans:?} {h:?} {deletes:?}");
    }
}
