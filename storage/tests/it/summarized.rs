//! Summarized scans against plain scans: every row is counted exactly once, whether it comes
//! from a page summary, from a memtable run's summary or is returned, through overwrites,
//! point, range and time-window deletes, retention, snapshots, flushes, compactions and
//! reopening.

#![allow(clippy::unwrap_used)] // tests: a failed step should fail the test

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ebb_storage::{
    Clock, Engine, ManualClock, Options, PageSummarizer, PageTaker, RunKey, SummarizedPage,
    TileLayout,
};
use proptest::prelude::*;

use crate::common::START_MS;

/// Count and sum of the values (u64 little-endian) of a page; memtable runs of one series
/// over 16 consecutive times.
#[derive(Debug)]
struct SumCount;

impl PageSummarizer for SumCount {
    fn summarize(&self, entries: &mut dyn Iterator<Item = (&[u8], &[u8])>) -> Option<Vec<u8>> {
        let (mut n, mut sum) = (0u64, 0u64);
        for (_, v) in entries {
            n += 1;
            sum = sum.wrapping_add(u64::from_le_bytes(v.try_into().ok()?));
        }
        let mut out = n.to_le_bytes().to_vec();
        out.extend_from_slice(&sum.to_le_bytes());
        Some(out)
    }

    fn run_of(&self, key: &[u8]) -> Option<RunKey> {
        let t = u64::from_be_bytes(key.get(8..16)?.try_into().ok()?);
        Some(RunKey { prefix_len: 8, slot: (t / 16) as i64 })
    }
}

/// Adds up what it takes; takes every page it is offered (or none).
#[derive(Default)]
struct Totals {
    refuse: bool,
    pages: AtomicU64,
    rows: AtomicU64,
    sum: AtomicU64,
}

impl PageTaker for Totals {
    fn take(&self, page: &SummarizedPage<'_>) -> bool {
        if self.refuse {
            return false;
        }
        let n = u64::from_le_bytes(page.summary[..8].try_into().unwrap());
        assert_eq!(n, u64::from(page.entries));
        assert!(page.min_key <= page.max_key && page.min_dkey <= page.max_dkey);
        self.pages.fetch_add(1, Ordering::Relaxed);
        self.rows.fetch_add(n, Ordering::Relaxed);
        let s = u64::from_le_bytes(page.summary[8..16].try_into().unwrap());
        self.sum.fetch_add(s, Ordering::Relaxed);
        true
    }
}

/// Writes one row; rows older than a retention rule are refused, as they should be.
fn put(e: &Engine, k: Vec<u8>, v: u64, seq: u64) {
    match e.put(k, v.to_le_bytes().to_vec(), seq) {
        Ok(()) | Err(ebb_storage::Error::BeyondRetention { .. }) => {}
        Err(other) => panic!("{other}"),
    }
}

fn key(s: u64, t: u64) -> Vec<u8> {
    let mut k = s.to_be_bytes().to_vec();
    k.extend_from_slice(&t.to_be_bytes());
    k
}

fn opts(clock: &ManualClock, h: usize) -> Options {
    Options {
        write_buffer_size: 16 << 10,
        page_size: 256,
        target_file_size: 16 << 10,
        base_level_size: 32 << 10,
        level0_compaction_trigger: 3,
        tiles: TileLayout::Fixed(vec![h]),
        memtable_max_age: None,
        background_threads: false,
        clock: Clock::manual(clock),
        page_summary: Some(Arc::new(SumCount)),
        ..Options::default()
    }
}

type Window = (u64, u64, u64, u64);

/// (rows, sum, pages answered from summaries) of the keys of series `[s_lo, s_hi)` at times
/// `[t_lo, t_hi)`, summarized or not.
fn totals(
    e: &Engine,
    (s_lo, s_hi, t_lo, t_hi): Window,
    snap: Option<&ebb_storage::Snapshot>,
    summarized: bool,
) -> (u64, u64, u64) {
    let taker = Arc::new(Totals { refuse: !summarized, ..Default::default() });
    let range = key(s_lo, 0)..key(s_hi, 0);
    let iter = e.scan_summarized(range, Some((t_lo, t_hi)), snap, taker.clone()).unwrap();
    let (mut rows, mut sum) = (0u64, 0u64);
    for item in iter {
        let (_, v) = item.unwrap();
        rows += 1;
        sum = sum.wrapping_add(u64::from_le_bytes(v.as_ref().try_into().unwrap()));
    }
    let t = &taker;
    (
        rows + t.rows.load(Ordering::Relaxed),
        sum.wrapping_add(t.sum.load(Ordering::Relaxed)),
        t.pages.load(Ordering::Relaxed),
    )
}

