//! Summaries of a memtable's rows, kept as the rows arrive, so that a summarized scan answers
//! fresh data as it answers flushed pages (see [`crate::sst::summary`]).
//!
//! The engine's [`PageSummarizer`] places each key in a run ([`PageSummarizer::run_of`]: for
//! EbbDB, one series over a slot of time); each run keeps a running summary of its rows
//! ([`SummaryAccumulator`]), its key bounds, its row count and its sequence numbers. A run
//! that receives a delete, or a second version of a key it holds, keeps no summary from then
//! on (its rows are read). A run of one row keeps no summary either (its one row is cheap to
//! read): its accumulator is made when the second row arrives, so series written once cost
//! only the run's bounds.
//!
//! Writers are serialised by the engine and take the runs' lock once per batch; scans take it
//! once, to copy the summaries of the runs inside their range ([`Runs::views`]).

use std::collections::HashMap;
use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::{Mutex, MutexGuard};

use super::KeyBuf;
use crate::batch::EntryKind;
use crate::options::DeleteKeyExtractor;
use crate::sst::{PageSummarizer, SummaryAccumulator};

/// Memory a run costs besides its accumulator, for the memtable's accounting.
const RUN_OVERHEAD: usize = 160;

/// What a run knows of its rows.
#[derive(Debug)]
enum Summary {
    /// One row so far: its value (shared with the skiplist entry).
    One(Bytes),
    /// Two or more rows, summarized.
    Many(Box<dyn SummaryAccumulator>),
    /// A delete, a second version of a key, or a row the summarizer refused: no summary.
    None,
}

/// One run.
#[derive(Debug)]
pub(crate) struct Run {
    slot: i64,
    summary: Summary,
    min_key: KeyBuf,
    max_key: KeyBuf,
    min_dkey: u64,
    max_dkey: u64,
    entries: u32,
    min_seq: u64,
    max_seq: u64,
}

/// A run as a scan sees it: bounds, counts and summary bytes.
#[derive(Debug, Clone)]
pub(crate) struct RunView {
    pub min_key: Vec<u8>,
    pub max_key: Vec<u8>,
    pub min_dkey: u64,
    pub max_dkey: u64,
    pub entries: u32,
    pub min_seq: u64,
    pub max_seq: u64,
    pub summary: Vec<u8>,
}

/// The runs of one memtable.
#[derive(Debug)]
pub(crate) struct Runs {
    summarizer: Arc<dyn PageSummarizer>,
    delete_key: DeleteKeyExtractor,
    /// Per key prefix (series), its runs in slot order.
    map: Mutex<RunMap>,
}

/// Runs by key prefix, each prefix's in slot order.
pub(crate) type RunMap = HashMap<KeyBuf, Vec<Run>>;

/// The runs' map, locked for one batch of inserts.
pub(crate) type RunsGuard<'a> = MutexGuard<'a, RunMap>;

impl Runs {
    /// Runs summarized by `summarizer`, if it keeps memtable summaries.
    pub fn new(
        summarizer: &Arc<dyn PageSummarizer>,
        delete_key: DeleteKeyExtractor,
    ) -> Option<Runs> {
        summarizer.accumulator()?;
        Some(Runs { summarizer: summarizer.clone(), delete_key, map: Mutex::new(HashMap::new()) })
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

    /// Records an entry written to the memtable (`again`: the memtable already held a version
    /// of the key). Returns the memory it added, in bytes.
    #[allow(clippy::too_many_arguments)]
    pub fn note(
        &self,
        map: &mut RunsGuard<'_>,
        (prefix, slot): (&[u8], i64),
        key: &[u8],
        seq: u64,
        kind: EntryKind,
        value: &Bytes,
        again: bool,
    ) -> usize {
        let dkey = self.delete_key.extract(key);
        if !map.contains_key(prefix) {
            map.insert(KeyBuf::from_slice(prefix), Vec::new());
        }
        let Some(runs) = map.get_mut(prefix) else { return 0 };
        // Rows mostly arrive in time order: the slot is the last one, or near it.
        let at = match runs.iter().rposition(|r| r.slot <= slot) {
            Some(i) if runs[i].slot == slot => i,
            found => {
                let summary = match kind {
                    EntryKind::Put if !again => Summary::One(value.clone()),
                    _ => Summary::None,
                };
                let k = KeyBuf::from_slice(key);
                let run = Run {
                    slot,
                    summary,
                    min_key: k.clone(),
                    max_key: k,
                    min_dkey: dkey,
                    max_dkey: dkey,
                    entries: 1,
                    min_seq: seq,
                    max_seq: seq,
                };
                runs.insert(found.map_or(0, |i| i + 1), run);
                return RUN_OVERHEAD;
            }
        };
        let run = &mut runs[at];
        let mut added = 0;
        run.entries = run.entries.saturating_add(1);
        run.min_seq = run.min_seq.min(seq);
        run.max_seq = run.max_seq.max(seq);
        run.min_dkey = run.min_dkey.min(dkey);
        run.max_dkey = run.max_dkey.max(dkey);
        if key < run.min_key.as_slice() {
            run.min_key = KeyBuf::from_slice(key);
        }
        if key > run.max_key.as_slice() {
            run.max_key = KeyBuf::from_slice(key);
        }
        if kind != EntryKind::Put || again {
            run.summary = Summary::None;
            return added;
        }
        run.summary = match std::mem::replace(&mut run.summary, Summary::None) {
            Summary::One(first) => {
                let Some(mut acc) = self.summarizer.accumulator() else { return added };
                // The first row's key: the run's other bound, as the second row made one of them.
                let first_key =
                    if key == run.min_key.as_slice() { &run.max_key } else { &run.min_key };
                if !(acc.add(first_key, &first) && acc.add(key, value)) {
                    return added;
                }
                added += acc.bytes();
                Summary::Many(acc)
            }
            Summary::Many(mut acc) => {
                let before = acc.bytes();
                if !acc.add(key, value) {
                    return added;
                }
                added += acc.bytes().saturating_sub(before);
                Summary::Many(acc)
            }
            Summary::None => Summary::None,
        };
        added
    }

    /// The summarized runs lying wholly inside `[lo, hi]`, ordered by their smallest key. A
    /// range inside one prefix (one series) looks at that prefix's runs only.
    pub fn views(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> Vec<RunView> {
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
            Some(p) => Box::new(map.get(p).into_iter().flatten()),
            None => Box::new(map.values().flatten()),
        };
        let mut out: Vec<RunView> = runs
            .filter(|r| inside(r))
            .filter_map(|r| {
                let Summary::Many(acc) = &r.summary else { return None };
                Some(RunView {
                    min_key: r.min_key.to_vec(),
                    max_key: r.max_key.to_vec(),
                    min_dkey: r.min_dkey,
                    max_dkey: r.max_dkey,
                    entries: r.entries,
                    min_seq: r.min_seq,
                    max_seq: r.max_seq,
                    summary: acc.summary()?,
                })
            })
            .collect();
        drop(map);
        out.sort_by(|a, b| a.min_key.cmp(&b.min_key));
        out
    }
}
