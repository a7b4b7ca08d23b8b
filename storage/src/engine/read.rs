//! The read path: point lookups and range scans.

use std::ops::{Bound, RangeBounds};
use std::sync::atomic::Ordering;

use bytes::Bytes;

use std::sync::Arc;

use super::{Engine, Inner, SuperVersion};
use crate::batch::EntryKind;
use crate::iter::{EngineIter, EntryCursor, LevelCursor, MergeCursor};
use crate::memtable::MemCursor;
use crate::snapshot::Snapshot;
use crate::sst::{bloom, Prune, TableCursor};
use crate::Result;

fn visible(kind: EntryKind, value: Bytes) -> Option<Bytes> {
    match kind {
        EntryKind::Put => Some(value),
        EntryKind::Delete => None,
    }
}

impl Engine {
    fn read_seq(&self, snapshot: Option<&Snapshot>) -> u64 {
        snapshot.map_or_else(|| self.inner.visible_seq.load(Ordering::Acquire), Snapshot::seq)
    }

    /// The value of `key` as of `snapshot` (latest if `None`).
    pub fn get(&self, key: &[u8], snapshot: Option<&Snapshot>) -> Result<Option<Bytes>> {
        let found = self.get_uncounted(key, snapshot)?;
        self.inner.tuning.layout.counters.lookup(found.is_some());
        Ok(found)
    }

    fn get_uncounted(&self, key: &[u8], snapshot: Option<&Snapshot>) -> Result<Option<Bytes>> {
        let seq = self.read_seq(snapshot);
        let rules = self.inner.rules();
        if !rules.is_empty() && self.inner.expired(&rules, key) {
            return Ok(None);
        }
        // Windows before the state (see `scan`).
        let windows = self.inner.windows();
        let (generation, sv) = self.inner.read_view();
        let dkey = self.inner.opts.delete_key.extract(key);
        let hidden = |found: u64| {
            !windows.is_empty() && Inner::window_hides(&windows, dkey, key, found, seq)
        };
        if self.inner.deletes.ranges.in_files() {
            return Ok(get_with_tombstones(&sv, key, dkey, seq)?
                .filter(|(s, _)| !hidden(*s))
                .map(|v| v.1));
        }
        let Some((found, kind, value)) = newest_version(&sv, key, dkey, seq)? else {
            return Ok(None);
        };
        let Some(value) = visible(kind, value) else { return Ok(None) };
        if hidden(found) {
            return Ok(None);
        }
        // Only the newest visible version needs the range-delete check: a delete covering an
        // older version but not this one cannot hide the key.
        if self.inner.range_deleted((generation, &sv), key, found, seq)? {
            return Ok(None);
        }
        Ok(Some(value))
    }

    /// Streams the live `(key, value)` pairs in `range` as of `snapshot` (latest if `None`).
    pub fn scan<K: AsRef<[u8]>>(
        &self,
        range: impl RangeBounds<K>,
        snapshot: Option<&Snapshot>,
    ) -> Result<EngineIter> {
        self.scan_with(range, None, snapshot, None)
    }

    /// Like [`Engine::scan`], returning only rows whose delete key (time) is in `[t_lo, t_hi)`.
    /// Pages whose time range misses the window are skipped without being read (the per-page
    /// zone maps of the KiWi layout).
    pub fn scan_time<K: AsRef<[u8]>>(
        &self,
        range: impl RangeBounds<K>,
        t_lo: u64,
        t_hi: u64,
        snapshot: Option<&Snapshot>,
    ) -> Result<EngineIter> {
        self.scan_with(range, Some((t_lo, t_hi)), snapshot, None)
    }

