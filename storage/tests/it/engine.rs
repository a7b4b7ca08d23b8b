//! Behaviour of the engine API: sequence numbers, snapshots, compaction, checkpoints, locking,
//! poisoning, flush by age, file lifetime, recovery hygiene and memory bounds.

#![allow(clippy::unwrap_used)] // tests: a failed step should fail the test

use std::path::Path;
use std::time::Duration;

use ebb_storage::failpoint::points;
use ebb_storage::{Engine, Error, Options, TileLayout, WriteBatch};

fn opts() -> Options {
    Options {
        write_buffer_size: 8 << 10,
        page_size: 512,
        target_file_size: 16 << 10,
        base_level_size: 32 << 10,
        level0_compaction_trigger: 2,
        memtable_max_age: None,
        ..Options::default()
    }
}

fn key(i: u32) -> Vec<u8> {
    let mut k = (i / 8).to_be_bytes().to_vec();
    k.extend_from_slice(&((i % 8) as u64).to_be_bytes());
    k
}

fn sst_count(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_str().unwrap().ends_with(".sst"))
        .count()
}

fn all(e: &Engine) -> Vec<(Vec<u8>, Vec<u8>)> {
    e.scan::<&[u8]>(.., None)
        .unwrap()
        .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())).unwrap())
        .collect()
}

#[test]
fn sequence_numbers_must_increase() {
    let d = tempfile::tempdir().unwrap();
    let e = Engine::open(d.path(), opts()).unwrap();
    let mut b = WriteBatch::new();
    b.put("a", "1").put("b", "2");
    e.write(&b, 10).unwrap(); // uses 10 and 11
    assert_eq!(e.last_seq(), 11);
    for bad in [0, 5, 10, 11] {
        let err = e.put("c", "3", bad).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "seq {bad}: {err}");
    }
    e.put("c", "3", 12).unwrap();
    assert!(matches!(e.put("x", "y", u64::MAX).map(|_| ()), Ok(())));
    let mut big = WriteBatch::new();
    big.put("p", "1").put("q", "2");
    assert!(e.write(&big, u64::MAX).is_err(), "overflowing sequence range accepted");
}

#[test]
fn bad_input_is_rejected_without_side_effects() {
    let d = tempfile::tempdir().unwrap();
    let e = Engine::open(d.path(), opts()).unwrap();
    let mut b = WriteBatch::new();
    b.put("ok", "1").put("", "empty key");
    assert!(matches!(e.write(&b, 1), Err(Error::InvalidArgument(_))));
    assert_eq!(e.get(b"ok", None).unwrap(), None, "partial batch applied");
    assert_eq!(e.last_seq(), 0);
    let bad = Options { tiles: TileLayout::Fixed(vec![0]), ..opts() };
    assert!(matches!(Engine::open(d.path().join("x"), bad), Err(Error::InvalidArgument(_))));
}

#[test]
fn snapshots_survive_flush_and_compaction_and_release_their_versions() {
    let d = tempfile::tempdir().unwrap();
    let e = Engine::open(d.path(), opts()).unwrap();
    let mut seq = 1;
    for i in 0..500 {
        e.put(key(i), format!("old{i}"), seq).unwrap();
        seq += 1;
    }
    let snap = e.snapshot();
    for i in 0..500 {
        if i % 2 == 0 {
            e.put(key(i), format!("new{i}"), seq).unwrap();
        } else {
            e.delete(key(i), seq).unwrap();
        }
        seq += 1;
    }
    e.compact_range(None, None).unwrap();
    for i in (0..500).step_by(37) {
        assert_eq!(e.get(&key(i), Some(&snap)).unwrap().unwrap(), format!("old{i}").as_bytes());
    }
    let at_snap: Vec<_> =
        e.scan::<&[u8]>(.., Some(&snap)).unwrap().collect::<Result<_, _>>().unwrap();
    assert_eq!(at_snap.len(), 500);
    let entries = |e: &Engine| e.stats().levels.iter().map(|l| l.entries).sum::<u64>();
    assert!(entries(&e) >= 1000, "old versions must be kept while the snapshot lives");
    drop(snap);
    e.compact_range(None, None).unwrap();
    assert_eq!(
        entries(&e),
        250,
        "only the live new versions remain; tombstones purged at the bottom"
    );
    assert_eq!(all(&e).len(), 250);
}

