//! Page summaries: what a caller-supplied [`PageSummarizer`] computes from the values of a page
//! when the page is written (per-column minimum, maximum, sum and count, say), kept in the
//! file's index block beside the page's key and delete-key bounds.
//!
//! A scan given a [`PageTaker`] (see [`crate::Engine::scan_summarized`]) offers it every page it
//! could answer from the summary alone: the page holds only puts, one version of each key, all
//! visible at the scan's snapshot; no other memtable or file holds a key inside the page's key
//! range; no delete, retention rule or time window can hide any of its entries; and the page lies
//! wholly inside the scan's key range and time window. A page the taker takes is never read; the
//! scan returns every other entry as usual, so the taker's totals plus the returned rows are the
//! scan's rows exactly once. Memtables offer their runs of rows ([`PageSummarizer::run_of`])
//! under the same rules.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::batch::EntryKind;

/// Summarizes the `(key, value)` pairs of a page (in key order, each key once, all puts) into
/// bytes the engine stores and hands back to a [`PageTaker`], or `None` when the page has
/// nothing to summarize. Called when flushes, compactions and time-window page rewrites write
/// a page, so it must be fast and deterministic.
pub trait PageSummarizer: Send + Sync + std::fmt::Debug {
    /// The summary of one page's entries.
    fn summarize(&self, entries: &mut dyn Iterator<Item = (&[u8], &[u8])>) -> Option<Vec<u8>>;

    /// The memtable run `key` belongs to, for the memtable to summarize its rows by runs
    /// (see [`crate::memtable`]'s runs); `None` (the default) for a key no run holds. A run
    /// holds keys sharing the prefix and slot given; every key that sorts between two keys of
    /// one run must belong to that run. A run is summarized with [`PageSummarizer::summarize`].
    fn run_of(&self, _key: &[u8]) -> Option<RunKey> {
        None
    }
}

/// Which memtable run a key belongs to (see [`PageSummarizer::run_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RunKey {
    /// How many leading bytes of the key name its run (a series, say).
    pub prefix_len: usize,
    /// Which slot of the prefix's keys (a span of time, say).
    pub slot: i64,
}

/// The summary of one page as stored in the index block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PageSummary {
    /// Smallest sequence number in the page.
    pub min_seq: u64,
    /// Largest sequence number in the page.
    pub max_seq: u64,
    /// What the summarizer produced.
    pub data: Vec<u8>,
}

/// The summary of a page's entries (internal order), if the page can have one: only puts, one
/// version per key.
pub(crate) fn summarize<'a>(
    summarizer: Option<&Arc<dyn PageSummarizer>>,
    entries: impl Iterator<Item = (&'a [u8], u64, EntryKind, &'a [u8])> + Clone,
) -> Option<PageSummary> {
    let s = summarizer?;
    let (mut min_seq, mut max_seq) = (u64::MAX, 0);
    let mut last: Option<&[u8]> = None;
    for (key, seq, kind, _) in entries.clone() {
        if kind != EntryKind::Put || last == Some(key) {
            return None;
        }
        last = Some(key);
        (min_seq, max_seq) = (min_seq.min(seq), max_seq.max(seq));
    }
    last?;
    let data = s.summarize(&mut entries.map(|(k, _, _, v)| (k, v)))?;
    Some(PageSummary { min_seq, max_seq, data })
}

/// A page a summarized scan offers its [`PageTaker`].
#[derive(Debug, Clone, Copy)]
pub struct SummarizedPage<'a> {
    /// Smallest key in the page.
    pub min_key: &'a [u8],
    /// Largest key in the page.
    pub max_key: &'a [u8],
    /// Smallest delete key in the page.
    pub min_dkey: u64,
    /// Largest delete key in the page.
    pub max_dkey: u64,
    /// Number of entries (rows: one version per key).
    pub entries: u32,
    /// The [`PageSummarizer`]'s bytes.
    pub summary: &'a [u8],
}

/// Takes pages a summarized scan offers: returns `true` to use the summary instead of the
/// page's rows (the scan then skips the page), `false` to have its rows returned. Called on the
/// thread iterating the scan, from inside the iterator's calls.
pub trait PageTaker: Send + Sync {
    /// Takes `page` or leaves it to the scan.
    fn take(&self, page: &SummarizedPage<'_>) -> bool;
}