    /// A scan of `range`, of the rows in the delete-key window `time` if given, offering the
    /// pages `taker` could answer from their summaries (see [`Engine::scan_summarized`]).
    pub(super) fn scan_with<K: AsRef<[u8]>>(
        &self,
        range: impl RangeBounds<K>,
        time: Option<(u64, u64)>,
        snapshot: Option<&Snapshot>,
        taker: Option<Arc<dyn crate::sst::PageTaker>>,
    ) -> Result<EngineIter> {
        let owned = |b: Bound<&K>| match b {
            Bound::Included(k) => Bound::Included(k.as_ref().to_vec()),
            Bound::Excluded(k) => Bound::Excluded(k.as_ref().to_vec()),
            Bound::Unbounded => Bound::Unbounded,
        };
        let (start, end) = (owned(range.start_bound()), owned(range.end_bound()));
        let lo = match &start {
            Bound::Included(k) | Bound::Excluded(k) => Some(k.as_slice()),
            Bound::Unbounded => None,
        };
        let hi = match &end {
            Bound::Included(k) | Bound::Excluded(k) => Some(k.as_slice()),
            Bound::Unbounded => None,
        };
        let short = self.inner.tuning.layout.counters.scan(lo, hi);
        if let (false, Some(l), Some(h)) = (short, lo, hi) {
            self.inner.hint_range(l, h);
        }
        let seq = self.read_seq(snapshot);
        // Windows before the state: a window is retired only once no state holding its rows is
        // current, so the state read after it never needs a window missing from the list.
        let windows = self.inner.windows();
        let (generation, sv) = self.inner.read_view();
        let rules = self.inner.rules();
        let summaries = taker.map(|taker| {
            Arc::new(super::summarized::PageUse {
                taker,
                inner: self.inner.clone(),
                snapshot: seq,
                start: start.clone(),
                end: end.clone(),
                time,
                sv: sv.clone(),
                windows: windows.clone(),
                rules: rules.clone(),
                newest_range: super::summarized::PageUse::newest_range(&sv),
                gaps: Default::default(),
            }) as Arc<dyn crate::sst::PageOffer>
        });
        let prune = Prune {
            end: match &end {
                Bound::Included(k) => Some((k.clone(), true)),
                Bound::Excluded(k) => Some((k.clone(), false)),
                Bound::Unbounded => None,
            },
            time,
            summaries,
        };
        let mut children: Vec<Box<dyn EntryCursor>> = Vec::new();
        // Memtables in the state's order (the one taking writes first), each offering its
        // summarized runs to a summarized scan.
        for (i, m) in std::iter::once(&sv.mem).chain(&sv.imms).enumerate() {
            let cursor = MemCursor::new(m.clone());
            children.push(Box::new(match &prune.summaries {
                Some(offer) => cursor.summarized(offer.clone(), i),
                None => cursor,
            }));
        }
        // Range filters answer for ranges inside one head (one series): the global filter
        // once for every file it indexes, else each file's own.
        let c = &self.inner.counters;
        let global = sv.version.grf.as_ref().and_then(|g| {
            let cand = g.candidates(as_ref(&start), as_ref(&end))?;
            c.global_filter_probes.fetch_add(1, Ordering::Relaxed);
            Some((g, cand))
        });
        let wanted = |level: usize, t: &Arc<crate::sst::Table>| {
            if !t.meta().overlaps(lo, hi) {
                return false;
            }
            if let Some(keep) = global.as_ref().and_then(|(g, cand)| g.keeps(cand, level, t.id())) {
                if !keep {
                    c.global_filter_skips.fetch_add(1, Ordering::Relaxed);
                }
                return keep;
            }
            match t.may_hold(as_ref(&start), as_ref(&end)) {
                None => true,
                Some(keep) => {
                    c.range_filter_probes.fetch_add(1, Ordering::Relaxed);
                    if !keep {
                        c.range_filter_skips.fetch_add(1, Ordering::Relaxed);
                    }
                    keep
                }
            }
        };
        for t in &sv.version.levels[0] {
            if wanted(0, t) {
                children.push(Box::new(TableCursor::new(t.clone(), true).pruned(prune.clone())));
            }
        }
        for (level, files) in sv.version.levels.iter().enumerate().skip(1) {
            let tables: Vec<_> = files.iter().filter(|t| wanted(level, t)).cloned().collect();
            if !tables.is_empty() {
                children.push(Box::new(LevelCursor::new(tables, true).pruned(prune.clone())));
            }
        }
        // Range deletes at or below the snapshot are all in `sv` already (a write is visible
        // only after it reached the memtable), so an empty index stays empty for this scan.
        let no_ranges = !self.inner.deletes.ranges.in_files()
            && sv.mem.ranges.is_empty()
            && sv.imms.iter().all(|m| m.ranges.is_empty())
            && sv.version.all_trees().next().is_none();
        let ranges =
            RangeCheck { inner: self.inner.clone(), generation, sv, windows, rules, no_ranges };
        let time = time.map(|w| (w, self.inner.opts.delete_key.clone()));
        Ok(EngineIter::new(MergeCursor::new(children), seq, start, end, ranges).with_time(time))
    }
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_slice()),
        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// The newest version of `key` (delete key `dkey`) with sequence number `<= seq`. Files whose