#[test]
fn checkpoint_carries_the_deletion_ledger_with_original_issue_times() {
    let d = tempfile::tempdir().unwrap();
    let e = Engine::open(d.path().join("db"), opts()).unwrap();
    for i in 0..100 {
        e.put(key(i), format!("v{i}"), i as u64 + 1).unwrap();
    }
    let mut b = WriteBatch::new();
    b.delete_range(key(10), key(20)).set_issued_at(1_000_000);
    e.write(&b, 200).unwrap();
    let mut b = WriteBatch::new();
    b.delete(key(50)).set_issued_at(2_000_000);
    e.write(&b, 201).unwrap();
    let before = e.deletions();
    assert_eq!(before.len(), 2);
    e.checkpoint(d.path().join("cp")).unwrap();
    drop(e);
    let cp = Engine::open(d.path().join("cp"), opts()).unwrap();
    let after = cp.deletions();
    assert_eq!(after.len(), 2, "the copy lost ledger records: {after:?}");
    for (a, b) in before.iter().zip(&after) {
        assert_eq!((a.id, &a.kind, a.issued_at_ms), (b.id, &b.kind, b.issued_at_ms));
    }
    assert_eq!(after[0].issued_at_ms, 1_000_000);
    assert_eq!(after[1].issued_at_ms, 2_000_000);
    assert_eq!(all(&cp).len(), 89);
}

#[test]
fn batches_round_trip_through_bytes() {
    let mut b = WriteBatch::new();
    b.put(key(1), "a").delete(key(2)).delete_range(key(3), key(4)).set_issued_at(77);
    let back = WriteBatch::from_bytes(&b.to_bytes()).unwrap();
    assert_eq!(back.ops(), b.ops());
    assert_eq!(back.issued_at(), Some(77));
    let mut unset = WriteBatch::new();
    unset.put(key(1), "a");
    assert_eq!(WriteBatch::from_bytes(&unset.to_bytes()).unwrap().issued_at(), None);
    // A fallback issue time applies only to a batch without one.
    assert_eq!(WriteBatch::from_bytes(&unset.to_bytes_issued(99)).unwrap().issued_at(), Some(99));
    assert_eq!(WriteBatch::from_bytes(&b.to_bytes_issued(99)).unwrap().issued_at(), Some(77));
    let bytes = b.to_bytes();
    assert!(WriteBatch::from_bytes(&bytes[..bytes.len() - 1]).is_none());
    assert!(WriteBatch::from_bytes(b"").is_none());
}

#[test]
fn checkpoint_is_a_consistent_openable_copy() {
    let d = tempfile::tempdir().unwrap();
    let e = Engine::open(d.path().join("db"), opts()).unwrap();
    for i in 0..300 {
        e.put(key(i), format!("v{i}"), i as u64 + 1).unwrap();
    }
    let seq = e.checkpoint(d.path().join("cp")).unwrap();
    assert_eq!(seq, 300);
    for i in 0..300 {
        e.delete(key(i), 1000 + i as u64).unwrap();
    }
    e.compact_range(None, None).unwrap();
    assert!(all(&e).is_empty());
    assert!(e.checkpoint(d.path().join("cp")).is_err(), "existing target must be refused");
    let cp = Engine::open(d.path().join("cp"), opts()).unwrap();
    assert_eq!(cp.last_seq(), 300);
    let got = all(&cp);
    assert_eq!(got.len(), 300);
    assert_eq!(got[0].1, b"v0");
}