#[derive(Debug, Clone)]
enum Op {
    /// Series, time, value.
    Put(u64, u64, u64),
    /// A run of puts: series, first time, count.
    Run(u64, u64, u64),
    Delete(u64, u64),
    /// Range delete of series `[a, b)`.
    DeleteSeries(u64, u64),
    /// Time-window delete of times `[a, b)` over every series.
    DeleteWindow(u64, u64),
    Retention(u64),
    Flush,
    Compact,
    Snapshot,
    Reopen,
    /// Summarized scans against plain ones, midway (memtable runs then keep the summaries
    /// made, for the writes that follow).
    Check,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..6u64, 0..200u64, any::<u32>()).prop_map(|(s, t, v)| Op::Put(s, t, u64::from(v))),
        6 => (0..6u64, 0..200u64, 1..80u64).prop_map(|(s, t, n)| Op::Run(s, t, n)),
        1 => (0..6u64, 0..200u64).prop_map(|(s, t)| Op::Delete(s, t)),
        1 => (0..6u64, 1..3u64).prop_map(|(s, n)| Op::DeleteSeries(s, s + n)),
        1 => (0..200u64, 1..40u64).prop_map(|(t, n)| Op::DeleteWindow(t, t + n)),
        1 => (20..200u64).prop_map(Op::Retention),
        3 => Just(Op::Flush),
        2 => Just(Op::Compact),
        1 => Just(Op::Snapshot),
        1 => Just(Op::Reopen),
        2 => Just(Op::Check),
    ]
}

fn window() -> impl Strategy<Value = Window> {
    (0..6u64, 1..7u64, 0..200u64, 1..220u64).prop_map(|(s, n, t, m)| (s, s + n, t, t + m))
}

fn check(e: &Engine, windows: &[Window], snap: Option<&ebb_storage::Snapshot>) -> u64 {
    let mut pages = 0;
    for w in windows {
        let (rows, sum, _) = totals(e, *w, snap, false);
        let (srows, ssum, taken) = totals(e, *w, snap, true);
        assert_eq!((srows, ssum), (rows, sum), "window {w:?}");
        pages += taken;
    }
    pages
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn summarized_scans_count_every_row_once(
        ops in proptest::collection::vec(op(), 1..60),
        windows in proptest::collection::vec(window(), 4),
        h in prop_oneof![Just(1usize), Just(4)],
    ) {
        let d = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(START_MS);
        let mut e = Engine::open(d.path(), opts(&clock, h)).unwrap();
        let mut seq = 0;
        let mut snap = None;
        for op in ops {
            match op {
                Op::Put(s, t, v) => {
                    seq += 1;
                    put(&e, key(s, t), v, seq);
                }
                Op::Run(s, t, n) => {
                    for i in 0..n {
                        seq += 1;
                        put(&e, key(s, t + i), seq * 7, seq);
                    }
                }
                Op::Delete(s, t) => {
                    seq += 1;
                    e.delete(key(s, t), seq).unwrap();
                }
                Op::DeleteSeries(a, b) => {
                    seq += 1;
                    e.delete_range(key(a, 0), key(b, 0), seq).unwrap();
                }
                Op::DeleteWindow(a, b) => {
                    seq += 1;
                    e.delete_time_range(a, b, Vec::new(), Vec::new(), seq).unwrap();
                }
                Op::Retention(age) => {
                    // The delete keys (0..300) lie far below any horizon on this clock, so
                    // the rule hides all of series 2.
                    e.set_retention(key(2, 0)[..8].to_vec(), Some(Duration::from_secs(age))).unwrap();
                }
                Op::Flush => e.flush().unwrap(),
                Op::Compact => e.compact_range(None, None).unwrap(),
                Op::Snapshot => snap = Some(e.snapshot()),
                Op::Reopen => {
                    snap = None;
                    e.flush().unwrap();
                    drop(e);
                    e = Engine::open(d.path(), opts(&clock, h)).unwrap();
                }
                Op::Check => {
                    check(&e, &windows, snap.as_ref());
                }
            }
        }
        check(&e, &windows, None);
        if let Some(s) = &snap {
            check(&e, &windows, Some(s));
        }
        e.flush().unwrap();
        e.compact_range(None, None).unwrap();
        check(&e, &windows, None);
    }
}