/// delete keys (for time series: row times) do not reach `dkey` are passed over: a write of new
/// rows merging with what is stored looks only into the files of its time.
fn newest_version(
    sv: &SuperVersion,
    key: &[u8],
    dkey: u64,
    seq: u64,
) -> Result<Option<(u64, EntryKind, Bytes)>> {
    let hash = bloom::key_hash(key);
    for m in std::iter::once(&sv.mem).chain(&sv.imms) {
        if let Some((s, v)) = m.get_hashed(key, hash, seq) {
            return Ok(Some((s, v.kind, v.value)));
        }
    }
    for t in &sv.version.levels[0] {
        if t.meta().overlaps(Some(key), Some(key)) && t.meta().may_hold_dkey(dkey) {
            if let Some(found) = t.get(key, hash, seq)? {
                return Ok(Some(found));
            }
        }
    }
    for level in 1..sv.version.levels.len() {
        if let Some(t) = sv.version.file_for(level, key).filter(|t| t.meta().may_hold_dkey(dkey)) {
            if let Some(found) = t.get(key, hash, seq)? {
                return Ok(Some(found));
            }
        }
    }
    Ok(None)
}

/// A lookup in tombstone mode, as RocksDB does it: every memtable and file visited on the way
/// down contributes its newest covering range tombstone; the first version found is deleted if
/// older than the newest such tombstone.
fn get_with_tombstones(
    sv: &SuperVersion,
    key: &[u8],
    dkey: u64,
    seq: u64,
) -> Result<Option<(u64, Bytes)>> {
    let hash = bloom::key_hash(key);
    let mut covered = 0u64;
    let decide = |covered: u64, (s, kind, value): (u64, EntryKind, Bytes)| {
        if s < covered {
            None
        } else {
            visible(kind, value).map(|v| (s, v))
        }
    };
    for m in std::iter::once(&sv.mem).chain(&sv.imms) {
        covered = covered.max(m.ranges.visible(key, seq).unwrap_or(0));
        if let Some((s, v)) = m.get_hashed(key, hash, seq) {
            return Ok(decide(covered, (s, v.kind, v.value)));
        }
    }
    for t in &sv.version.levels[0] {
        if t.meta().overlaps(Some(key), Some(key)) {
            covered = covered.max(t.covering_tombstone(key, seq).unwrap_or(0));
            if !t.meta().may_hold_dkey(dkey) {
                continue;
            }
            if let Some(found) = t.get(key, hash, seq)? {
                return Ok(decide(covered, found));
            }
        }
    }
    for level in 1..sv.version.levels.len() {
        if let Some(t) = sv.version.file_for(level, key) {
            covered = covered.max(t.covering_tombstone(key, seq).unwrap_or(0));
            if !t.meta().may_hold_dkey(dkey) {
                continue;
            }
            if let Some(found) = t.get(key, hash, seq)? {
                return Ok(decide(covered, found));
            }
        }
    }
    Ok(None)
}

/// What a scan needs to hide entries covered by range deletes: the engine and the state it read.
pub(crate) struct RangeCheck {
    inner: Arc<Inner>,
    generation: u64,
    sv: Arc<SuperVersion>,
    windows: Arc<Vec<crate::kiwi::TimeWindow>>,
    rules: Arc<Vec<super::retention::Rule>>,
    /// No GLORAN range delete existed when the scan started.
    no_ranges: bool,
}

impl RangeCheck {
    /// True if `(key, seq)` read at `t` is range-deleted.
    pub fn deleted(&self, key: &[u8], seq: u64, t: u64) -> Result<bool> {
        if !self.rules.is_empty() && self.inner.expired(&self.rules, key) {
            return Ok(true);
        }
        if !self.windows.is_empty() {
            let dkey = self.inner.opts.delete_key.extract(key);
            if Inner::window_hides(&self.windows, dkey, key, seq, t) {
                return Ok(true);
            }
        }
        if self.no_ranges {
            return Ok(false);
        }
        self.inner.range_deleted((self.generation, &self.sv), key, seq, t)
    }
}
