//! Scans that answer pages from their summaries (see [`crate::sst::summary`]).

use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use super::retention::Rule;
use super::{Engine, Inner, SuperVersion};
use crate::iter::EngineIter;
use crate::kiwi::TimeWindow;
use crate::memtable::Memtable;
use crate::snapshot::Snapshot;
use crate::sst::{PageMeta, PageOffer, PageTaker, SummarizedPage, Table};
use crate::Result;

impl Engine {
    /// Like [`Engine::scan_time`] (or [`Engine::scan`] without a delete-key window `time`),
    /// offering `taker` every page it could answer from the page's summary alone (see
    /// [`crate::sst::summary`] for when that is); the pages it takes are not read and their
    /// rows are not returned. Needs [`crate::Options::page_summary`]; without it, or for files
    /// written before it was set, this is a plain scan.
    pub fn scan_summarized<K: AsRef<[u8]>>(
        &self,
        range: impl RangeBounds<K>,
        time: Option<(u64, u64)>,
        snapshot: Option<&Snapshot>,
        taker: Arc<dyn PageTaker>,
    ) -> Result<EngineIter> {
        self.scan_with(range, time, snapshot, Some(taker))
    }
}

/// What a summarized scan checks a page against: its bounds, its snapshot and the engine state
/// it reads.
pub(crate) struct PageUse {
    pub taker: Arc<dyn PageTaker>,
    pub inner: Arc<Inner>,
    pub snapshot: u64,
    pub start: Bound<Vec<u8>>,
    pub end: Bound<Vec<u8>>,
    pub time: Option<(u64, u64)>,
    pub sv: Arc<SuperVersion>,
    pub windows: Arc<Vec<TimeWindow>>,
    pub rules: Arc<Vec<Rule>>,
    /// The newest range delete (GLORAN) the state holds, if any.
    pub newest_range: Option<u64>,
    /// Per source offering pages and per other source, the last gap found (see `clear`).
    pub gaps: parking_lot::Mutex<std::collections::HashMap<(Source, Source), Gap>>,
}

impl std::fmt::Debug for PageUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageUse").field("snapshot", &self.snapshot).finish_non_exhaustive()
    }
}

impl PageUse {
    /// The newest range delete held by the memtables and range-delete trees of `sv`.
    pub fn newest_range(sv: &SuperVersion) -> Option<u64> {
        let mem = std::iter::once(&sv.mem).chain(&sv.imms);
        let pieces = mem.flat_map(|m| m.ranges.pieces()).map(|p| p.max_seq());
        let trees = sv.version.all_trees().map(|t| t.meta().props.max_seq);
        pieces.chain(trees).max()
    }

    /// The page lies wholly inside the scan's key range and time window.
    fn inside(&self, pm: &PageMeta) -> bool {
        let (min, max) = (pm.min_key.as_slice(), pm.max_key.as_slice());
        let after_start = match &self.start {
            Bound::Included(k) => min >= k.as_slice(),
            Bound::Excluded(k) => min > k.as_slice(),
            Bound::Unbounded => true,
        };
        let before_end = match &self.end {
            Bound::Included(k) => max <= k.as_slice(),
            Bound::Excluded(k) => max < k.as_slice(),
            Bound::Unbounded => true,
        };
        after_start
            && before_end
            && self.time.is_none_or(|(lo, hi)| pm.min_dkey >= lo && pm.max_dkey < hi)
    }

    /// No delete, time window or retention rule can hide an entry of the page, whose oldest
    /// entry is `min_seq`, in a file whose writing applied the range deletes up to
    /// `rd_applied` (0 for a memtable).
    fn undeleted(&self, rd_applied: u64, pm: &PageMeta, min_seq: u64) -> bool {
        if self.inner.deletes.ranges.in_files() {
            return false;
        }
        // Range deletes up to `rd_applied` dropped what they covered when the file was written;
        // one older than every entry of the page covers none of them.
        let applied = rd_applied.max(min_seq);
        if self.newest_range.is_some_and(|r| r > applied) {
            return false;
        }
        let windows_miss = self
            .windows
            .iter()
            .all(|w| w.seq > self.snapshot || min_seq >= w.seq || w.misses_page(pm));
        windows_miss && self.inner.keeps_all(&self.rules, (&pm.min_key, &pm.max_key), pm.min_dkey)
    }

