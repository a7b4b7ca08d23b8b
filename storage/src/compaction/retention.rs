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

    /// Filters the versions of one key, given newest first, in place, where the range deletes
    /// with sequence numbers `covering` (newest first) cover the key. Each range delete acts as a
    /// tombstone at its sequence number that is never written out: versions it hides from every
    /// reader are dropped, the delete itself stays in the range index.
    pub fn retain_covered(&self, versions: &mut Vec<Version>, covering: &[u64]) {
        if covering.is_empty() {
            return self.retain(versions);
        }
        // Merge real versions and virtual tombstones (marked by an empty-value Delete whose seq
        // is in `covering`; real and virtual seqs never collide, every write has its own seq).
        let mut all: Vec<(Version, bool)> = versions.drain(..).map(|v| (v, false)).collect();
        all.extend(
            covering
                .iter()
                .map(|&s| (Version { seq: s, kind: EntryKind::Delete, value: Bytes::new() }, true)),
        );
        all.sort_by_key(|(v, _)| std::cmp::Reverse(v.seq));
        let mut last_stripe = usize::MAX;
        all.retain(|(v, _)| {
            let s = self.stripe(v.seq);
            let keep = s != last_stripe;
            last_stripe = s;
            keep
        });
        if self.drop_tombstones {
            while all.last().is_some_and(|(v, _)| v.kind == EntryKind::Delete) {
                all.pop();
            }
        }
        versions.extend(all.into_iter().filter(|(_, virt)| !virt).map(|(v, _)| v));
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
    fn range_deletes_hide_versions_per_stripe() {
        let r = Retention::new(vec![55], false);
        // put@50 is seen by the snapshot at 55 (the delete at 60 is invisible to it): kept.
        let mut vs = vec![v(50, true)];
        r.retain_covered(&mut vs, &[60]);
        assert_eq!(seqs(&vs), vec![50]);
        // Without the snapshot nobody sees put@50 any more.
        let r = Retention::new(vec![], false);
        let mut vs = vec![v(70, true), v(50, true)];
        r.retain_covered(&mut vs, &[60]);
        assert_eq!(seqs(&vs), vec![70], "put@70 is newer than the delete and stays");
        let mut vs = vec![v(50, true), v(40, false)];
        r.retain_covered(&mut vs, &[60]);
        assert!(vs.is_empty());
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
