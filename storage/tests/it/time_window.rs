//! Time-window deletes (KiWi page drops): semantics, page drops, crash recovery, persistence, and
//! physical absence of the deleted bytes from every file of the engine.

#![allow(clippy::unwrap_used)] // tests: a failed step should fail the test

use std::time::Duration;

use ebb_storage::{Clock, Compression, DeletionStatus, Engine, ManualClock, Options, TileLayout};

use crate::common::START_MS;

fn opts(clock: &ManualClock, compression: Compression) -> Options {
    Options {
        write_buffer_size: 16 << 10,
        page_size: 512,
        target_file_size: 32 << 10,
        base_level_size: 64 << 10,
        level0_compaction_trigger: 2,
        tiles: TileLayout::Fixed(vec![8]),
        memtable_max_age: None,
        compression,
        delete_deadline: Some(Duration::from_secs(60)),
        clock: Clock::manual(clock),
        ..Options::default()
    }
}

/// Key of series `s` at time `t`: the default delete-key extractor reads the trailing timestamp.
fn key(s: u64, t: u64) -> Vec<u8> {
    let mut k = s.to_be_bytes().to_vec();
    k.extend_from_slice(&t.to_be_bytes());
    k
}

const SERIES: u64 = 64;
const TIMES: u64 = 50;

/// Many series with few points each (high cardinality): pages of the classic layout span every
/// time, so only delete tiles let whole pages fall inside a window.
fn load(e: &Engine, value: impl Fn(u64, u64) -> Vec<u8>) -> u64 {
    let mut seq = 0;
    for t in 0..TIMES {
        for s in 0..SERIES {
            seq += 1;
            e.put(key(s, t), value(s, t), seq).unwrap();
        }
    }
    e.flush().unwrap();
    e.wait_for_background().unwrap();
    seq
}

fn count(e: &Engine, snap: Option<&ebb_storage::Snapshot>) -> usize {
    e.scan::<&[u8]>(.., snap).unwrap().count()
}

#[test]
fn hides_at_once_keeps_later_writes_and_drops_pages() {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let e = Engine::open(d.path(), opts(&clock, Compression::Lz4)).unwrap();
    let mut seq = load(&e, |s, t| format!("v{s}-{t}").into_bytes());
    let snap = e.snapshot();
    seq += 1;
    let del = seq;
    e.delete_time_range(10, 30, "", "", del).unwrap();
    // Hidden at once, for gets and scans; the snapshot still sees everything.
    assert_eq!(e.get(&key(3, 10), None).unwrap(), None);
    assert_eq!(e.get(&key(3, 29), None).unwrap(), None);
    assert!(e.get(&key(3, 30), None).unwrap().is_some());
    assert!(e.get(&key(3, 9), None).unwrap().is_some());
    assert_eq!(count(&e, None), (SERIES * (TIMES - 20)) as usize);
    assert_eq!(count(&e, Some(&snap)), (SERIES * TIMES) as usize);
    // A later write into the window stays visible.
    seq += 1;
    e.put(key(5, 15), "late", seq).unwrap();
    assert_eq!(e.get(&key(5, 15), None).unwrap().as_deref(), Some(&b"late"[..]));
    // The snapshot holds the execution back; released, the pages go.
    e.wait_for_background().unwrap();
    assert_eq!(e.stats().window_pages_dropped, 0, "a snapshot below the delete holds it back");
    drop(snap);
    e.wait_for_background().unwrap();
    let st = e.stats();
    assert!(st.window_pages_dropped > 0, "{st:?}");
    assert!(
        st.window_pages_dropped > st.window_pages_read,
        "whole pages dropped unread ({}) outnumber edge pages read ({})",
        st.window_pages_dropped,
        st.window_pages_read
    );
    let check = |e: &Engine| {
        assert_eq!(count(e, None), (SERIES * (TIMES - 20)) as usize + 1);
        assert_eq!(e.get(&key(5, 15), None).unwrap().as_deref(), Some(&b"late"[..]));
        assert_eq!(e.get(&key(7, 20), None).unwrap(), None);
        assert_eq!(e.get(&key(7, 40), None).unwrap().as_deref(), Some(&b"v7-40"[..]));
    };
    check(&e);
    e.flush().unwrap();
    e.wait_for_background().unwrap();
    let dl = e.deletion(del).unwrap();
    assert_eq!(dl.status(clock.now_ms()), DeletionStatus::Persisted, "{dl:?}");
    assert!(e.verify_deletion(del).unwrap().remaining.is_empty());
    e.close().unwrap();
    let e = Engine::open(d.path(), opts(&clock, Compression::Lz4)).unwrap();
    check(&e);
    // Compaction after page drops keeps everything right.
    e.compact_range(None, None).unwrap();
    check(&e);
    e.close().unwrap();
}