    /// No other memtable or file than `owner` holds a key inside the page's key range, so no
    /// other version of its keys exists anywhere (all versions of a key share one page, or
    /// one memtable run).
    fn alone(&self, owner: Source, pm: &PageMeta) -> bool {
        let (lo, hi) = (pm.min_key.as_slice(), pm.max_key.as_slice());
        let sv = &self.sv;
        for (i, m) in std::iter::once(&sv.mem).chain(&sv.imms).enumerate() {
            if owner != Source::Memtable(i)
                && !self.clear(owner, Source::Memtable(i), (lo, hi), |k| Ok(m.first_key_from(k)))
            {
                return false;
            }
        }
        let mut other = |t: &Arc<Table>| {
            owner != Source::Table(t.id())
                && !self.clear(owner, Source::Table(t.id()), (lo, hi), |k| t.first_key_from(k))
        };
        let mut levels = sv.version.levels.iter();
        let l0 = levels.next().into_iter().flatten();
        if l0.filter(|t| t.meta().overlaps(Some(lo), Some(hi))).any(&mut other) {
            return false;
        }
        // Deeper levels are sorted and disjoint: the files meeting the range are adjacent.
        !levels.any(|files| {
            let at = files.partition_point(|t| t.meta().ends_before(lo));
            files[at..].iter().take_while(|t| t.meta().smallest() <= hi).any(&mut other)
        })
    }

    /// True if `source` holds no key in `[lo, hi]`. Pages are offered in key order per file,
    /// so the gap found before the last page of `owner` (from its low key to `source`'s next
    /// key) usually answers for the next one too; `next_of` finds `source`'s first key at or
    /// after a key (an error answers "not clear").
    fn clear(
        &self,
        owner: Source,
        source: Source,
        (lo, hi): (&[u8], &[u8]),
        next_of: impl FnOnce(&[u8]) -> Result<Option<Vec<u8>>>,
    ) -> bool {
        let mut gaps = self.gaps.lock();
        let past = |next: &Option<Vec<u8>>| next.as_ref().is_none_or(|n| hi < n.as_slice());
        if let Some(g) = gaps.get(&(owner, source)) {
            if g.from.as_slice() <= lo && past(&g.next) {
                return true;
            }
        }
        let Ok(next) = next_of(lo) else { return false };
        let clear = past(&next);
        gaps.insert((owner, source), Gap { from: lo.to_vec(), next });
        clear
    }
}

/// A memtable (by its place in the state) or a file (by id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Source {
    Memtable(usize),
    Table(u64),
}

/// A key range a source holds no key in: `[from, next)` (`next` `None`: nothing at or after
/// `from`).
#[derive(Debug)]
pub(crate) struct Gap {
    from: Vec<u8>,
    next: Option<Vec<u8>>,
}

impl PageUse {
    /// True if the taker answered the page `pm` of `owner` from `summary`: its entries (from
    /// `min_seq` to `max_seq`) are all visible, inside the scan, undeleted (`rd_applied`: see
    /// [`PageUse::undeleted`]) and alone.
    fn answers(
        &self,
        owner: Source,
        pm: &PageMeta,
        (min_seq, max_seq): (u64, u64),
        rd_applied: u64,
        summary: &[u8],
    ) -> bool {
        max_seq <= self.snapshot
            && self.inside(pm)
            && self.undeleted(rd_applied, pm, min_seq)
            && self.alone(owner, pm)
            && self.taker.take(&SummarizedPage {
                min_key: &pm.min_key,
                max_key: &pm.max_key,
                min_dkey: pm.min_dkey,
                max_dkey: pm.max_dkey,
                entries: pm.entries,
                summary,
            })
    }
}

impl PageOffer for PageUse {
    fn offer(&self, table: &Table, page: usize) -> bool {
        let pm = &table.index().pages[page];
        let Some(s) = &pm.summary else { return false };
        let rd_applied = table.meta().props.rd_applied;
        let taken = self.answers(
            Source::Table(table.id()),
            pm,
            (s.min_seq, s.max_seq),
            rd_applied,
            &s.data,
        );
        if taken {
            let c = &self.inner.counters.summarized_pages;
            c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        taken
    }

    fn offer_runs(&self, source: usize, mem: &Memtable, from: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut taken = Vec::new();
        let end = match &self.end {
            Bound::Included(k) => Bound::Included(k.as_slice()),
            Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
            Bound::Unbounded => Bound::Unbounded,
        };
        for run in mem.runs(Bound::Included(from), end, self.snapshot) {
            let Some(summary) = run.summary else { continue };
            // A run as a page of its memtable (no range delete applied to it), checked alike.
            let pm = PageMeta {
                offset: 0,
                len: 0,
                entries: run.entries,
                min_key: run.min_key,
                max_key: run.max_key,
                min_dkey: run.min_dkey,
                max_dkey: run.max_dkey,
                filter_offset: 0,
                filter_len: 0,
                summary: None,
            };
            let seqs = (run.min_seq, run.max_seq);
            if self.answers(Source::Memtable(source), &pm, seqs, 0, &summary) {
                taken.push((pm.min_key, pm.max_key));
            }
        }
        if !taken.is_empty() {
            let c = &self.inner.counters.summarized_runs;
            c.fetch_add(taken.len() as u64, std::sync::atomic::Ordering::Relaxed);
        }
        taken
    }
}
