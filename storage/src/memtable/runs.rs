//! Runs of a memtable's rows, summarized once and kept, so that a summarized scan answers fresh
//! data as it answers flushed pages (see [`crate::sst::summary`]).
//!
//! The engine's [`PageSummarizer`] places each key in a run ([`PageSummarizer::run_of`]: for
//! EbbDB, one series over a slot of ten minutes). As rows arrive, each run keeps only its key
//! and delete-key bounds, its row count and its sequence numbers: a few comparisons per row,
//! inside the engine's serialised write, and no decoding. The first summarized scan that meets
//! a run with two rows or more summarizes it (one pass over its rows) and the run keeps that
//! summary while no row arrives in it; a dashboard asking every few seconds summarizes only
//! the runs written since it last asked (the newest of each series). A run that receives a
//! delete, or a second version of a key it holds, has no summary from then on (its rows are
//! read).

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use super::KeyBuf;
use crate::batch::EntryKind;
use crate::options::DeleteKeyExtractor;
use crate::sst::PageSummarizer;

/// Memory a run costs besides its summary, for the memtable's accounting.
pub(crate) const RUN_OVERHEAD: usize = 144;

/// One run.
#[derive(Debug)]
pub(crate) struct Run {
    min_key: KeyBuf,
    max_key: KeyBuf,
    min_dkey: u64,
    max_dkey: u64,
    entries: u32,
    min_seq: u64,
    max_seq: u64,
    /// Only puts, one version of each key, so far.
    clean: bool,
    /// Its summary, made when it held `.0` rows.
    summary: Option<(u32, Arc<[u8]>)>,
}

/// A run as a scan sees it: bounds, counts and, once made, its summary.
#[derive(Debug, Clone)]
pub(crate) struct RunView {
    pub min_key: Vec<u8>,
    pub max_key: Vec<u8>,
    pub min_dkey: u64,
    pub max_dkey: u64,
    pub entries: u32,
    pub min_seq: u64,
    pub max_seq: u64,
    pub summary: Option<Arc<[u8]>>,
}

/// Runs by key prefix (series), each prefix's by slot: ordered, so that rows written in any
/// time order (a backfill's, newest first) cost a logarithmic look-up each.
pub(crate) type RunMap = HashMap<KeyBuf, BTreeMap<i64, Run>, foldhash::fast::RandomState>;

/// The runs' map, locked for one batch of inserts.
pub(crate) type RunsGuard<'a> = MutexGuard<'a, RunMap>;

/// The runs of one memtable.
#[derive(Debug)]
pub(crate) struct Runs {
    summarizer: Arc<dyn PageSummarizer>,
    delete_key: DeleteKeyExtractor,
    map: Mutex<RunMap>,
}

impl Runs {
    /// Runs for the keys `summarizer` places in runs.
    pub fn new(summarizer: &Arc<dyn PageSummarizer>, delete_key: DeleteKeyExtractor) -> Runs {
        Runs { summarizer: summarizer.clone(), delete_key, map: Mutex::new(RunMap::default()) }
    }

    /// The summarizer.
    pub fn summarizer(&self) -> &Arc<dyn PageSummarizer> {
        &self.summarizer
    }