#[test]
fn key_range_limits_the_window_and_memtable_rows_are_filtered() {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let e = Engine::open(d.path(), opts(&clock, Compression::None)).unwrap();
    let mut seq = load(&e, |_, _| b"x".to_vec());
    // Unflushed rows inside the window, in and out of the key range.
    for s in 0..4 {
        seq += 1;
        e.put(key(s, 12), "mem", seq).unwrap();
    }
    seq += 1;
    let del = seq;
    e.delete_time_range(10, 20, key(2, 0), key(40, 0), del).unwrap();
    e.wait_for_background().unwrap();
    e.flush().unwrap();
    e.wait_for_background().unwrap();
    assert!(e.get(&key(1, 12), None).unwrap().is_some(), "below the key range");
    assert_eq!(e.get(&key(2, 12), None).unwrap(), None, "memtable row filtered");
    assert_eq!(e.get(&key(39, 15), None).unwrap(), None);
    assert!(e.get(&key(40, 15), None).unwrap().is_some(), "key range end is exclusive");
    assert_eq!(count(&e, None), (SERIES * TIMES - 38 * 10) as usize);
    assert!(e.verify_deletion(del).unwrap().remaining.is_empty());
    assert!(e.deletion(del).unwrap().is_persisted());
    e.close().unwrap();
}

#[test]
fn a_crash_before_execution_keeps_rows_hidden_and_executes_on_reopen() {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let e = Engine::open(d.path(), opts(&clock, Compression::Lz4)).unwrap();
    let mut seq = load(&e, |_, _| b"y".to_vec());
    let snap = e.snapshot(); // keeps the background from executing the window
    seq += 1;
    e.delete_time_range(0, 25, "", "", seq).unwrap();
    e.wait_for_background().unwrap();
    std::mem::forget(snap);
    drop(e); // crash: the window is only in the WAL and the ledger buffer
    let e = Engine::open(d.path(), opts(&clock, Compression::Lz4)).unwrap();
    assert_eq!(count(&e, None), (SERIES * (TIMES - 25)) as usize);
    e.wait_for_background().unwrap();
    assert!(e.stats().window_pages_dropped > 0);
    e.flush().unwrap();
    e.wait_for_background().unwrap();
    assert!(e.deletion(seq).unwrap().is_persisted());
    assert_eq!(count(&e, None), (SERIES * (TIMES - 25)) as usize);
    e.close().unwrap();
}

