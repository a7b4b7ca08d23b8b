//! The tuned KiWi+ layout: h = 1 until time deletes appear, the time-series default until an
//! epoch is counted, then the cost model on the counted operations; new files follow it.

#![allow(clippy::unwrap_used)] // tests: a failed step should fail the test

use std::time::Duration;

use ebb_storage::{
    Clock, Engine, LayoutReason, LayoutTuning, ManualClock, Options, TileLayout, TimeToDeleteKey,
};

use crate::common::START_MS;

fn opts(clock: &ManualClock) -> Options {
    Options {
        write_buffer_size: 16 << 10,
        page_size: 512,
        target_file_size: 64 << 10,
        base_level_size: 64 << 10,
        level0_compaction_trigger: 2,
        memtable_max_age: None,
        background_threads: false,
        clock: Clock::manual(clock),
        time_to_delete_key: TimeToDeleteKey::millis(),
        tiles: TileLayout::Tuned(LayoutTuning {
            epoch: Duration::from_secs(60),
            ..LayoutTuning::default()
        }),
        ..Options::default()
    }
}

fn key(s: u64, ms: u64) -> Vec<u8> {
    let mut k = vec![1, 0, 0, 0];
    k.extend_from_slice(&s.to_be_bytes());
    k.extend_from_slice(&ms.to_be_bytes());
    k
}

/// Writes `n` rows of 16 series from sequence number `seq` on; returns the next one.
fn fill(e: &Engine, mut seq: u64, t0: u64, n: u64) -> u64 {
    for i in 0..n {
        e.put(key(i % 16, t0 + i), vec![7u8; 40], seq).unwrap();
        seq += 1;
    }
    e.flush().unwrap();
    e.wait_for_background().unwrap();
    seq
}

/// Tile sizes of the files at `level`.
fn tiles_at(e: &Engine, level: usize) -> Vec<u32> {
    e.files().into_iter().filter(|(l, _)| *l == level).map(|(_, f)| f.props.tile_pages).collect()
}

#[test]
fn layout_follows_deletes_then_counts() {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let e = Engine::open(d.path(), opts(&clock)).unwrap();
    let l = e.layout();
    assert_eq!(l.reason, LayoutReason::NoTimeDeletes);
    assert!(l.tile_pages.iter().all(|&h| h == 1), "{l:?}");
    let mut seq = fill(&e, 1, 0, 3000);
    assert!(e.files().iter().all(|(_, f)| f.props.tile_pages == 1));

    // A time-window delete: the time-series default, h > 1 from level 1.
    e.delete_time_range(0, 10, key(0, 0)[..4].to_vec(), Vec::<u8>::new(), seq).unwrap();
    seq += 1;
    let l = e.layout();
    assert_eq!(l.reason, LayoutReason::TimeSeriesDefault);
    assert_eq!(l.tile_pages[0], 1);
    assert!(l.tile_pages[1] > 1, "{l:?}");
    seq = fill(&e, seq, 3000, 3000);
    e.compact_range(None, None).unwrap();
    let deep: Vec<u32> = (1..7).flat_map(|lvl| tiles_at(&e, lvl)).collect();
    assert!(!deep.is_empty() && deep.iter().all(|&h| h > 1), "{deep:?}");

    // An epoch of short one-series scans and lookups: the model shrinks the tiles.
    for i in 0..20_000u64 {
        let s = i % 16;
        let _ = e.scan(key(s, 100)..key(s, 200), None).unwrap().count();
        let _ = e.get(&key(s, 99_999), None).unwrap();
    }
    let counted = e.layout().current;
    assert_eq!(counted.short_scans, 20_000);
    assert_eq!(counted.empty_lookups, 20_000);
    assert_eq!(counted.window_deletes, 1);
    clock.advance(61_000);
    let read_heavy = e.layout();
    assert_eq!(read_heavy.reason, LayoutReason::Measured);
    assert_eq!(read_heavy.epochs, 1);
    assert_eq!(read_heavy.mix.unwrap().short_scans, 20_000.0);
    assert_eq!(read_heavy.current.short_scans, 0, "a new epoch starts empty");
    for lvl in 1..7 {
        assert!(read_heavy.tile_pages[lvl] <= l.tile_pages[lvl], "{read_heavy:?} vs {l:?}");
    }
    assert!(read_heavy.tile_pages[1] < l.tile_pages[1], "{read_heavy:?} vs {l:?}");

    // Epochs of many time-window deletes and nothing else: tiles grow back.
    for _ in 0..4 {
        for t in 0..40 {
            e.delete_time_range(t, t + 1, key(0, 0)[..4].to_vec(), Vec::<u8>::new(), seq).unwrap();
            seq += 1;
        }
        clock.advance(61_000);
    }
    let delete_heavy = e.layout();
    assert_eq!(delete_heavy.epochs, 5);
    assert_eq!(delete_heavy.mix.unwrap().window_deletes, (1.0 + 40.0) / 2.0);
    assert!(delete_heavy.tile_pages[1] > read_heavy.tile_pages[1], "{delete_heavy:?}");
    // New files follow the layout of their level.
    fill(&e, seq, 6000, 3000);
    e.compact_range(None, None).unwrap();
    let want = delete_heavy.tile_pages.clone();
    for (lvl, f) in e.files() {
        assert_eq!(f.props.tile_pages as usize, want[lvl.min(want.len() - 1)], "level {lvl}");
    }
}

