//! Delete deadlines (FADE) and the deletion ledger: records survive restarts and crashes, deletes
//! become persistent and `verify_deletion` then finds nothing, and under an adversarial workload
//! on a logical clock no delete stays unpersisted past the deadline.

#![allow(clippy::unwrap_used)] // tests: a failed step should fail the test

use ebb_storage::ledger::Deadline;
use std::time::Duration;

use ebb_storage::{DeletionKind, DeletionStatus, Engine, ManualClock, RangeDeleteMode};

use crate::common::{series_key as k, small_on_clock as opts, START_MS};

#[test]
fn ledger_records_deletes_across_restart_and_crash() {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let e = Engine::open(d.path(), opts(&clock, Some(Duration::from_secs(60)))).unwrap();
    e.put(k(1), "a", 1).unwrap();
    e.delete(k(1), 2).unwrap();
    clock.advance(5_000);
    e.delete_range(k(10), k(20), 3).unwrap();
    let check = |e: &Engine| {
        let all: Vec<_> = e.deletions().into_iter().filter(|d| d.id <= 3).collect();
        assert_eq!(all.iter().map(|d| d.id).collect::<Vec<_>>(), vec![2, 3]);
        assert_eq!(all[0].kind, DeletionKind::Point { key: k(1) });
        assert_eq!(all[0].issued_at_ms, START_MS);
        assert_eq!(all[0].deadline_ms, Deadline::At(START_MS + 60_000));
        assert_eq!(all[1].kind, DeletionKind::Range { lo: k(10), hi: k(20) });
        assert_eq!(all[1].issued_at_ms, START_MS + 5_000);
    };
    check(&e);
    e.close().unwrap();
    let e = Engine::open(d.path(), opts(&clock, Some(Duration::from_secs(60)))).unwrap();
    check(&e);
    // A crash: the ledger was never written since the reopen, the WAL replays the deletes with
    // their original issue times.
    e.delete(k(2), 4).unwrap();
    drop(e);
    clock.advance(1_000);
    let e = Engine::open(d.path(), opts(&clock, Some(Duration::from_secs(60)))).unwrap();
    check(&e);
    let last = e.deletion(4).unwrap();
    assert_eq!(last.issued_at_ms, START_MS + 5_000, "issue time from the WAL, not the replay");
    e.close().unwrap();
}

#[test]
fn deletes_become_persistent_and_verify_finds_nothing() {
    for mode in [RangeDeleteMode::Gloran, RangeDeleteMode::Tombstones] {
        let d = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(START_MS);
        let mut o = opts(&clock, Some(Duration::from_secs(60)));
        o.range_delete_mode = mode;
        let e = Engine::open(d.path(), o).unwrap();
        let mut seq = 0;
        for i in 0..400 {
            seq += 1;
            e.put(k(i), format!("marker-{i}"), seq).unwrap();
        }
        e.flush().unwrap();
        e.wait_for_background().unwrap();
        let point = seq + 1;
        e.delete(k(7), point).unwrap();
        let range = seq + 2;
        e.delete_range(k(100), k(200), range).unwrap();
        seq = range;
        // Covered values are still stored: the check reports them.
        let before = e.verify_deletion(range).unwrap();
        assert_eq!(before.remaining.len(), 100, "{mode:?}");
        assert_eq!(e.verify_deletion(point).unwrap().remaining.len(), 1);
        assert_eq!(e.deletion(range).unwrap().status(clock.now_ms()), DeletionStatus::Pending);
        assert!(e.persistence_watermark() <= point);
        // Unrelated writes go on; the deadline passes; background work persists both deletes.
        for step in 0..70 {
            clock.advance(1_000);
            seq += 1;
            e.put(k(1_000 + step), "other", seq).unwrap();
            e.wait_for_background().unwrap();
        }
        for id in [point, range] {
            let del = e.deletion(id).unwrap();
            if !del.is_persisted() {
                for (level, f) in e.files() {
                    eprintln!("L{level} {}: {:?}", f.id, f.props.oldest_delete);
                }
            }
            assert!(del.is_persisted(), "{mode:?} {del:?}");
            assert_eq!(del.status(clock.now_ms()), DeletionStatus::Persisted, "{mode:?}");
            let check = e.verify_deletion(id).unwrap();
            assert!(check.remaining.is_empty(), "{mode:?}: {:?}", check.remaining);
        }
        assert!(e.persistence_watermark() > range);
        assert_eq!(e.get(&k(150), None).unwrap(), None);
        assert_eq!(e.get(&k(99), None).unwrap().as_deref(), Some(&b"marker-99"[..]));
        e.close().unwrap();
    }
}

#[test]
fn verify_deletion_rejects_unknown_ids() {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let e = Engine::open(d.path(), opts(&clock, None)).unwrap();
    assert!(matches!(e.verify_deletion(42), Err(ebb_storage::Error::InvalidArgument(_))));
    e.close().unwrap();
}

/// Runs the adversarial workload of note 004 §1.1.1 on a logical clock: a small hot set updated
/// over and over (the tree barely grows), new keys inserted and recent ones deleted, and now and
/// then a range delete of recent keys. Returns the largest age (ms) any unpersisted delete
/// reached, checked after every step.
fn adversarial(deadline: Option<Duration>, steps: u64, step_ms: u64) -> u64 {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let e = Engine::open(d.path(), opts(&clock, deadline)).unwrap();
    let mut seq = 0u64;
    let mut worst = 0u64;
    let value = vec![b'x'; 200];
    for step in 0..steps {
        clock.advance(step_ms);
        for h in 0..4 {
            seq += 1;
            e.put(k(1_000_000 + (step * 4 + h) % 40), value.clone(), seq).unwrap();
        }
        seq += 1;
        e.put(k(step), value.clone(), seq).unwrap();
        if step % 3 == 2 {
            seq += 1;
            e.delete(k(step - 1), seq).unwrap();
        }
        if step % 40 == 39 {
            seq += 1;
            e.delete_range(k(step - 20), k(step - 10), seq).unwrap();
        }
        e.wait_for_background().unwrap();
        let now = clock.now_ms();
        for del in e.deletions().iter().filter(|d| !d.is_persisted()) {
            worst = worst.max(now - del.issued_at_ms);
        }
    }
    e.close().unwrap();
    worst
}

#[test]
fn no_delete_outlives_the_deadline_under_an_adversarial_workload() {
    let deadline = Duration::from_secs(30);
    let step_ms = 250;
    let with = adversarial(Some(deadline), 1_200, step_ms);
    assert!(
        with <= deadline.as_millis() as u64 + step_ms,
        "a delete stayed unpersisted {with} ms (deadline {deadline:?} plus one step)"
    );
    // The same workload without deadlines keeps deletes far longer: the test can fail.
    let without = adversarial(None, 1_200, step_ms);
    assert!(without > 2 * deadline.as_millis() as u64, "baseline worst age {without} ms");
}
