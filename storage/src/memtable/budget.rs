//! [`WriteBudget`]: memory the memtables of several engines share, as RocksDB's write buffer
//! manager shares it between column families and databases.
//!
//! A node of a cluster holds an engine per shard replica; each may fill `write_buffer_size`
//! times `1 + max_immutable_memtables` bytes of memtables, so the node's memtable memory grows
//! with the shards it holds. With a budget, each engine reports its memtables' bytes as it
//! writes and flushes, and an engine whose write finds the budget spent seals its active
//! memtable early (once it holds half its even share of the budget, and at least
//! [`MIN_EARLY_SEAL`] bytes), so it is flushed and its memory returned. A write that finds the budget spent while flushes are behind waits for
//! them, as a write past `max_immutable_memtables` does.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The smallest active memtable a spent budget seals (smaller ones would make many tiny
/// level-0 files).
pub const MIN_EARLY_SEAL: usize = 1 << 20;

/// Memtable memory shared by engines opened with the same budget (see the module docs).
#[derive(Debug)]
pub struct WriteBudget {
    limit: usize,
    used: AtomicUsize,
    /// Engines open with it.
    engines: AtomicUsize,
}

impl WriteBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Arc<WriteBudget> {
        Arc::new(WriteBudget { limit, used: AtomicUsize::new(0), engines: AtomicUsize::new(0) })
    }

    /// Its limit in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Memtable bytes the engines sharing it hold, as last reported.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Engines open with it.
    pub fn engines(&self) -> usize {
        self.engines.load(Ordering::Relaxed)
    }

    /// True if the engines hold more than the limit.
    pub fn spent(&self) -> bool {
        self.used() > self.limit
    }

    /// The smallest active memtable a write into a spent budget seals: half an engine's
    /// even share of the limit, and at least [`MIN_EARLY_SEAL`], so the larger memtables are
    /// the ones flushed early and none is flushed tiny.
    pub fn early_seal_bytes(&self) -> usize {
        let engines = self.engines.load(Ordering::Relaxed).max(1);
        (self.limit / engines / 2).max(MIN_EARLY_SEAL)
    }

    /// An engine opened with it (`true`) or closed.
    pub(crate) fn opened(&self, open: bool) {
        match open {
            true => self.engines.fetch_add(1, Ordering::Relaxed),
            false => self.engines.fetch_sub(1, Ordering::Relaxed),
        };
    }

    /// An engine's memtables went from `before` to `after` bytes.
    pub(crate) fn moved(&self, before: usize, after: usize) {
        if after >= before {
            self.used.fetch_add(after - before, Ordering::Relaxed);
        } else {
            let less = before - after;
            let _ = self.used.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                Some(u.saturating_sub(less))
            });
        }
    }
}
