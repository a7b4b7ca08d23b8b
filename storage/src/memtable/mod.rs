//! The memtable: a concurrent skiplist of (key, seq) -> value | tombstone.

pub mod budget;
mod cursor;
mod runs;

use std::cmp::Ordering;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering as AtomicOrdering};

mod filter;
use filter::MemFilter;
use std::time::Instant;

use bytes::Bytes;
use crossbeam_skiplist::base::SkipList;
use smallvec::SmallVec;

pub(crate) use cursor::MemCursor;
pub(crate) use runs::RunView;
use runs::{Runs, RunsGuard};

use crate::batch::EntryKind;
use crate::gloran::buffer::RangeBuffer;

/// Keys up to this many bytes are stored inside the skiplist node itself.
const INLINE_KEY: usize = 32;

/// Key bytes of a memtable entry; short keys live inline in the node, so a comparison during a
/// skiplist search touches one cache line instead of chasing a pointer to a separate allocation.
pub(crate) type KeyBuf = SmallVec<[u8; INLINE_KEY]>;

/// Key of a memtable entry, ordered by key ascending, then sequence number descending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemKey {
    pub key: KeyBuf,
    pub seq: u64,
}

impl Ord for MemKey {
    fn cmp(&self, other: &Self) -> Ordering {
        crate::iter::internal_cmp(&self.key, self.seq, &other.key, other.seq)
    }
}

impl PartialOrd for MemKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Value of a memtable entry.
#[derive(Debug, Clone)]
pub struct MemValue {
    /// Put or tombstone.
    pub kind: EntryKind,
    /// The value (empty for tombstones).
    pub value: Bytes,
}

/// Approximate per-entry overhead of a skiplist node, for memory accounting.
const ENTRY_OVERHEAD: usize = 64;

/// A memtable. Writers are serialised by the engine; readers run concurrently.
/// (Public only through `internals`, for micro-benchmarks.)
#[derive(Debug)]
pub struct Memtable {
    /// The entries. The guard-based `base` API lets scans walk nodes under one epoch pin without
    /// touching per-node reference counts.
    map: SkipList<MemKey, MemValue>,
    bytes: AtomicUsize,
    max_seq: AtomicU64,
    min_entry_seq: AtomicU64,
    oldest_delete: AtomicU64,
    /// Earliest due base of a delete written to it (see [`crate::fade::DeleteStamp`]).
    delete_due: AtomicU64,
    created: Instant,
    filter: MemFilter,
    /// Range deletes written while this memtable was active.
    pub(crate) ranges: RangeBuffer,
    /// WAL file holding this memtable's writes (0 without a WAL).
    pub(crate) wal_number: u64,
    /// Runs of its rows, kept as they arrive, and their summaries once made (with a
    /// summarizer that places keys in runs).
    runs: Option<Runs>,
}

impl Memtable {
    /// An empty memtable whose writes go to WAL file `wal_number`, with a Bloom filter sized for
    /// a memtable of `capacity_bytes` (0: no filter).
    pub fn new(wal_number: u64, capacity_bytes: usize) -> Self {
        Memtable {
            map: SkipList::new(crossbeam_epoch::default_collector().clone()),
            bytes: AtomicUsize::new(0),
            max_seq: AtomicU64::new(0),
            min_entry_seq: AtomicU64::new(u64::MAX),
            oldest_delete: AtomicU64::new(u64::MAX),
            delete_due: AtomicU64::new(u64::MAX),
            created: Instant::now(),
            filter: MemFilter::new(capacity_bytes),
            ranges: RangeBuffer::default(),
            wal_number,
            runs: None,
        }
    }

    /// The same memtable, keeping runs of its rows for `summarizer` to summarize (see
    /// [`runs`]). Call before the first insert.
    pub(crate) fn summarized(
        mut self,
        summarizer: Option<&std::sync::Arc<dyn crate::sst::PageSummarizer>>,
        delete_key: &crate::options::DeleteKeyExtractor,
    ) -> Self {
        self.runs = summarizer.map(|s| Runs::new(s, delete_key.clone()));
        self
    }