    /// Locks the runs for a batch of [`Runs::note`]s.
    pub fn lock(&self) -> RunsGuard<'_> {
        self.map.lock()
    }

    /// The key's run, if it belongs to one: its prefix and slot.
    pub fn run_of<'k>(&self, key: &'k [u8]) -> Option<(&'k [u8], i64)> {
        let r = self.summarizer.run_of(key)?;
        Some((key.get(..r.prefix_len)?, r.slot))
    }

    /// Records an entry written to the memtable, of `kind`, in run `(prefix, slot)` (`again`:
    /// the memtable already held a version of the key). Returns the memory it added, in bytes.
    pub fn note(
        &self,
        map: &mut RunsGuard<'_>,
        (prefix, slot): (&[u8], i64),
        (key, seq): (&[u8], u64),
        kind: EntryKind,
        again: bool,
    ) -> usize {
        let dkey = self.delete_key.extract(key);
        let clean = kind == EntryKind::Put && !again;
        let runs = map.entry(KeyBuf::from_slice(prefix)).or_default();
        let Some(run) = runs.get_mut(&slot) else {
            let k = KeyBuf::from_slice(key);
            let run = Run {
                min_key: k.clone(),
                max_key: k,
                min_dkey: dkey,
                max_dkey: dkey,
                entries: 1,
                min_seq: seq,
                max_seq: seq,
                clean,
                summary: None,
            };
            runs.insert(slot, run);
            return RUN_OVERHEAD;
        };
        run.entries = run.entries.saturating_add(1);
        run.min_seq = run.min_seq.min(seq);
        run.max_seq = run.max_seq.max(seq);
        run.min_dkey = run.min_dkey.min(dkey);
        run.max_dkey = run.max_dkey.max(dkey);
        if key < run.min_key.as_slice() {
            run.min_key = KeyBuf::from_slice(key);
        } else if key > run.max_key.as_slice() {
            run.max_key = KeyBuf::from_slice(key);
        }
        run.clean &= clean;
        run.summary = None;
        0
    }

    /// The clean runs of two rows or more lying wholly inside `[lo, hi]` whose rows are all
    /// visible at `snapshot`, with their summaries where made. A range inside one prefix (one
    /// series) looks at that prefix's runs only.
    pub fn views(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>, snapshot: u64) -> Vec<RunView> {
        let inside = |r: &Run| {
            let after = match lo {
                Bound::Included(k) => r.min_key.as_slice() >= k,
                Bound::Excluded(k) => r.min_key.as_slice() > k,
                Bound::Unbounded => true,
            };
            let before = match hi {
                Bound::Included(k) => r.max_key.as_slice() <= k,
                Bound::Excluded(k) => r.max_key.as_slice() < k,
                Bound::Unbounded => true,
            };
            after && before
        };
        let one_prefix = match (lo, hi) {
            (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => {
                let p = self.summarizer.run_of(a).map(|r| r.prefix_len);
                p.filter(|&p| b.len() >= p && a.get(..p) == b.get(..p)).and_then(|p| a.get(..p))
            }
            _ => None,
        };
        let map = self.map.lock();
        let runs: Box<dyn Iterator<Item = &Run>> = match one_prefix {
            Some(p) => Box::new(map.get(p).into_iter().flat_map(BTreeMap::values)),
            None => Box::new(map.values().flat_map(BTreeMap::values)),
        };
        runs.filter(|r| r.clean && r.entries > 1 && r.max_seq <= snapshot && inside(r))
            .map(|r| RunView {
                min_key: r.min_key.to_vec(),
                max_key: r.max_key.to_vec(),
                min_dkey: r.min_dkey,
                max_dkey: r.max_dkey,
                entries: r.entries,
                min_seq: r.min_seq,
                max_seq: r.max_seq,
                summary: r
                    .summary
                    .as_ref()
                    .filter(|(n, _)| *n == r.entries)
                    .map(|(_, s)| s.clone()),
            })
            .collect()
    }

    /// Keeps `summary`, made of `view`'s rows, if its run still holds just those rows.
    /// Returns the memory it added, in bytes.
    pub fn keep(&self, view: &RunView, summary: Arc<[u8]>) -> usize {
        let Some((prefix, slot)) = self.run_of(&view.min_key) else { return 0 };
        let mut map = self.map.lock();
        let Some(run) = map.get_mut(prefix).and_then(|runs| runs.get_mut(&slot)) else {
            return 0;
        };
        if !run.clean || run.entries != view.entries || run.summary.is_some() {
            return 0;
        }
        let bytes = summary.len();
        run.summary = Some((view.entries, summary));
        bytes
    }
}
