//! Range deletes (GLORAN): semantics, snapshots, persistence, garbage collection.

#![allow(clippy::unwrap_used)] // tests: a failed step should fail the test

use ebb_storage::{Engine, Options, RangeIndexOptions, WriteBatch};

fn opts() -> Options {
    Options {
        write_buffer_size: 8 << 10,
        page_size: 512,
        target_file_size: 16 << 10,
        base_level_size: 32 << 10,
        level0_compaction_trigger: 2,
        memtable_max_age: None,
        range_index: RangeIndexOptions {
            page_size: 256,
            fanout: 3,
            level0_trigger: 2,
            base_level_pieces: 8,
            eve_initial_capacity: 4,
            ..RangeIndexOptions::default()
        },
        ..Options::default()
    }
}

fn k(i: u32) -> Vec<u8> {
    i.to_be_bytes().to_vec()
}

fn get(e: &Engine, i: u32) -> Option<String> {
    e.get(&k(i), None).unwrap().map(|v| String::from_utf8(v.to_vec()).unwrap())
}

fn live(e: &Engine) -> Vec<u32> {
    e.scan::<&[u8]>(.., None)
        .unwrap()
        .map(|r| u32::from_be_bytes(r.unwrap().0.as_ref().try_into().unwrap()))
        .collect()
}

fn pieces(e: &Engine) -> u64 {
    e.stats().range_index_levels.iter().map(|l| l.1).sum()
}

#[test]
fn writes_after_a_range_delete_stay_visible() {
    // The paper's example: delete [5, 15), then update 8.
    let d = tempfile::tempdir().unwrap();
    let e = Engine::open(d.path(), opts()).unwrap();
    for i in 0..20 {
        e.put(k(i), format!("v{i}"), i as u64 + 1).unwrap();
    }
    e.delete_range(k(5), k(15), 100).unwrap();
    e.put(k(8), "new", 101).unwrap();
    let check = |e: &Engine| {
        assert_eq!(get(e, 4).as_deref(), Some("v4"));
        assert_eq!(get(e, 5), None);
        assert_eq!(get(e, 8).as_deref(), Some("new"));
        assert_eq!(get(e, 14), None);
        assert_eq!(get(e, 15).as_deref(), Some("v15"), "upper bound is exclusive");
        let mut want: Vec<u32> = (0..5).chain([8]).chain(15..20).collect();
        want.sort();
        assert_eq!(live(e), want);
    };
    check(&e);
    e.flush().unwrap();
    check(&e);
    e.compact_range(None, None).unwrap();
    check(&e);
    e.close().unwrap();
    let e = Engine::open(d.path(), opts()).unwrap();
    check(&e);
}

#[test]
fn a_batch_orders_its_operations() {
    let d = tempfile::tempdir().unwrap();
    let e = Engine::open(d.path(), opts()).unwrap();
    let mut b = WriteBatch::new();
    b.put(k(1), "a").delete_range(k(0), k(10)).put(k(2), "b");
    e.write(&b, 1).unwrap();
    assert_eq!((get(&e, 1), get(&e, 2).as_deref()), (None, Some("b")));
}

#[test]
fn snapshots_see_the_deletes_visible_to_them() {
    let d = tempfile::tempdir().unwrap();
    let e = Engine::open(d.path(), opts()).unwrap();
    e.put(k(7), "old", 1).unwrap();
    let before = e.snapshot();
    e.delete_range(k(0), k(100), 2).unwrap();
    let between = e.snapshot(); // sees the first delete only
    e.delete_range(k(0), k(100), 4).unwrap();
    for step in 0..3 {
        assert_eq!(
            e.get(&k(7), Some(&before)).unwrap().as_deref(),
            Some(&b"old"[..]),
            "step {step}"
        );
        assert_eq!(e.get(&k(7), Some(&between)).unwrap(), None, "step {step}: older delete lost");
        assert_eq!(get(&e, 7), None);
        let at_before: Vec<_> = e.scan::<&[u8]>(.., Some(&before)).unwrap().collect();
        assert_eq!(at_before.len(), 1);
        match step {
            0 => e.flush().unwrap(),
            _ => e.compact_range(None, None).unwrap(),
        }
    }
}

#[test]
fn range_deletes_survive_crash_and_reopen() {
    let d = tempfile::tempdir().unwrap();
    let e = Engine::open(d.path(), opts()).unwrap();
    for i in 0..300 {
        e.put(k(i), "v", i as u64 + 1).unwrap();
    }
    e.flush().unwrap();
    e.delete_range(k(100), k(200), 1000).unwrap();
    e.delete_range(k(250), Vec::new(), 1001).unwrap(); // to the end of the key space
    drop(e); // crash: the deletes are only in the WAL
    let e = Engine::open(d.path(), opts()).unwrap();
    assert_eq!(live(&e).len(), 150);
    assert_eq!(get(&e, 150), None);
    assert!(pieces(&e) >= 2, "recovery flushed the deletes into the index");
    let cp = d.path().join("checkpoint");
    e.checkpoint(&cp).unwrap();
    e.close().unwrap();
    for dir in [d.path().to_path_buf(), cp] {
        let e = Engine::open(&dir, opts()).unwrap();
        assert_eq!(live(&e).len(), 150, "{}", dir.display());
        assert_eq!(get(&e, 299), None);
    }
}