/// Writes rows carrying marker values, deletes them with every kind of delete, waits until the
/// ledger says all are persisted, and then reads every file of the engine: no marker in any raw
/// byte, nor in any decompressed block of any SST, and every byte an SST no longer reads is zero.
#[test]
fn deleted_bytes_are_physically_gone() {
    for compression in [Compression::None, Compression::Lz4] {
        let d = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(START_MS);
        let e = Engine::open(d.path(), opts(&clock, compression)).unwrap();
        let marked = |s: u64, t: u64| (10..20).contains(&t) || s == 7 || (s == 9 && t == 33);
        let value = |s: u64, t: u64| {
            if marked(s, t) {
                format!("MARKER-{s:04}-{t:04}-{}", "z".repeat(40)).into_bytes()
            } else {
                format!("plain-{s}-{t}").into_bytes()
            }
        };
        let mut seq = load(&e, value);
        seq += 1;
        e.delete_time_range(10, 20, "", "", seq).unwrap(); // a time window
        seq += 1;
        e.delete_range(key(7, 0), key(8, 0), seq).unwrap(); // one whole series
        seq += 1;
        e.delete(key(9, 33), seq).unwrap(); // one point
        for _ in 0..120 {
            clock.advance(1_000);
            e.wait_for_background().unwrap();
        }
        let pending: Vec<_> = e.deletions().into_iter().filter(|d| !d.is_persisted()).collect();
        assert!(pending.is_empty(), "{compression:?}: {pending:?}");
        let mut scanned = 0;
        for entry in std::fs::read_dir(d.path()).unwrap() {
            let path = entry.unwrap().path();
            let raw = std::fs::read(&path).unwrap();
            scanned += raw.len();
            assert!(!contains(&raw, b"MARKER-"), "{compression:?}: marker in {}", path.display());
        }
        assert!(scanned > 40_000, "scanned {scanned} bytes");
        for (_, meta) in e.files() {
            let (blocks, unread) =
                ebb_storage::sst::internals::sst_contents(d.path(), &meta).unwrap();
            for b in &blocks {
                assert!(
                    !contains(b, b"MARKER-"),
                    "{compression:?}: marker in a page of {}",
                    meta.id
                );
            }
            let path = d.path().join(format!("{:08}.sst", meta.id));
            let raw = std::fs::read(path).unwrap();
            for (off, len) in unread {
                let hole = &raw[off as usize..(off + len) as usize];
                assert!(hole.iter().all(|&b| b == 0), "unread bytes of {} not zeroed", meta.id);
            }
        }
        // The rest is intact.
        assert_eq!(e.get(&key(9, 32), None).unwrap().as_deref(), Some(&b"plain-9-32"[..]));
        e.close().unwrap();
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn page_drops_leave_checkpoints_untouched() {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let e = Engine::open(d.path().join("db"), opts(&clock, Compression::Lz4)).unwrap();
    let mut seq = load(&e, |s, t| format!("v{s}-{t}").into_bytes());
    e.checkpoint(d.path().join("cp")).unwrap(); // SSTs hard-linked
    seq += 1;
    e.delete_time_range(0, 40, "", "", seq).unwrap();
    e.wait_for_background().unwrap();
    e.flush().unwrap();
    e.wait_for_background().unwrap();
    assert!(e.stats().window_pages_dropped > 0);
    assert!(e.deletion(seq).unwrap().is_persisted());
    assert_eq!(count(&e, None), (SERIES * (TIMES - 40)) as usize);
    e.close().unwrap();
    let cp = Engine::open(d.path().join("cp"), opts(&clock, Compression::Lz4)).unwrap();
    assert_eq!(count(&cp, None), (SERIES * TIMES) as usize, "the checkpoint keeps its rows");
    assert_eq!(cp.get(&key(4, 4), None).unwrap().as_deref(), Some(&b"v4-4"[..]));
    cp.close().unwrap();
    let e = Engine::open(d.path().join("db"), opts(&clock, Compression::Lz4)).unwrap();
    assert_eq!(count(&e, None), (SERIES * (TIMES - 40)) as usize);
    e.close().unwrap();
}

#[test]
fn scan_time_equals_a_filtered_scan() {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let e = Engine::open(d.path(), opts(&clock, Compression::Lz4)).unwrap();
    let mut seq = load(&e, |s, t| format!("v{s}-{t}").into_bytes());
    for s in 0..10 {
        seq += 1;
        e.put(key(s, 21), "mem", seq).unwrap(); // unflushed rows
    }
    seq += 1;
    e.delete_time_range(24, 26, key(3, 0), key(9, 0), seq).unwrap();
    let dkey = |k: &[u8]| u64::from_be_bytes(k[8..16].try_into().unwrap());
    for (lo, hi, t_lo, t_hi) in [(0, SERIES, 20, 30), (5, 9, 0, 3), (2, 60, 45, 50), (0, 1, 0, 100)]
    {
        let all: Vec<_> = e
            .scan(key(lo, 0)..key(hi, 0), None)
            .unwrap()
            .map(Result::unwrap)
            .filter(|(k, _)| (t_lo..t_hi).contains(&dkey(k)))
            .collect();
        let timed: Vec<_> = e
            .scan_time(key(lo, 0)..key(hi, 0), t_lo, t_hi, None)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(timed, all, "series [{lo}, {hi}) times [{t_lo}, {t_hi})");
        assert!(!timed.is_empty());
    }
    e.close().unwrap();
}
