//! Retention per key prefix: expired rows are invisible at once, old writes are refused, purges
//! drop the pages, and the rules survive a restart.

#![allow(clippy::unwrap_used)] // tests: a failed step should fail the test

use std::time::Duration;

use ebb_storage::{Clock, Engine, Error, ManualClock, Options, TileLayout, TimeToDeleteKey};

use crate::common::START_MS;

fn opts(clock: &ManualClock) -> Options {
    Options {
        write_buffer_size: 16 << 10,
        page_size: 512,
        target_file_size: 32 << 10,
        base_level_size: 64 << 10,
        tiles: TileLayout::Fixed(vec![8]),
        memtable_max_age: None,
        clock: Clock::manual(clock),
        time_to_delete_key: TimeToDeleteKey::millis(),
        ..Options::default()
    }
}

/// Key of table `t`, series `s`, at time `ms` (the trailing 8 bytes are the delete key).
fn key(t: u8, s: u64, ms: u64) -> Vec<u8> {
    let mut k = vec![t];
    k.extend_from_slice(&s.to_be_bytes());
    k.extend_from_slice(&ms.to_be_bytes());
    k
}

fn rows(e: &Engine, t: u8) -> usize {
    e.scan(vec![t]..vec![t + 1], None).unwrap().count()
}

#[test]
fn expired_rows_vanish_are_refused_and_purged() {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let e = Engine::open(d.path(), opts(&clock)).unwrap();
    let mut seq = 0;
    // Two tables, 100 minutes of one point per minute for 20 series each.
    for m in 0..100u64 {
        for s in 0..20 {
            for t in [1u8, 2] {
                seq += 1;
                e.put(key(t, s, START_MS + m * 60_000), "v", seq).unwrap();
            }
        }
    }
    e.flush().unwrap();
    clock.advance(100 * 60_000);
    // Table 1 keeps 30 minutes; table 2 has no rule.
    e.set_retention(vec![1u8], Some(Duration::from_secs(30 * 60))).unwrap();
    assert_eq!(rows(&e, 1), 20 * 30, "expired rows invisible at once");
    assert_eq!(rows(&e, 2), 20 * 100);
    assert_eq!(e.get(&key(1, 3, START_MS), None).unwrap(), None);
    assert!(e.get(&key(2, 3, START_MS), None).unwrap().is_some());
    // Too old to write.
    seq += 1;
    let old = e.put(key(1, 0, START_MS + 10 * 60_000), "late", seq);
    assert!(matches!(old, Err(Error::BeyondRetention { .. })), "{old:?}");
    seq += 1;
    e.put(key(1, 0, START_MS + 99 * 60_000 + 1), "fresh", seq).unwrap();
    // Nesting rules is refused; the rule survives a restart.
    assert!(e.set_retention(vec![1u8, 0], Some(Duration::from_secs(60))).is_err());
    e.close().unwrap();
    let e = Engine::open(d.path(), opts(&clock)).unwrap();
    assert_eq!(e.retention_rules(), vec![(vec![1u8], Duration::from_secs(30 * 60))]);
    assert_eq!(rows(&e, 1), 20 * 30 + 1);
    // The purge drops the expired pages of table 1 and nothing of table 2 (a compaction may have
    // dropped expired rows already: then there is less left for the purge).
    let entries = |e: &Engine| e.stats().levels.iter().map(|l| l.entries).sum::<u64>();
    // Compactions started by the reopen finish first, so none drops expired rows between this
    // count and the purge.
    e.wait_for_background().unwrap();
    let before = entries(&e);
    seq += 1;
    assert_eq!(e.purge_expired(seq).unwrap(), 1);
    e.wait_for_background().unwrap();
    e.flush().unwrap();
    e.wait_for_background().unwrap();
    let st = e.stats();
    // Live: table 2's 2,000 rows, table 1's 600 unexpired ones and the fresh one.
    let live = 20 * 100 + 20 * 30 + 1;
    let touched = st.window_pages_dropped + st.window_pages_rewritten;
    assert!(before <= live || touched > 0, "the purge had rows to drop: {st:?}");
    assert_eq!(entries(&e), live, "expired rows of table 1 left: {st:?}");
    let purge = e.deletion(seq).unwrap();
    assert!(purge.is_persisted(), "{purge:?}");
    assert!(e.verify_deletion(seq).unwrap().remaining.is_empty());
    // Removing the rule cannot bring purged rows back; table 2 is untouched.
    e.set_retention(vec![1u8], None).unwrap();
    assert_eq!(rows(&e, 1), 20 * 30 + 1);
    assert_eq!(rows(&e, 2), 20 * 100);
    e.close().unwrap();
}

#[test]
fn compaction_drops_expired_rows() {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let e = Engine::open(d.path(), opts(&clock)).unwrap();
    let mut seq = 0;
    for m in 0..50u64 {
        for s in 0..20 {
            seq += 1;
            e.put(key(1, s, START_MS + m * 60_000), "v", seq).unwrap();
        }
    }
    e.flush().unwrap();
    clock.advance(50 * 60_000);
    e.set_retention(vec![1u8], Some(Duration::from_secs(10 * 60))).unwrap();
    e.compact_range(None, None).unwrap();
    let entries: u64 = e.stats().levels.iter().map(|l| l.entries).sum();
    assert_eq!(entries, 20 * 10, "compaction kept only unexpired rows");
    assert_eq!(rows(&e, 1), 20 * 10);
    e.close().unwrap();
}