    /// The runs lying wholly inside `[lo, hi]` whose rows (two or more, only puts, one version
    /// of each key) are all visible at `snapshot`, each with its summary (made now where the
    /// run has none yet, and kept), in key order.
    pub(crate) fn runs(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>, snapshot: u64) -> Vec<RunView> {
        let Some(runs) = &self.runs else { return Vec::new() };
        let mut views = runs.views(lo, hi, snapshot);
        views.retain_mut(|v| {
            if v.summary.is_none() {
                v.summary = self.summarize_run(runs, v).map(|s| {
                    let s: std::sync::Arc<[u8]> = s.into();
                    let added = runs.keep(v, s.clone());
                    self.bytes.fetch_add(added, AtomicOrdering::Relaxed);
                    s
                });
            }
            v.summary.is_some()
        });
        views.sort_by(|a, b| a.min_key.cmp(&b.min_key));
        views
    }

    /// The summary of run `v`'s rows, read from the skiplist: `None` unless they are exactly
    /// `v.entries` puts of distinct keys, none newer than `v.max_seq` (a row arriving
    /// meanwhile leaves the run to be read).
    fn summarize_run(&self, runs: &Runs, v: &RunView) -> Option<Vec<u8>> {
        let lo = MemKey { key: KeyBuf::from_slice(&v.min_key), seq: u64::MAX };
        let hi = MemKey { key: KeyBuf::from_slice(&v.max_key), seq: 0 };
        let mut data = Vec::new();
        let mut rows: Vec<(usize, usize, usize)> = Vec::with_capacity(v.entries as usize);
        {
            let guard = crossbeam_epoch::pin();
            let mut last: Option<(usize, usize)> = None;
            for e in self.map.range((Bound::Included(&lo), Bound::Included(&hi)), &guard) {
                let (k, val) = (e.key(), e.value());
                let again = last.is_some_and(|(a, b)| data[a..b] == *k.key.as_slice());
                if val.kind != EntryKind::Put || k.seq > v.max_seq || again {
                    return None;
                }
                let at = data.len();
                data.extend_from_slice(&k.key);
                let mid = data.len();
                data.extend_from_slice(&val.value);
                rows.push((at, mid, data.len()));
                last = Some((at, mid));
            }
        }
        if rows.len() != v.entries as usize {
            return None;
        }
        let mut pairs = rows.iter().map(|&(a, m, b)| (&data[a..m], &data[m..b]));
        runs.summarizer().summarize(&mut pairs)
    }

    /// True if it holds a version of `key`.
    fn holds(&self, key: &[u8], guard: &crossbeam_epoch::Guard) -> bool {
        let probe = MemKey { key: KeyBuf::from_slice(key), seq: u64::MAX };
        self.map
            .lower_bound(Bound::Included(&probe), guard)
            .is_some_and(|e| e.key().key.as_slice() == key)
    }

    /// Inserts one entry.
    pub fn insert(&self, key: &[u8], seq: u64, kind: EntryKind, value: Bytes) {
        let mut batch = self.batch();
        batch.insert(key, seq, kind, value);
    }