/// After a flush and a full compaction, a scan over whole series answers almost every page
/// from its summary; a write into the range, a delete, or a snapshot older than the pages
/// takes those pages back to rows.
#[test]
fn settled_pages_are_answered_from_summaries() {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let e = Engine::open(d.path(), opts(&clock, 4)).unwrap();
    let old = e.snapshot();
    let mut seq = 0;
    for s in 0..4 {
        for t in 0..500 {
            seq += 1;
            e.put(key(s, t), t.to_le_bytes().to_vec(), seq).unwrap();
        }
    }
    e.flush().unwrap();
    e.compact_range(None, None).unwrap();
    let all = (0, 4, 0, 1000);
    let (rows, sum, pages) = totals(&e, all, None, true);
    assert_eq!((rows, sum), (2000, 4 * (0..500).sum::<u64>()));
    assert!(pages > 20, "only {pages} pages answered from summaries");
    assert_eq!(e.stats().summarized_pages, pages);
    // The snapshot taken before any write sees nothing, summaries or not.
    assert_eq!(totals(&e, all, Some(&old), true), (0, 0, 0));
    drop(old); // (a live snapshot below a delete keeps compactions from applying it)
               // A newer version of one row in the memtable: its page is read, the new value counts.
    seq += 1;
    e.put(key(1, 100), 1_000_000u64.to_le_bytes().to_vec(), seq).unwrap();
    let (rows2, sum2, pages2) = totals(&e, all, None, true);
    assert_eq!((rows2, sum2), (2000, sum - 100 + 1_000_000));
    assert!(pages2 < pages && pages2 > 0, "{pages2} of {pages}");
    // A range delete newer than the files: nothing is answered from them until compaction.
    seq += 1;
    e.delete_range(key(3, 0), key(4, 0), seq).unwrap();
    let (rows3, _, pages3) = totals(&e, all, None, true);
    assert_eq!((rows3, pages3), (1500, 0));
    e.flush().unwrap();
    e.compact_range(None, None).unwrap();
    let (rows4, _, pages4) = totals(&e, all, None, true);
    assert_eq!(rows4, 1500);
    assert!(pages4 > 10, "{pages4}");
}

/// Rows still in the memtable are answered from the summaries of their runs, made by the first
/// scan that needs them and kept until a row arrives in the run; a second version of a key or
/// a delete takes its run back to rows, and so does a snapshot older than the run's newest
/// row, or a newer version of its keys in another memtable.
#[test]
fn memtable_runs_are_answered_from_their_summaries() {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let e =
        Engine::open(d.path(), Options { write_buffer_size: 64 << 20, ..opts(&clock, 4) }).unwrap();
    let seq = std::cell::Cell::new(0);
    let next = || {
        seq.set(seq.get() + 1);
        seq.get()
    };
    let put = |s: u64, t: u64, v: u64| e.put(key(s, t), v.to_le_bytes().to_vec(), next()).unwrap();
    // 4 series x 80 even times: 10 runs of 8 rows each per series.
    for t in (0..160).step_by(2) {
        for s in 0..4 {
            put(s, t, t);
        }
    }
    let all = (0, 4, 0, 1000);
    let sum0 = 4 * (0..160).step_by(2).sum::<u64>();
    let (rows, sum, pages) = totals(&e, all, None, true);
    assert_eq!((rows, sum, pages), (320, sum0, 40), "every run answered from its summary");
    assert_eq!(e.stats().summarized_runs, 40);
    assert_eq!(e.stats().summarized_pages, 0);
    // A time window cutting runs: only the runs inside it (times 16..32, one per series).
    let (rows, _, pages) = totals(&e, (0, 4, 8, 40), None, true);
    assert_eq!((rows, pages), (4 * 16, 4));
    let snap = e.snapshot();
    // A new row in a summarized run: the run is summarized again, with it.
    put(1, 21, 1_000);
    assert_eq!(totals(&e, all, None, true), (321, sum0 + 1_000, 40));
    // A second version of one key: its run is read, the others still summarized.
    put(1, 20, 5);
    assert_eq!(totals(&e, all, None, true), (321, sum0 + 1_000 - 20 + 5, 39));
    // The snapshot taken before both reads what it saw.
    assert_eq!(totals(&e, all, Some(&snap), true).0, 320);
    // A run of one row is read; a second version or a delete leaves a run to be read.
    put(2, 160, 7);
    put(3, 158, 9);
    e.delete(key(0, 0), next()).unwrap();
    let (rows, _, pages) = totals(&e, all, None, true);
    assert_eq!(rows, 321);
    assert_eq!(pages, 37, "runs (0, 0), (1, 1) and (3, 9) are read");
    drop(snap);
    // The memtable sealed, newer versions of series 2 in the next: series 2's runs are read.
    e.flush().unwrap();
    for t in 0..16 {
        put(2, t, 1);
    }
    let (plain, psum, _) = totals(&e, all, None, false);
    let (rows, sum, _) = totals(&e, all, None, true);
    assert_eq!((rows, sum), (plain, psum));
    // A backfill, newest first: series 5's 1,000 runs (two rows each) all answered.
    for t in (0..2_000).rev() {
        put(5, t * 8, 1);
    }
    let (rows, sum, pages) = totals(&e, (5, 6, 0, u64::MAX), None, true);
    assert_eq!((rows, sum, pages), (2_000, 2_000, 1_000));
}
