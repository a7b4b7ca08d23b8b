//! A line-protocol request split between shards is checked whole before any shard writes its
//! part. The receiving node checks the request against itself (a field given two types, a name
//! used as tag and field: [`ebb_query::lp::shape`]); then, unless every table shape of the
//! request's part for a shard passed on that shard recently (with lines no older), that shard
//! checks its part against its schema and retention without writing (the `check_only` write). Only when all agree do the shards write. A shard
//! can still fail after that (no leader within the write timeout, a full disk, a schema changed
//! in between by a concurrent request): the README says what a client sees then.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How long a table shape that every shard accepted is trusted without asking again.
const FRESH: Duration = Duration::from_secs(30);

/// Most shapes remembered (more are forgotten all at once).
const MAX_SHAPES: usize = 65_536;

/// What each shard accepted lately: table shapes (fingerprints of
/// [`ebb_query::lp::shape::Shape`]), the oldest time checked with each (retention refuses old
/// lines), and when.
#[derive(Debug, Default)]
pub struct CheckedShapes {
    seen: Mutex<HashMap<(u64, u64), (Instant, i64)>>,
}

impl CheckedShapes {
    /// True if `shard` accepted every one of `prints` within [`FRESH`], with lines as old as
    /// `oldest_ns` or older.
    pub fn all_fresh(&self, shard: u64, prints: &[u64], oldest_ns: i64) -> bool {
        let seen = self.seen.lock();
        prints.iter().all(|p| {
            seen.get(&(shard, *p)).is_some_and(|(t, o)| t.elapsed() < FRESH && *o <= oldest_ns)
        })
    }

    /// Notes that `shard` accepted `prints` with lines from `oldest_ns` on.
    pub fn remember(&self, shard: u64, prints: &[u64], oldest_ns: i64) {
        let mut seen = self.seen.lock();
        if seen.len() + prints.len() > MAX_SHAPES {
            seen.clear();
        }
        let now = Instant::now();
        for p in prints {
            seen.insert((shard, *p), (now, oldest_ns));
        }
    }

    /// Forgets what `shard` accepted of `prints` (it refused a write of them).
    pub fn forget(&self, shard: u64, prints: &[u64]) {
        let mut seen = self.seen.lock();
        for p in prints {
            seen.remove(&(shard, *p));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_trusted_per_shard_and_for_lines_no_older() {
        let c = CheckedShapes::default();
        assert!(!c.all_fresh(1, &[7], 100));
        c.remember(1, &[7, 8], 100);
        assert!(c.all_fresh(1, &[7, 8], 100) && c.all_fresh(1, &[7], 500));
        assert!(!c.all_fresh(1, &[7], 99), "older lines than were checked");
        assert!(!c.all_fresh(2, &[7], 100), "another shard");
        assert!(!c.all_fresh(1, &[7, 9], 100));
        c.forget(1, &[8]);
        assert!(!c.all_fresh(1, &[8], 100) && c.all_fresh(1, &[7], 100));
    }
}
