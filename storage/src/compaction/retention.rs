//! Which versions of a key a compaction or flush keeps.
//!
//! Snapshots split sequence-number space into stripes: stripe j holds the seqs in
//! `(snapshot[j-1], snapshot[j]]`, the last stripe everything above the newest snapshot. A reader at
//! any snapshot sees the newest version in or below its stripe, so only the newest version of each
//! stripe is kept. When the output is bottommost (no older data can lie below), trailing tombstones
//! are dropped too: with nothing older beneath them, "deleted" and "absent" read the same.

use bytes::Bytes;

use crate::batch::EntryKind;

/// One version of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Version {
    pub seq: u64,
    pub kind: EntryKind,
    pub value: Bytes,
}

/// The retention rule of one compaction.
#[derive(Debug, Clone)]
pub(crate) struct Retention {
    snapshots: Vec<u64>,
    drop_tombstones: bool,
}

impl Retention {
    /// Rule for live `snapshots` (any order); `bottommost` allows dropping tombstones.
    pub fn new(mut snapshots: Vec<u64>, bottommost: bool) -> Self {
        snapshots.sort_unstable();
        snapshots.dedup();
        Retention { snapshots, drop_tombstones: bottommost }
    }

    fn stripe(&self, seq: u64) -> usize {
        self.snapshots.partition_point(|&s| s < seq)
    }

    /// Filters the versions of one key, given newest first, in place.
    pub fn retain(&self, versions: &mut Vec<Version>) {
        let mut last_stripe = usize::MAX;
        versions.retain(|v| {
            let s = self.stripe(v.seq);
            let keep = s != last_stripe;
            last_stripe = s;
            keep
        });
        if self.drop_tombstones {
            while versions.last().is_some_and(|v| v.kind == EntryKind::Delete) {
                versions.pop();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(seq: u64, put: bool) -> Version {
        let kind = if put { EntryKind::Put } else { EntryKind::Delete };
        Version { seq, kind, value: Bytes::new() }
    }

    fn seqs(vs: &[Version]) -> Vec<u64> {
        vs.iter().map(|v| v.seq).collect()
    }

    #[test]
    fn keeps_newest_per_stripe() {
        let r = Retention::new(vec![5, 10], false);
        let mut vs =
            vec![v(12, true), v(11, true), v(9, true), v(6, false), v(5, true), v(1, true)];
        r.retain(&mut vs);
        assert_eq!(seqs(&vs), vec![12, 9, 5]);
    }

    #[test]
    fn bottommost_drops_trailing_tombstones_only() {
        let r = Retention::new(vec![5], true);
        let mut vs = vec![v(8, true), v(4, false), v(2, true)];
        r.retain(&mut vs);
        assert_eq!(seqs(&vs), vec![8]);
        let mut vs = vec![v(8, false), v(4, true)];
        r.retain(&mut vs);
        assert_eq!(seqs(&vs), vec![8, 4], "tombstone above a version a snapshot needs stays");
        let mut vs = vec![v(8, false)];
        Retention::new(vec![], false).retain(&mut vs);
        assert_eq!(seqs(&vs), vec![8], "not bottommost: tombstone stays");
    }
}
