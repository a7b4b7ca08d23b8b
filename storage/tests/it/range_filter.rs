//! Range filters in the engine: one-series scans skip files that hold nothing in their range,
//! and return exactly what an engine without filters returns.

#![allow(clippy::unwrap_used)] // tests: a failed step should fail the test

use ebb_storage::{Engine, Options};

fn key(series: u64, t: u64) -> Vec<u8> {
    let mut k = vec![0, 0, 0, 7];
    k.extend_from_slice(&series.to_be_bytes());
    k.extend_from_slice(&t.to_be_bytes());
    k
}

fn opts(filter: bool) -> Options {
    let d = Options::default();
    Options {
        write_buffer_size: 64 << 10,
        level0_compaction_trigger: 8,
        level0_stop_writes_trigger: 20,
        memtable_max_age: None,
        background_threads: false,
        range_filter: if filter { d.range_filter.clone() } else { None },
        ..d
    }
}

/// Six flushes, each holding 40 of 240 series at irregular times.
fn fill(e: &Engine) {
    let mut seq = 1;
    for round in 0..6u64 {
        for s in round * 40..round * 40 + 40 {
            for i in 0..20u64 {
                let t = 1_000_000_000 * (i * 60 + (s * 7 + i * 13) % 50);
                e.put(key(s, t), vec![b'v'; 16], seq).unwrap();
                seq += 1;
            }
        }
        e.flush().unwrap();
    }
}

fn scan(e: &Engine, s: u64, t0: u64, t1: u64) -> Vec<Vec<u8>> {
    e.scan(key(s, t0)..key(s, t1), None).unwrap().map(|r| r.unwrap().0.to_vec()).collect()
}

#[test]
fn one_series_scans_skip_files_and_match_unfiltered() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let with = Engine::open(a.path(), opts(true)).unwrap();
    let without = Engine::open(b.path(), opts(false)).unwrap();
    // The engines learn the span of one-series scans first: filters are sized for it.
    for e in [&with, &without] {
        for s in 0..100 {
            assert!(scan(e, s, 0, 30_000_000_000).is_empty());
        }
        fill(e);
    }
    assert!(with.files().len() >= 6, "{:?}", with.files().len());
    let (mut rows, mut empty) = (0, 0);
    for s in (0..260u64).step_by(3) {
        for w in 0..30u64 {
            let (t0, t1) = (w * 40_000_000_000, w * 40_000_000_000 + 30_000_000_000);
            let got = scan(&with, s, t0, t1);
            assert_eq!(got, scan(&without, s, t0, t1), "series {s} window {w}");
            rows += got.len();
            empty += usize::from(got.is_empty() && s < 240);
        }
    }
    assert!(rows > 500, "the scans found rows: {rows}");
    let st = with.stats();
    // About a third of the windows of a stored series are empty; the filters find most of
    // them without opening the file.
    assert!(empty > 500, "{empty}");
    assert!(st.range_filter_skips as f64 > 0.7 * empty as f64, "{empty} empty: {st:?}");
    assert_eq!(without.stats().range_filter_probes, 0);
}

/// The global filter's buckets are fixed at open: sized for the 30 s scans below.
fn global_opts() -> Options {
    let range_filter = Some(ebb_storage::filter::RangeFilterOptions {
        default_range: 30_000_000_000,
        ..Default::default()
    });
    Options { global_range_filter: true, range_filter, ..opts(true) }
}

/// One probe of the global filter per scan replaces one per file, and skips at least as much.
#[test]
fn the_global_filter_probes_once_per_scan_and_matches_unfiltered() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let with = Engine::open(a.path(), global_opts()).unwrap();
    let without = Engine::open(b.path(), opts(false)).unwrap();
    for e in [&with, &without] {
        fill(e);
    }
    let files = with.files().len();
    assert!(files >= 6, "{files}");
    let check = |e: &Engine, label: &str| {
        let before = e.stats();
        let mut scans = 0u64;
        for s in (0..260u64).step_by(3) {
            for w in 0..30u64 {
                let (t0, t1) = (w * 40_000_000_000, w * 40_000_000_000 + 30_000_000_000);
                assert_eq!(scan(e, s, t0, t1), scan(&without, s, t0, t1), "{label}: {s} {w}");
                scans += 1;
            }
        }
        let st = e.stats();
        assert_eq!(st.global_filter_probes - before.global_filter_probes, scans, "{label}");
        assert_eq!(st.range_filter_probes, before.range_filter_probes, "{label}: no file probed");
        scans
    };
    let scans = check(&with, "level 0");
    // About a third of the windows of a stored series are empty: the filter skips the file.
    let st = with.stats();
    assert!(st.global_filter_skips * 5 >= scans, "{scans} scans: {st:?}");
    assert!(st.global_filter_cells > 0 && st.global_filter_bytes > 0, "{st:?}");

    // Compaction moves the cells to deeper levels; a reopened engine reads them from the files.
    with.compact_range(None, None).unwrap();
    assert!(with.stats().levels[0].files == 0, "{:?}", with.stats().levels);
    check(&with, "compacted");
    let cells = with.stats().global_filter_cells;
    drop(with);
    let reopened = Engine::open(a.path(), global_opts()).unwrap();
    assert_eq!(reopened.stats().global_filter_cells, cells);
    check(&reopened, "reopened");
}

/// An iterator opened before a compaction reads the files (and filter) of its own version.
#[test]
fn a_scan_open_across_a_compaction_sees_its_version() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(dir.path(), global_opts()).unwrap();
    fill(&e);
    let s = 41;
    let all = scan(&e, s, 0, u64::MAX);
    assert_eq!(all.len(), 20);
    let mut it = e.scan(key(s, 0)..key(s, u64::MAX), None).unwrap();
    let first = it.next().unwrap().unwrap().0.to_vec();
    e.compact_range(None, None).unwrap();
    let rest: Vec<Vec<u8>> = it.map(|r| r.unwrap().0.to_vec()).collect();
    assert_eq!(std::iter::once(first).chain(rest).collect::<Vec<_>>(), all);
    assert_eq!(scan(&e, s, 0, u64::MAX), all);
}