#[test]
fn retention_alone_turns_the_default_on_and_fixed_sizes_stay() {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let e = Engine::open(d.path(), opts(&clock)).unwrap();
    e.set_retention(vec![1, 0, 0, 0], Some(Duration::from_secs(3600))).unwrap();
    assert_eq!(e.layout().reason, LayoutReason::TimeSeriesDefault);
    clock.advance(61_000);
    // An epoch without any operation: retention still counts one purge per epoch.
    let l = e.layout();
    assert_eq!(l.reason, LayoutReason::Measured);
    assert_eq!(l.mix.unwrap().window_deletes, 1.0);
    assert!(l.tile_pages[1] > 1, "{l:?}");
    drop(e);

    let d = tempfile::tempdir().unwrap();
    let fixed = Options { tiles: TileLayout::Fixed(vec![1, 3]), ..opts(&clock) };
    let e = Engine::open(d.path(), fixed).unwrap();
    let l = e.layout();
    assert_eq!((l.reason, l.tile_pages), (LayoutReason::Configured, vec![1, 3]));
}

#[test]
fn level_renaming_moves_levels_down_without_rewriting() {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let o = Options {
        level_renaming: true,
        num_levels: 5,
        base_level_size: 32 << 10,
        delete_deadline: None,
        ..opts(&clock)
    };
    let e = Engine::open(d.path(), o.clone()).unwrap();
    let mut seq = 1;
    for round in 0..8 {
        seq = fill(&e, seq, round * 3000, 3000);
    }
    let h = e.compaction_history();
    let renames: Vec<_> = h.iter().filter(|r| r.kind == "level_rename").collect();
    assert!(!renames.is_empty(), "{:?}", h.iter().map(|r| r.kind).collect::<Vec<_>>());
    assert!(renames.iter().all(|r| r.bytes_written == 0 && r.output_level >= 2));
    // Every row is still there, and again after a restart (the renames went through the
    // manifest).
    let count = |e: &Engine| e.scan::<&[u8]>(.., None).unwrap().count();
    assert_eq!(count(&e), 8 * 3000);
    drop(e);
    let e = Engine::open(d.path(), o).unwrap();
    assert_eq!(count(&e), 8 * 3000);
    // Levels stay sorted and disjoint: a key lookup finds each row.
    for t in (0..24_000).step_by(997) {
        let t0 = t / 3000 * 3000;
        assert!(e.get(&key((t - t0) % 16, t), None).unwrap().is_some(), "row {t}");
    }
}