/// Checkpoints into targets whose names differ only after a dot (backup parts of one set,
/// `<time>.<ms>Z-<shard>`) are built apart: one taken while the other is being built neither
/// removes nor publishes the other's.
#[test]
fn checkpoints_into_names_that_differ_after_a_dot_are_built_apart() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (
        Engine::open(d.path().join("a"), opts()).unwrap(),
        Engine::open(d.path().join("b"), opts()).unwrap(),
    );
    for i in 0..50 {
        a.put(key(i), "a", i as u64 + 1).unwrap();
        b.put(key(i), "b", i as u64 + 1).unwrap();
    }
    let staging = d.path().join("staging");
    std::fs::create_dir(&staging).unwrap();
    // Shard 3's checkpoint, midway: its directory in the making, under the name it is built
    // as now, and under the name an extension's replacement gave every part of the set.
    let others = ["20261201T010654.072Z-3.checkpoint.tmp", "20261201T010654.checkpoint.tmp"];
    for o in others {
        std::fs::create_dir(staging.join(o)).unwrap();
        std::fs::write(staging.join(o).join("marker"), "shard 3").unwrap();
    }
    a.checkpoint(staging.join("20261201T010654.072Z-1")).unwrap();
    b.checkpoint_live(staging.join("20261201T010654.072Z-2"), u64::MAX).unwrap();
    for o in others {
        assert_eq!(std::fs::read_to_string(staging.join(o).join("marker")).unwrap(), "shard 3");
    }
    for (name, v) in [("20261201T010654.072Z-1", "a"), ("20261201T010654.072Z-2", "b")] {
        let cp = Engine::open(staging.join(name), opts()).unwrap();
        assert_eq!(all(&cp).len(), 50, "{name}");
        assert_eq!(cp.get(&key(7), None).unwrap().unwrap(), v, "{name}");
    }
}

#[test]
fn directory_lock_prevents_a_second_instance() {
    let d = tempfile::tempdir().unwrap();
    let e = Engine::open(d.path(), opts()).unwrap();
    assert!(matches!(Engine::open(d.path(), opts()), Err(Error::Locked(_))));
    e.close().unwrap();
    Engine::open(d.path(), opts()).unwrap();
}

#[test]
fn failed_fsync_poisons_until_reopen() {
    let d = tempfile::tempdir().unwrap();
    let o = Options { sync: ebb_storage::SyncMode::Always, ..opts() };
    let e = Engine::open(d.path(), o.clone()).unwrap();
    e.put("a", "1", 1).unwrap();
    o.fail_points.arm(points::WAL_SYNC, 0);
    assert!(matches!(e.put("b", "2", 2), Err(Error::Injected(_))));
    assert!(matches!(e.put("c", "3", 3), Err(Error::Poisoned(_))));
    assert!(matches!(e.flush(), Err(Error::Poisoned(_))));
    assert_eq!(e.get(b"a", None).unwrap().unwrap(), "1", "reads keep working");
    drop(e);
    let e = Engine::open(d.path(), o).unwrap();
    assert_eq!(e.get(b"a", None).unwrap().unwrap(), "1");
    e.put("d", "4", e.last_seq() + 1).unwrap();
}

