//! Engine-scoped fail points for crash testing.
//!
//! Unlike a process-global registry, fail points here belong to one engine's [`crate::Options`], so
//! tests running many engines in parallel do not interfere. With no point armed a check is one
//! relaxed atomic load.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::{Error, Result};

/// A set of named fail points. Cloning shares the set.
#[derive(Debug, Clone, Default)]
pub struct FailPoints(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    armed: AtomicBool,
    points: Mutex<HashMap<&'static str, u32>>,
}

/// The fail points the engine checks.
pub mod points {
    /// After a flush wrote its SST, before the manifest commit.
    pub const FLUSH_BEFORE_COMMIT: &str = "flush::before_commit";
    /// After a compaction wrote its first output, before finishing the rest.
    pub const COMPACTION_MID_OUTPUT: &str = "compaction::mid_output";
    /// After a compaction wrote all outputs, before the manifest commit.
    pub const COMPACTION_BEFORE_COMMIT: &str = "compaction::before_commit";
    /// After a compaction's manifest commit, before obsolete inputs are deleted.
    pub const COMPACTION_AFTER_COMMIT: &str = "compaction::after_commit";
    /// Writes half of the next manifest record, then fails (a torn manifest tail).
    pub const MANIFEST_TORN_WRITE: &str = "manifest::torn_write";
    /// The next WAL fsync fails.
    pub const WAL_SYNC: &str = "wal::sync";
}

impl FailPoints {
    /// Arms `name` to fail on its `skip + 1`-th check (then it disarms).
    pub fn arm(&self, name: &'static str, skip: u32) {
        self.0.points.lock().insert(name, skip);
        self.0.armed.store(true, Ordering::Release);
    }

    /// Disarms every point.
    pub fn clear(&self) {
        self.0.points.lock().clear();
        self.0.armed.store(false, Ordering::Release);
    }

    /// True while `name` is armed and has not fired.
    pub fn is_armed(&self, name: &'static str) -> bool {
        self.0.armed.load(Ordering::Acquire) && self.0.points.lock().contains_key(name)
    }

    /// True if `name` fires now (consumes it).
    pub fn fires(&self, name: &'static str) -> bool {
        if !self.0.armed.load(Ordering::Acquire) {
            return false;
        }
        let mut points = self.0.points.lock();
        match points.get_mut(name) {
            Some(0) => {
                points.remove(name);
                if points.is_empty() {
                    self.0.armed.store(false, Ordering::Release);
                }
                true
            }
            Some(n) => {
                *n -= 1;
                false
            }
            None => false,
        }
    }

    /// Returns [`Error::Injected`] if `name` fires.
    pub fn check(&self, name: &'static str) -> Result<()> {
        if self.fires(name) {
            Err(Error::Injected(name))
        } else {
            Ok(())
        }
    }
}