    /// A batch of inserts under one epoch pin, whose totals are published once, when it drops.
    pub(crate) fn batch(&self) -> MemBatch<'_> {
        MemBatch {
            mem: self,
            guard: crossbeam_epoch::pin(),
            runs: None,
            bytes: 0,
            max_seq: 0,
            min_seq: u64::MAX,
            oldest_delete: u64::MAX,
        }
    }

    /// Records the range delete `[lo, hi) @ seq`.
    pub fn insert_range(&self, lo: Bytes, hi: Bytes, seq: u64) {
        let size = lo.len() + hi.len() + ENTRY_OVERHEAD;
        self.ranges.insert(lo, hi, seq);
        self.bytes.fetch_add(size, AtomicOrdering::Relaxed);
        self.max_seq.fetch_max(seq, AtomicOrdering::Relaxed);
        self.oldest_delete.fetch_min(seq, AtomicOrdering::Relaxed);
    }

    /// Records a delete that leaves no entry here (a time-window delete): its sequence number
    /// must still be persisted by a flush.
    pub fn record_delete(&self, seq: u64) {
        self.max_seq.fetch_max(seq, AtomicOrdering::Relaxed);
        self.oldest_delete.fetch_min(seq, AtomicOrdering::Relaxed);
    }

    /// Notes that a delete with due base `ms` was written to it.
    pub fn note_delete_due(&self, ms: u64) {
        self.delete_due.fetch_min(ms, AtomicOrdering::Relaxed);
    }

    /// Earliest due base of a delete written to it, if any.
    pub fn delete_due(&self) -> Option<u64> {
        let s = self.delete_due.load(AtomicOrdering::Relaxed);
        (s != u64::MAX).then_some(s)
    }

    /// Sequence number of the oldest point or range delete written to it, if any.
    pub fn oldest_delete(&self) -> Option<u64> {
        let s = self.oldest_delete.load(AtomicOrdering::Relaxed);
        (s != u64::MAX).then_some(s)
    }

    /// Smallest sequence number of a put or point delete held (`u64::MAX` if none).
    pub fn min_entry_seq(&self) -> u64 {
        self.min_entry_seq.load(AtomicOrdering::Relaxed)
    }

    /// Newest version of `key` with sequence number `<= snapshot`.
    pub fn get(&self, key: &[u8], snapshot: u64) -> Option<(u64, MemValue)> {
        self.get_hashed(key, crate::sst::bloom::key_hash(key), snapshot)
    }

    /// [`Memtable::get`] with the key's hash already computed.
    pub fn get_hashed(&self, key: &[u8], hash: u64, snapshot: u64) -> Option<(u64, MemValue)> {
        if !self.filter.may_contain(hash) {
            return None;
        }
        let probe = MemKey { key: KeyBuf::from_slice(key), seq: snapshot };
        let guard = crossbeam_epoch::pin();
        let entry = self.map.lower_bound(Bound::Included(&probe), &guard)?;
        if entry.key().key.as_ref() != key {
            return None;
        }
        Some((entry.key().seq, entry.value().clone()))
    }

    /// The smallest key of an entry (any version, any kind) at or after `lo`.
    pub(crate) fn first_key_from(&self, lo: &[u8]) -> Option<Vec<u8>> {
        let probe = MemKey { key: KeyBuf::from_slice(lo), seq: u64::MAX };
        let guard = crossbeam_epoch::pin();
        self.map.lower_bound(Bound::Included(&probe), &guard).map(|e| e.key().key.to_vec())
    }

    /// Approximate memory used, in bytes.
    pub fn approximate_bytes(&self) -> usize {
        self.bytes.load(AtomicOrdering::Relaxed)
    }

    /// True if no operation was applied to it. An operation that left nothing behind (a range
    /// delete of an empty range) still counts: its sequence number must be persisted by a flush.
    pub fn is_empty(&self) -> bool {
        self.max_seq() == 0
    }

    /// Highest sequence number inserted (0 if empty).
    pub fn max_seq(&self) -> u64 {
        self.max_seq.load(AtomicOrdering::Relaxed)
    }

    /// When this memtable was created.
    pub fn created(&self) -> Instant {
        self.created
    }

    /// Visits up to `limit` entries after `from`, in order, under one epoch pin; `visit` sees
    /// each entry's key, sequence number and value by reference. Entries inside the key ranges
    /// of `skip` (`[lo, hi]`, in key order, disjoint) are passed over; ranges the walk has gone
    /// past leave the front of `skip`. Returns the entries visited, and whether the walk
    /// stopped at `limit` (else it reached the end of the memtable).
    pub(crate) fn chunk(
        &self,
        from: Bound<&MemKey>,
        limit: usize,
        skip: &mut std::collections::VecDeque<(Vec<u8>, Vec<u8>)>,
        mut visit: impl FnMut(&MemKey, &MemValue),
    ) -> (usize, bool) {
        let guard = crossbeam_epoch::pin();
        let mut n = 0;
        let mut after: Option<MemKey> = None;
        loop {
            let start = match &after {
                Some(k) => Bound::Excluded(k),
                None => from,
            };
            let mut range = self.map.range((start, Bound::Unbounded), &guard);
            let jump = loop {
                if n == limit {
                    return (n, true);
                }
                let Some(e) = range.next() else { return (n, false) };
                let key = e.key().key.as_slice();
                while skip.front().is_some_and(|(_, hi)| key > hi.as_slice()) {
                    skip.pop_front();
                }
                if let Some((lo, hi)) = skip.front() {
                    if key >= lo.as_slice() {
                        // Past the range's last key: its oldest version sorts last.
                        break MemKey { key: KeyBuf::from_slice(hi), seq: 0 };
                    }
                }
                visit(e.key(), e.value());
                n += 1;
            };
            skip.pop_front();
            after = Some(jump);
        }
    }
}