#[test]
fn memtable_flushes_by_age() {
    let d = tempfile::tempdir().unwrap();
    let o = Options { memtable_max_age: Some(Duration::from_millis(40)), ..opts() };
    let e = Engine::open(d.path(), o).unwrap();
    e.put("a", "1", 1).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while e.stats().flushes == 0 {
        assert!(std::time::Instant::now() < deadline, "no flush by age within 10 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(e.persisted_seq(), 1);
}

#[test]
fn iterators_pin_files_that_compaction_replaces() {
    let d = tempfile::tempdir().unwrap();
    let e = Engine::open(d.path(), opts()).unwrap();
    for i in 0..400 {
        e.put(key(i), vec![b'x'; 64], i as u64 + 1).unwrap();
    }
    e.flush().unwrap();
    let mut it = e.scan::<&[u8]>(.., None).unwrap();
    let first = it.next().unwrap().unwrap();
    let before = sst_count(d.path());
    for i in 0..400 {
        e.put(key(i), vec![b'y'; 64], 1000 + i as u64).unwrap();
    }
    e.compact_range(None, None).unwrap();
    // The iterator still reads the old files, which are still on disk.
    let rest: Vec<_> = it.by_ref().collect::<Result<_, _>>().unwrap();
    assert_eq!(rest.len() + 1, 400);
    assert_eq!(first.1[0], b'x');
    assert!(rest.iter().all(|(_, v)| v[0] == b'x'), "iterator saw writes after its snapshot");
    let pinned = sst_count(d.path());
    drop(it);
    let live: usize = e.stats().levels.iter().map(|l| l.files).sum();
    assert!(pinned > live, "obsolete files were deleted while pinned ({before} -> {pinned})");
    assert_eq!(sst_count(d.path()), live, "obsolete files not deleted after unpinning");
}

#[test]
fn recovery_removes_orphans_and_ignores_foreign_files() {
    let d = tempfile::tempdir().unwrap();
    let e = Engine::open(d.path(), opts()).unwrap();
    for i in 0..100 {
        e.put(key(i), "v", i as u64 + 1).unwrap();
    }
    e.close().unwrap();
    std::fs::write(d.path().join("99999999.sst"), b"half-written table").unwrap();
    std::fs::write(d.path().join("CURRENT.tmp"), b"junk").unwrap();
    std::fs::write(d.path().join(".DS_Store"), b"foreign").unwrap();
    std::fs::write(d.path().join("._00000001.sst"), b"foreign").unwrap();
    let e = Engine::open(d.path(), opts()).unwrap();
    assert!(!d.path().join("99999999.sst").exists());
    assert!(!d.path().join("CURRENT.tmp").exists());
    assert!(d.path().join(".DS_Store").exists() && d.path().join("._00000001.sst").exists());
    assert_eq!(all(&e).len(), 100);
    e.put("z", "after", 101).unwrap(); // file ids do not collide with the removed orphan
    e.flush().unwrap();
}

#[test]
fn page_cache_stays_within_its_capacity() {
    let d = tempfile::tempdir().unwrap();
    let o = Options { page_cache_bytes: 32 << 10, ..opts() };
    let e = Engine::open(d.path(), o).unwrap();
    for i in 0..3000 {
        e.put(key(i), vec![b'v'; 100], i as u64 + 1).unwrap();
    }
    e.compact_range(None, None).unwrap();
    for i in 0..3000 {
        assert!(e.get(&key(i), None).unwrap().is_some());
    }
    let s = e.stats();
    assert!(s.page_cache_bytes > 0 && s.page_cache_bytes <= 32 << 10, "{s:?}");
    // Filters (10 bits per key) plus fences and page index: more than the filters alone, less
    // than the raw data (3000 entries of 12-byte keys and 100-byte values).
    assert!(s.table_memory_bytes > 3000 * 10 / 8, "{s:?}");
    assert!(s.table_memory_bytes < 3000 * 112, "{s:?}");
}

#[test]
fn background_compaction_keeps_levels_within_targets() {
    let d = tempfile::tempdir().unwrap();
    let o = opts();
    let e = Engine::open(d.path(), o.clone()).unwrap();
    for i in 0..20_000u32 {
        e.put(key(i % 5000), vec![b'v'; 40], i as u64 + 1).unwrap();
    }
    e.wait_for_background().unwrap();
    let s = e.stats();
    assert!(s.flushes > 10 && s.compactions > 0, "{s:?}");
    assert!(s.levels[0].files < o.level0_compaction_trigger, "{:?}", s.levels);
    for l in 1..s.levels.len() - 1 {
        assert!(s.levels[l].bytes <= o.level_target_size(l), "level {l}: {:?}", s.levels);
    }
    assert_eq!(all(&e).len(), 5000);
}

#[test]
fn without_wal_unflushed_writes_are_lost_and_persisted_seq_says_where() {
    let d = tempfile::tempdir().unwrap();
    let o = Options { wal: false, ..opts() };
    let e = Engine::open(d.path(), o.clone()).unwrap();
    e.put("a", "1", 1).unwrap();
    e.flush().unwrap();
    e.put("b", "2", 2).unwrap();
    assert_eq!(e.persisted_seq(), 1);
    drop(e);
    let e = Engine::open(d.path(), o.clone()).unwrap();
    assert_eq!((e.persisted_seq(), e.last_seq()), (1, 1));
    assert_eq!(e.get(b"a", None).unwrap().unwrap(), "1");
    assert_eq!(e.get(b"b", None).unwrap(), None);
    e.put("b", "2", 2).unwrap();
    e.close().unwrap(); // a clean close flushes
    let e = Engine::open(d.path(), o).unwrap();
    assert_eq!(e.persisted_seq(), 2);
    assert_eq!(e.get(b"b", None).unwrap().unwrap(), "2");
}

/// Lookups pass over files whose delete keys (times) do not reach the key's, in both
/// range-delete modes: every key of every file is still found, at every level, and a key of a
/// time no file holds is absent.
#[test]
fn lookups_find_keys_in_the_files_of_their_time() {
    use ebb_storage::RangeDeleteMode;
    // Series `s` at time `t`: the delete key is the trailing time.
    let key = |s: u64, t: u64| [s.to_be_bytes(), t.to_be_bytes()].concat();
    for mode in [RangeDeleteMode::Gloran, RangeDeleteMode::Tombstones] {
        let d = tempfile::tempdir().unwrap();
        let e = Engine::open(d.path(), Options { range_delete_mode: mode, ..opts() }).unwrap();
        let mut seq = 1;
        // Four flushes, each of its own hour of times for 20 series; some compacted down.
        for hour in 0..4u64 {
            for s in 0..20 {
                for m in 0..10 {
                    let t = hour * 3600 + m * 60;
                    e.put(key(s, t), t.to_be_bytes().to_vec(), seq).unwrap();
                    seq += 1;
                }
            }
            e.flush().unwrap();
            if hour == 1 {
                e.compact_range(None, None).unwrap();
            }
        }
        let files = e.files();
        assert!(files.iter().any(|(l, _)| *l == 0) && files.iter().any(|(l, _)| *l > 0));
        for hour in 0..4u64 {
            for s in 0..20 {
                for m in 0..10 {
                    let t = hour * 3600 + m * 60;
                    let got = e.get(&key(s, t), None).unwrap();
                    assert_eq!(got.as_deref(), Some(&t.to_be_bytes()[..]), "{mode:?} {s} {t}");
                    // Between this row and the next: inside a file's times, not in it.
                    assert_eq!(e.get(&key(s, t + 1), None).unwrap(), None);
                }
            }
        }
        // A time after every file's: no file may hold it.
        let later = 5 * 3600;
        assert!(files.iter().all(|(_, f)| f.props.max_dkey < later), "{files:?}");
        assert_eq!(e.get(&key(3, later), None).unwrap(), None);
        e.put(key(3, later), vec![1], seq).unwrap();
        assert_eq!(e.get(&key(3, later), None).unwrap().as_deref(), Some(&[1u8][..]));
    }
}

#[test]
fn a_live_checkpoint_holds_unflushed_writes_and_deletes_and_nothing_after_it() {
    // Large memtables: what the checkpoint holds is mostly in the WAL, not in SSTs.
    let o = || Options { write_buffer_size: 1 << 20, ..opts() };
    let d = tempfile::tempdir().unwrap();
    let e = Engine::open(d.path().join("db"), o()).unwrap();
    let mut seq = 0;
    for i in 0..300 {
        seq += 1;
        e.put(key(i), format!("v{i}"), seq).unwrap();
    }
    e.flush().unwrap();
    for i in 300..600 {
        seq += 1;
        e.put(key(i), format!("w{i}"), seq).unwrap();
    }
    let mut b = WriteBatch::new();
    b.delete_range(key(10), key(20)).set_issued_at(1_000_000);
    seq += 1;
    e.write(&b, seq).unwrap();
    let mut b = WriteBatch::new();
    b.delete(key(400));
    seq += 1;
    e.write(&b, seq).unwrap();
    let expected = all(&e);
    let wal_files = |dir: &Path| {
        std::fs::read_dir(dir)
            .unwrap()
            .filter(|f| f.as_ref().unwrap().file_name().to_string_lossy().ends_with(".wal"))
            .count()
    };
    let last = e.checkpoint_live(d.path().join("cp"), u64::MAX).unwrap();
    assert_eq!(last, seq);
    assert!(wal_files(&d.path().join("cp")) > 0, "the unflushed writes travel as WAL");
    // Over the limit, the log is flushed first instead of copied.
    let flushed = e.checkpoint_live(d.path().join("cp-flushed"), 0).unwrap();
    assert_eq!(flushed, seq);
    assert_eq!(wal_files(&d.path().join("cp-flushed")), 0, "flushed, not copied");
    // Written after: not in the copy.
    e.put(key(700), "after", seq + 1).unwrap();
    e.delete(key(0), seq + 2).unwrap();
    drop(e);
    let f = Engine::open(d.path().join("cp-flushed"), o()).unwrap();
    assert_eq!(all(&f), expected);
    drop(f);
    let cp = Engine::open(d.path().join("cp"), o()).unwrap();
    assert_eq!(all(&cp), expected);
    assert_eq!(cp.last_seq(), seq);
    assert_eq!(cp.deletions().len(), 2, "{:?}", cp.deletions());
    // The copy goes on as an engine of its own.
    cp.put(key(800), "x", seq + 1).unwrap();
    cp.flush().unwrap();
    drop(cp);
    let again = Engine::open(d.path().join("cp"), o()).unwrap();
    assert_eq!(all(&again).len(), expected.len() + 1);
}
