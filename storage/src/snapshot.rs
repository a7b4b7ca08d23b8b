//! Snapshots: a sequence number reads are pinned to, registered so compaction keeps what it needs.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

/// Registry of live snapshots (seq -> count).
#[derive(Debug, Default)]
pub(crate) struct SnapshotList(Mutex<BTreeMap<u64, usize>>);

impl SnapshotList {
    /// Sequence numbers of all live snapshots.
    pub fn seqs(&self) -> Vec<u64> {
        self.0.lock().keys().copied().collect()
    }

    fn acquire(&self, seq: u64) {
        *self.0.lock().entry(seq).or_default() += 1;
    }

    fn release(&self, seq: u64) {
        let mut m = self.0.lock();
        if let Some(n) = m.get_mut(&seq) {
            *n -= 1;
            if *n == 0 {
                m.remove(&seq);
            }
        }
    }
}

/// A consistent read view: reads through it see exactly the writes with sequence numbers up to
/// [`Snapshot::seq`]. Dropping it lets compaction discard the versions only it needed.
#[derive(Debug)]
pub struct Snapshot {
    seq: u64,
    list: Arc<SnapshotList>,
}

impl Snapshot {
    pub(crate) fn new(seq: u64, list: Arc<SnapshotList>) -> Self {
        list.acquire(seq);
        Snapshot { seq, list }
    }

    /// The sequence number this snapshot reads at.
    pub fn seq(&self) -> u64 {
        self.seq
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        self.list.release(self.seq);
    }
}
