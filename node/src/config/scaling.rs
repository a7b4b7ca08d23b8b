//! How a cluster grows: when shards split by themselves, how fast replicas move, and how fast
//! backups transfer.
//!
//! ```toml
//! split_shard_bytes = "16GiB"     # a shard larger than this splits ("none": never for size)
//! split_shard_rows = 200000       # ... or one taking more rows a second, for a minute
//! move_rate = "64MiB"             # bytes a second a node sends replicas at ("none": unlimited)
//! memtable_budget = "512MiB"      # memtable memory a node's shard replicas share ("none")
//! backup_rate = "none"            # bytes a second a backup transfers at ("none": unlimited)
//! ```

use super::{bad, bytes, Overrides};
use crate::error::Result;

/// The scaling settings of a node (the metadata leader's split limits are the ones that act).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scaling {
    /// A shard whose bytes (engine files and memtable, on its leader) exceed this splits.
    pub split_bytes: Option<u64>,
    /// A shard whose leader writes more rows a second than this, over a minute, splits.
    pub split_rows_per_sec: Option<u64>,
    /// Bytes a second this node sends shard snapshots at (moving replicas, far-behind
    /// followers), all of them together.
    pub move_rate: Option<u64>,
    /// Memtable bytes all shard replicas of this node share (see `ebb_storage::WriteBudget`):
    /// past it, a replica written to flushes its memtable early, so a node's memory does not
    /// grow with the shards it holds.
    pub memtable_budget: Option<u64>,
    /// Bytes a second a backup, restore or verify transfers at (read and written together),
    /// unless the command gives its own rate.
    pub backup_rate: Option<u64>,
}

impl Default for Scaling {
    fn default() -> Self {
        Scaling {
            split_bytes: Some(16 << 30),
            split_rows_per_sec: Some(200_000),
            move_rate: Some(64 << 20),
            memtable_budget: Some(512 << 20),
            backup_rate: None,
        }
    }
}

/// `"none"` (or `"0"`) for no limit, else what `parse` reads.
fn limit(what: &str, s: &str, parse: impl Fn(&str) -> Result<u64>) -> Result<Option<u64>> {
    match s.trim() {
        "none" | "0" => Ok(None),
        v => parse(v).map(Some).map_err(|e| bad(format!("{what}: {e}"))),
    }
}

/// Applies the scaling settings present in `o` to `c`.
pub(super) fn apply(o: &Overrides, c: &mut Scaling) -> Result<()> {
    if let Some(v) = &o.split_shard_bytes {
        let size = |v: &str| bytes("split_shard_bytes", v).map(|n| n as u64);
        c.split_bytes = limit("split_shard_bytes", v, size)?;
    }
    if let Some(v) = &o.split_shard_rows {
        let rows = |v: &str| v.parse::<u64>().map_err(|_| bad(format!("{v:?} is not a number")));
        c.split_rows_per_sec = limit("split_shard_rows", v, rows)?;
    }
    if let Some(v) = &o.move_rate {
        let size = |v: &str| bytes("move_rate", v).map(|n| n as u64);
        c.move_rate = limit("move_rate", v, size)?;
    }
    if let Some(v) = &o.backup_rate {
        let size = |v: &str| bytes("backup_rate", v).map(|n| n as u64);
        c.backup_rate = limit("backup_rate", v, size)?;
    }
    if let Some(v) = &o.memtable_budget {
        let size = |v: &str| bytes("memtable_budget", v).map(|n| n as u64);
        c.memtable_budget = limit("memtable_budget", v, size)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse_and_none_turns_them_off() {
        let mut c = Scaling::default();
        let o = Overrides {
            split_shard_bytes: Some("2GiB".into()),
            split_shard_rows: Some("none".into()),
            move_rate: Some("10MiB".into()),
            memtable_budget: Some("none".into()),
            backup_rate: Some("100MiB".into()),
            ..Default::default()
        };
        apply(&o, &mut c).unwrap();
        assert_eq!(
            c,
            Scaling {
                split_bytes: Some(2 << 30),
                split_rows_per_sec: None,
                move_rate: Some(10 << 20),
                memtable_budget: None,
                backup_rate: Some(100 << 20),
            }
        );
        for bad in [
            Overrides { split_shard_bytes: Some("lots".into()), ..Default::default() },
            Overrides { split_shard_rows: Some("-5".into()), ..Default::default() },
            Overrides { move_rate: Some("1XB".into()), ..Default::default() },
            Overrides { memtable_budget: Some("half".into()), ..Default::default() },
            Overrides { backup_rate: Some("fast".into()), ..Default::default() },
        ] {
            assert!(apply(&bad, &mut Scaling::default()).is_err(), "{bad:?}");
        }
    }
}