#[test]
fn gc_keeps_a_delete_while_an_older_entry_remains_anywhere() {
    // The unsafe rule "a bottommost compaction produced only newer data" would purge the delete
    // here and resurrect key 5, which still sits in an old file outside the compacted range.
    let d = tempfile::tempdir().unwrap();
    let e = Engine::open(d.path(), opts()).unwrap();
    e.put(k(5), "old", 1).unwrap();
    e.compact_range(None, None).unwrap(); // key 5 now in a level-1 file written before the delete
    e.delete_range(k(0), k(10), 2).unwrap();
    let mut seq = 3;
    for round in 0..5 {
        for i in 1000..1400 {
            e.put(k(i), format!("r{round}"), seq).unwrap();
            seq += 1;
        }
        e.delete_range(k(5000), k(5001), seq).unwrap(); // more index flushes and merges
        seq += 1;
        e.compact_range(Some(&k(1000)), Some(&k(2000))).unwrap();
    }
    e.wait_for_background().unwrap();
    assert_eq!(get(&e, 5), None, "deleted key resurrected");
    assert!(pieces(&e) >= 1, "the delete still covering key 5 was collected");
}

#[test]
fn gc_collects_deletes_once_applied_everywhere() {
    let d = tempfile::tempdir().unwrap();
    // No background compaction: the deletes are applied only by the manual compaction below.
    let mut o = opts();
    o.level0_compaction_trigger = 1000;
    o.level0_stop_writes_trigger = 2000;
    o.range_index.level0_trigger = 1000;
    let e = Engine::open(d.path(), o).unwrap();
    let mut seq = 1;
    for i in 0..2000 {
        e.put(k(i), "v", seq).unwrap();
        seq += 1;
    }
    e.flush().unwrap(); // the entries are in SSTs before the deletes arrive
    for i in 0..20 {
        e.delete_range(k(i * 100), k(i * 100 + 50), seq).unwrap();
        seq += 1;
    }
    e.flush().unwrap();
    assert!(pieces(&e) >= 20);
    let entries = |e: &Engine| e.stats().levels.iter().map(|l| l.entries).sum::<u64>();
    assert!(entries(&e) >= 2000);
    // Applying every delete to every file lets the full index merge drop all of them.
    e.compact_range(None, None).unwrap();
    assert_eq!(entries(&e), 1000, "covered entries physically removed");
    assert_eq!(pieces(&e), 0, "applied deletes collected");
    assert_eq!(e.stats().eve_estimators, 0, "EVE estimators of collected deletes dropped");
    assert_eq!(live(&e).len(), 1000);
    assert_eq!(get(&e, 10), None);
    assert_eq!(get(&e, 60).as_deref(), Some("v"));
}

#[test]
fn snapshot_pins_a_delete_against_gc() {
    let d = tempfile::tempdir().unwrap();
    let e = Engine::open(d.path(), opts()).unwrap();
    e.put(k(1), "v", 1).unwrap();
    let snap = e.snapshot();
    e.delete_range(k(0), k(5), 2).unwrap();
    e.compact_range(None, None).unwrap();
    assert_eq!(e.get(&k(1), Some(&snap)).unwrap().as_deref(), Some(&b"v"[..]));
    assert_eq!(get(&e, 1), None, "the entry kept for the snapshot must stay hidden");
    assert!(pieces(&e) >= 1);
    drop(snap);
    e.compact_range(None, None).unwrap();
    assert_eq!(get(&e, 1), None);
    assert_eq!(pieces(&e), 0);
}

#[test]
fn an_empty_range_delete_still_advances_the_persisted_sequence() {
    let d = tempfile::tempdir().unwrap();
    for wal in [true, false] {
        let dir = d.path().join(format!("wal-{wal}"));
        let o = Options { wal, ..opts() };
        let e = Engine::open(&dir, o.clone()).unwrap();
        e.put(k(1), "v", 1).unwrap();
        e.flush().unwrap();
        e.delete_range(k(5), k(5), 2).unwrap(); // deletes nothing, alone in its memtable
        e.close().unwrap();
        for _ in 0..2 {
            let e = Engine::open(&dir, o.clone()).unwrap();
            assert_eq!(e.last_seq(), 2, "wal = {wal}");
            drop(e); // crash after recovery: nothing recovered may be lost either
        }
    }
}

#[test]
fn tombstone_baseline_mode_has_the_same_semantics_and_cannot_be_mixed() {
    use ebb_storage::RangeDeleteMode;
    let d = tempfile::tempdir().unwrap();
    let tomb = Options { range_delete_mode: RangeDeleteMode::Tombstones, ..opts() };
    let e = Engine::open(d.path(), tomb.clone()).unwrap();
    for i in 0..200 {
        e.put(k(i), "v", i as u64 + 1).unwrap();
    }
    e.flush().unwrap();
    e.delete_range(k(50), k(150), 500).unwrap();
    e.put(k(100), "new", 501).unwrap();
    e.flush().unwrap();
    assert_eq!(e.stats().range_index_bytes, 0, "no GLORAN index in tombstone mode");
    assert_eq!((get(&e, 60), get(&e, 100).as_deref()), (None, Some("new")));
    e.close().unwrap();
    // SSTs hold tombstones now: GLORAN mode would ignore them, so opening in it is refused.
    let err = Engine::open(d.path(), opts()).unwrap_err();
    assert!(matches!(err, ebb_storage::Error::InvalidArgument(_)), "{err}");
    let e = Engine::open(d.path(), tomb).unwrap();
    assert_eq!(live(&e).len(), 101);
    e.compact_range(None, None).unwrap();
    assert_eq!(live(&e).len(), 101);
    let entries: u64 = e.stats().levels.iter().map(|l| l.entries).sum();
    assert_eq!(entries, 101, "covered entries and bottommost tombstones dropped");
}