/// Inserts into one memtable (see [`Memtable::batch`]).
pub(crate) struct MemBatch<'m> {
    mem: &'m Memtable,
    guard: crossbeam_epoch::Guard,
    /// The runs, locked at the batch's first row that belongs to one.
    runs: Option<RunsGuard<'m>>,
    bytes: usize,
    max_seq: u64,
    min_seq: u64,
    oldest_delete: u64,
}

impl<'m> MemBatch<'m> {
    /// Inserts one entry.
    pub(crate) fn insert(&mut self, key: &[u8], seq: u64, kind: EntryKind, value: Bytes) {
        self.bytes += key.len() + value.len() + ENTRY_OVERHEAD;
        let hash = crate::sst::bloom::key_hash(key);
        let mem: &'m Memtable = self.mem;
        if let Some(runs) = &mem.runs {
            if let Some(run) = runs.run_of(key) {
                // A second version of a key leaves its run to be read.
                let again = mem.filter.may_contain(hash) && mem.holds(key, &self.guard);
                let map = self.runs.get_or_insert_with(|| runs.lock());
                self.bytes += runs.note(map, run, (key, seq), kind, again);
            }
        }
        self.mem.filter.insert(hash);
        let k = MemKey { key: KeyBuf::from_slice(key), seq };
        self.mem.map.insert(k, MemValue { kind, value }, &self.guard).release(&self.guard);
        self.max_seq = self.max_seq.max(seq);
        self.min_seq = self.min_seq.min(seq);
        if kind == EntryKind::Delete {
            self.oldest_delete = self.oldest_delete.min(seq);
        }
    }
}

impl Drop for MemBatch<'_> {
    fn drop(&mut self) {
        let m = self.mem;
        m.bytes.fetch_add(self.bytes, AtomicOrdering::Relaxed);
        m.max_seq.fetch_max(self.max_seq, AtomicOrdering::Relaxed);
        m.min_entry_seq.fetch_min(self.min_seq, AtomicOrdering::Relaxed);
        m.oldest_delete.fetch_min(self.oldest_delete, AtomicOrdering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_respects_snapshot_and_versions() {
        let m = Memtable::new(0, 1 << 20);
        m.insert(b"a", 5, EntryKind::Put, Bytes::from_static(b"v5"));
        m.insert(b"a", 9, EntryKind::Delete, Bytes::new());
        m.insert(b"b", 7, EntryKind::Put, Bytes::from_static(b"b7"));
        assert!(m.get(b"a", 4).is_none());
        assert_eq!(m.get(b"a", 5).unwrap().1.value.as_ref(), b"v5");
        assert_eq!(m.get(b"a", 8).unwrap().0, 5);
        assert_eq!(m.get(b"a", 9).unwrap().1.kind, EntryKind::Delete);
        assert!(m.get(b"ab", 100).is_none());
        assert_eq!(m.max_seq(), 9);
    }
}
