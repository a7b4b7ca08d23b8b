//! RangeReduce's Bounded-Merge: a range scan over data that sits in two levels makes the
//! background merge the shallower level's files of that range into the deeper one, and every
//! row reads the same afterwards (and after a restart).

#![allow(clippy::unwrap_used)] // tests: a failed step should fail the test

use ebb_storage::{Engine, Options, TileLayout};

fn key(s: u64, t: u64) -> Vec<u8> {
    let mut k = vec![0, 0, 0, 3];
    k.extend_from_slice(&s.to_be_bytes());
    k.extend_from_slice(&t.to_be_bytes());
    k
}

fn opts(reduce: Option<f64>) -> Options {
    Options {
        write_buffer_size: 32 << 10,
        page_size: 512,
        target_file_size: 32 << 10,
        base_level_size: 64 << 10,
        level0_compaction_trigger: 2,
        memtable_max_age: None,
        background_threads: false,
        tiles: TileLayout::Fixed(vec![1]),
        range_reduce: reduce,
        ..Options::default()
    }
}

fn rows(e: &Engine) -> Vec<(Vec<u8>, Vec<u8>)> {
    let (lo, hi) = (key(0, 0), key(u64::MAX, 0));
    e.scan(lo..hi, None)
        .unwrap()
        .map(|r| r.unwrap())
        .map(|(k, v)| (k.to_vec(), v.to_vec()))
        .collect()
}

/// Old data pushed below level 1 by size, then updates of part of it, mostly in level 1.
fn load(e: &Engine) {
    let mut seq = 1;
    for i in 0..4000u64 {
        e.put(key(i % 40, i), vec![1u8; 60], seq).unwrap();
        seq += 1;
    }
    e.flush().unwrap();
    e.wait_for_background().unwrap();
    for i in 0..1500u64 {
        e.put(key(i % 40, i), vec![2u8; 60], seq).unwrap();
        seq += 1;
    }
    e.flush().unwrap();
    e.wait_for_background().unwrap();
}

fn reduces(e: &Engine) -> usize {
    e.compaction_history().iter().filter(|r| r.reason == "range_reduce").count()
}

#[test]
fn a_scan_over_two_levels_merges_them() {
    let d = tempfile::tempdir().unwrap();
    let e = Engine::open(d.path(), opts(Some(0.1))).unwrap();
    load(&e);
    let st = e.stats();
    let populated: Vec<usize> = (1..st.levels.len()).filter(|&l| st.levels[l].files > 0).collect();
    assert!(populated.len() >= 2, "data in two levels first: {:?}", st.levels);
    let before = rows(&e);
    assert_eq!(before.len(), 4000);
    assert_eq!(before.iter().filter(|(_, v)| v[0] == 2).count(), 1500);
    assert_eq!(reduces(&e), 0, "only scans trigger it");
    let entries_before: u64 = e.stats().levels.iter().map(|l| l.entries).sum();
    e.wait_for_background().unwrap();
    assert_eq!(reduces(&e), 1, "the scan's range passed the gates");
    let r = e.compaction_history().into_iter().find(|r| r.reason == "range_reduce").unwrap();
    assert_eq!(r.output_level, r.level + 1);
    // The shadowed versions are gone and every row reads the same, also after a restart.
    let entries_after: u64 = e.stats().levels.iter().map(|l| l.entries).sum();
    assert!(entries_after < entries_before, "{entries_after} < {entries_before}");
    assert_eq!(rows(&e), before);
    drop(e);
    let e = Engine::open(d.path(), opts(Some(0.1))).unwrap();
    assert_eq!(rows(&e), before);

    // Off: the same scan compacts nothing.
    let d = tempfile::tempdir().unwrap();
    let e = Engine::open(d.path(), opts(None)).unwrap();
    load(&e);
    let _ = rows(&e);
    e.wait_for_background().unwrap();
    assert_eq!(reduces(&e), 0);
}
