//! Counters of Raft traffic, for `/metrics` and the cluster benchmark.

use std::sync::atomic::{AtomicU64, Ordering};

/// Messages of one kind moved in one direction: how many, and their bytes.
#[derive(Debug, Default)]
pub struct Traffic {
    count: AtomicU64,
    bytes: AtomicU64,
}

impl Traffic {
    /// Counts one message of `bytes`.
    pub fn add(&self, bytes: u64) {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Messages counted.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Their bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}
