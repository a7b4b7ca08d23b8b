//! Whether the engine can go on: poisoned by a failure it cannot recover from (until reopened),
//! or short of disk space for its last flush or compaction (until a commit succeeds).

use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

/// The engine's health, with its own locks.
#[derive(Debug, Default)]
pub(super) struct Health {
    /// Set once, never cleared: read on every write without a lock.
    poisoned: AtomicBool,
    /// Why, the first failure's message.
    reason: Mutex<Option<String>>,
    /// Why the last flush or compaction failed for lack of space.
    disk_full: Mutex<Option<String>>,
}

impl Health {
    pub(super) fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    /// Why the engine is poisoned, if it is.
    pub(super) fn poison_reason(&self) -> Option<String> {
        match self.is_poisoned() {
            true => Some(self.reason.lock().clone().unwrap_or_default()),
            false => None,
        }
    }

    /// Poisons the engine; the first reason given is kept.
    pub(super) fn poison(&self, reason: &dyn std::fmt::Display) {
        self.reason.lock().get_or_insert_with(|| reason.to_string());
        self.poisoned.store(true, Ordering::Release);
    }

    pub(super) fn disk_full(&self) -> Option<String> {
        self.disk_full.lock().clone()
    }

    /// Notes a step that failed for lack of space (`Some`), or a commit that succeeded.
    pub(super) fn set_disk_full(&self, why: Option<String>) {
        *self.disk_full.lock() = why;
    }
}
