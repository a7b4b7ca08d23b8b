//! A line-protocol request split between shards is checked whole before any shard writes its
//! part. The receiving node checks the request against itself (a field given two types, a name
//! used as tag and field: [`ebb_query::lp::shape`]); then, unless every table shape of the
//! request passed recently, each shard checks its part against its schema and retention
//! without writing (the `check_only` write). Only when all agree do the shards write. A shard
//! can still fail after that (no leader within the write timeout, a full disk, a schema changed
//! in between by a concurrent request): the README says what a client sees then.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How long a table shape that every shard accepted is trusted without asking again.
const FRESH: Duration = Duration::from_secs(30);

/// Most shapes remembered (more are forgotten all at once).
const MAX_SHAPES: usize = 65_536;

/// Table shapes (fingerprints of [`ebb_query::lp::shape::Shape`]) every shard accepted, and
/// when.
#[derive(Debug, Default)]
pub struct CheckedShapes {
    seen: Mutex<HashMap<u64, Instant>>,
}

impl CheckedShapes {
    /// True if every one of `prints` was accepted by every shard within [`FRESH`].
    pub fn all_fresh(&self, prints: &[u64]) -> bool {
        let seen = self.seen.lock();
        prints.iter().all(|p| seen.get(p).is_some_and(|t| t.elapsed() < FRESH))
    }

    /// Notes that every shard accepted `prints`.
    pub fn remember(&self, prints: &[u64]) {
        let mut seen = self.seen.lock();
        if seen.len() + prints.len() > MAX_SHAPES {
            seen.clear();
        }
        let now = Instant::now();
        for p in prints {
            seen.insert(*p, now);
        }
    }

    /// Forgets `prints` (a shard refused a write of them).
    pub fn forget(&self, prints: &[u64]) {
        let mut seen = self.seen.lock();
        for p in prints {
            seen.remove(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_trusted_only_once_all_were_accepted() {
        let c = CheckedShapes::default();
        assert!(!c.all_fresh(&[1]));
        c.remember(&[1, 2]);
        assert!(c.all_fresh(&[1, 2]) && !c.all_fresh(&[1, 3]));
        c.forget(&[2]);
        assert!(!c.all_fresh(&[2]) && c.all_fresh(&[1]));
    }
}
