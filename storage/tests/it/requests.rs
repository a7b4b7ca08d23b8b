//! Delete requests and audits: a request's deletes carry its deadline (earlier deadlines are
//! persisted earlier), it is recorded with them across restarts, persistence waits for a
//! caller's log when there is one, and audits find covered values wherever they are stored.

#![allow(clippy::unwrap_used)] // tests: a failed step should fail the test

use ebb_storage::ledger::Deadline;
use std::time::Duration;

use crate::common::{series_key as k, small_on_clock, START_MS};
use ebb_storage::audit::plaintext;
use ebb_storage::{
    Compression, DeleteRequest, Engine, LogClearance, ManualClock, Options, WriteBatch,
};

const HOUR_MS: u64 = 3_600_000;

fn opts(clock: &ManualClock) -> Options {
    let deadline = Some(Duration::from_secs(24 * 3600));
    Options { compression: Compression::Lz4, ..small_on_clock(clock, deadline) }
}

fn request(id: u64, deadline_ms: Option<u64>) -> DeleteRequest {
    DeleteRequest {
        id,
        kind: "erase".into(),
        text: format!("request {id}"),
        rows: Some(10),
        deadline_ms,
        issued_by: format!("tester {id}"),
    }
}

/// Writes keys `0..n` with marker values, flushed into SSTs.
fn fill(e: &Engine, n: u64) -> u64 {
    for i in 0..n {
        e.put(k(i), format!("marker-{i:05}-{}", "x".repeat(40)), i + 1).unwrap();
    }
    e.flush().unwrap();
    e.wait_for_background().unwrap();
    n
}

#[test]
fn a_short_request_deadline_is_met_while_default_deletes_wait() {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let e = Engine::open(d.path(), opts(&clock)).unwrap();
    let mut seq = fill(&e, 400);
    // Default deadline (24 h) for one range, a 1 h request deadline for another.
    seq += 1;
    let slow = seq;
    e.delete_range(k(0), k(100), slow).unwrap();
    let mut b = WriteBatch::new();
    b.delete_range(k(200), k(300)).set_request(request(7, Some(START_MS + HOUR_MS)));
    seq += 1;
    let fast = seq;
    e.write(&b, fast).unwrap();
    let fast_del = e.deletion(fast).unwrap();
    assert_eq!(fast_del.deadline_ms, Deadline::At(START_MS + HOUR_MS));
    assert_eq!(e.deletion(slow).unwrap().deadline_ms, Deadline::At(START_MS + 24 * HOUR_MS));
    // A deadline later than the engine's is capped to it.
    let mut b = WriteBatch::new();
    b.delete(k(350)).set_request(request(8, Some(START_MS + 100 * HOUR_MS)));
    seq += 1;
    e.write(&b, seq).unwrap();
    assert_eq!(e.deletion(seq).unwrap().deadline_ms, Deadline::At(START_MS + 24 * HOUR_MS));
    // Two hours of unrelated writes on a clock stepping a minute at a time.
    for step in 0..120 {
        clock.advance(60_000);
        seq += 1;
        e.put(k(10_000 + step), "other", seq).unwrap();
        e.wait_for_background().unwrap();
    }
    let fast_del = e.deletion(fast).unwrap();
    let at = fast_del.persisted_at_ms.expect("the 1 h request is persisted");
    assert!(at <= START_MS + HOUR_MS, "persisted {} ms late", at - START_MS - HOUR_MS);
    assert!(e.verify_deletion(fast).unwrap().remaining.is_empty());
    assert!(!e.deletion(slow).unwrap().is_persisted(), "the 24 h delete had no reason to go yet");
    assert_eq!(e.verify_deletion(slow).unwrap().remaining.len(), 100);
    // The request as a whole.
    let reqs = e.delete_requests();
    let r = reqs.iter().find(|r| r.request.id == 7).unwrap();
    assert_eq!((r.deletes, r.pending, r.persisted_at_ms), (1, 0, Some(at)));
    assert_eq!(r.delete_ids, vec![fast]);
    e.close().unwrap();
}

#[test]
fn deletes_are_persisted_a_reserve_before_their_deadline() {
    // The merge that persists a delete takes time to run: it is due a tenth of `D_th` before the
    // deadline, never at it. A request with a deadline well inside that reserve goes at once.
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let e = Engine::open(d.path(), opts(&clock)).unwrap();
    let mut seq = fill(&e, 400);
    e.close().unwrap();
    // From here level 0 is never full: only deadlines move the deletes' files down.
    let o = Options { level0_compaction_trigger: 10, ..opts(&clock) };
    let e = Engine::open(d.path(), o).unwrap();
    assert!(e.files().iter().any(|(level, _)| *level >= 1), "older versions sit below L0");
    let (point, range) = (seq + 1, seq + 2);
    e.delete(k(5), point).unwrap();
    e.delete_range(k(100), k(150), range).unwrap();
    let mut b = WriteBatch::new();
    b.delete(k(250)).delete_range(k(300), k(350)).set_request(request(7, Some(START_MS + HOUR_MS)));
    let fast = range + 1;
    e.write(&b, fast).unwrap();
    seq = fast + 1;
    let mut step = |ms: u64| {
        clock.advance(ms);
        seq += 1;
        e.put(k(10_000 + seq), "other", seq).unwrap();
        e.wait_for_background().unwrap();
    };
    step(60_000);
    for id in [fast, fast + 1] {
        let del = e.deletion(id).unwrap();
        assert!(del.is_persisted(), "a minute into a 1 h request: {del:?}");
        assert!(e.verify_deletion(id).unwrap().remaining.is_empty());
    }
    // The default deadline's deletes: by 24 h less the reserve of 2.4 h.
    let by = START_MS + 24 * HOUR_MS - 24 * HOUR_MS / 10;
    while clock.now_ms() + 600_000 <= by {
        step(600_000);
    }
    for id in [point, range] {
        let del = e.deletion(id).unwrap();
        assert!(del.persisted_at_ms.is_some_and(|at| at <= by), "{del:?}");
        assert!(e.verify_deletion(id).unwrap().remaining.is_empty());
    }
    e.close().unwrap();
}

#[test]
fn requests_survive_replay_and_checkpoints_and_batches_combine() {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let e = Engine::open(d.path(), opts(&clock)).unwrap();
    let mut seq = fill(&e, 50);
    for part in 0..2u64 {
        let mut b = WriteBatch::new();
        b.delete(k(part)).delete(k(part + 10)).set_request(request(9, Some(START_MS + 5_000)));
        b.set_issued_at(START_MS + part);
        seq += 1;
        e.write(&b, seq).unwrap();
        seq += 1;
    }
    let check = |e: &Engine| {
        let reqs = e.delete_requests();
        assert_eq!(reqs.len(), 1);
        let r = &reqs[0];
        assert_eq!((r.request.id, r.request.rows, r.deletes, r.pending), (9, Some(20), 4, 4));
        assert_eq!((r.issued_at_ms, r.deadline_ms), (START_MS, Deadline::At(START_MS + 5_000)));
        assert_eq!(r.request.text, "request 9");
    };
    check(&e);
    // Not flushed: the WAL replays the batches, request included, after a crash-like drop.
    drop(e);
    let e = Engine::open(d.path(), opts(&clock)).unwrap();
    check(&e);
    let cp = d.path().join("cp");
    e.checkpoint(&cp).unwrap();
    e.close().unwrap();
    let c = Engine::open(&cp, opts(&clock)).unwrap();
    check(&c);
    c.close().unwrap();
}

#[test]
fn with_an_external_log_persistence_waits_for_its_watermark() {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let mut o = opts(&clock);
    o.external_log = true;
    o.wal = false;
    let e = Engine::open(d.path(), o).unwrap();
    let mut seq = fill(&e, 100);
    seq += 1;
    e.delete(k(3), seq).unwrap();
    e.compact_range(None, None).unwrap();
    assert!(e.persistence_watermark() > seq, "the engine itself holds nothing of it");
    assert!(!e.deletion(seq).unwrap().is_persisted(), "the caller's log may still hold it");
    clock.advance(5);
    e.set_log_clearance(LogClearance::below(seq)).unwrap();
    assert!(!e.deletion(seq).unwrap().is_persisted(), "the watermark must pass the delete");
    e.set_log_clearance(LogClearance::below(seq + 1)).unwrap();
    assert_eq!(e.deletion(seq).unwrap().persisted_at_ms, Some(START_MS + 5));
    e.close().unwrap();
}

#[test]
fn audits_find_covered_values_in_the_wal_and_sst_plaintext() {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let mut o = opts(&clock);
    o.write_buffer_size = 1 << 20; // nothing flushes by itself
    o.level0_compaction_trigger = 100; // nor compacts: the test decides when data moves
    o.level0_stop_writes_trigger = 200;
    let e = Engine::open(d.path(), o).unwrap();
    for i in 0..20 {
        e.put(k(i), format!("secret-{i:03}"), i + 1).unwrap();
    }
    e.delete_range(k(5), k(8), 100).unwrap();
    let c = e.coverage(&[100]).unwrap();
    let scans = e.audit(&c).unwrap();
    let found =
        |kind: &str| -> u64 { scans.iter().filter(|s| s.kind == kind).map(|s| s.found).sum() };
    assert_eq!(found("memtable"), 3);
    assert_eq!(found("wal"), 3, "{scans:?}");
    assert!(e.coverage(&[99]).is_err(), "not a delete");
    e.flush().unwrap(); // the flush applies the range delete: nothing covered is written
    let scans = e.audit(&c).unwrap();
    assert_eq!(scans.iter().map(|s| s.found).sum::<u64>(), 0, "{scans:?}");
    // Data in an SST before its delete: compressed pages, found by the audit and in plaintext.
    for i in 20..40 {
        e.put(k(i), format!("secret-{i:03}"), 200 + i).unwrap();
    }
    e.flush().unwrap();
    e.delete_range(k(25), k(28), 300).unwrap();
    e.wait_for_background().unwrap(); // no SST half written
    let c = e.coverage(&[300]).unwrap();
    let ssts: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sst"))
        .collect();
    let text: Vec<u8> = ssts.iter().flat_map(|p| plaintext(p).unwrap()).collect();
    let has = |needle: &[u8]| text.windows(needle.len()).any(|w| w == needle);
    assert!(has(b"secret-026") && has(b"secret-039"));
    let scans = e.audit(&c).unwrap();
    assert_eq!(scans.iter().filter(|s| s.kind == "sst").map(|s| s.found).sum::<u64>(), 3);
    assert!(scans.iter().all(|s| s.kind != "wal" || s.found == 0), "{scans:?}");
    e.compact_range(None, None).unwrap();
    let scans = e.audit(&c).unwrap();
    assert_eq!(scans.iter().map(|s| s.found).sum::<u64>(), 0, "{scans:?}");
    assert!(scans.iter().any(|s| s.kind == "sst"), "the live SSTs were scanned");
    e.close().unwrap();
}

#[test]
fn the_ledger_keeps_at_most_its_count_of_persisted_deletes() {
    let d = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let o = Options { ledger_max_persisted: 50, ..opts(&clock) };
    let e = Engine::open(d.path(), o.clone()).unwrap();
    let mut seq = fill(&e, 400);
    // 300 requests of one point delete each, persisted by flushes as they go.
    for i in 0..300u64 {
        let mut b = WriteBatch::new();
        b.delete(k(i)).set_request(request(1_000 + i, None));
        seq += 1;
        e.write(&b, seq).unwrap();
        if i % 10 == 9 {
            e.flush().unwrap();
            e.wait_for_background().unwrap();
        }
    }
    // The 50 newest persisted deletes, and at most the 10 since the last flush pending.
    let st = e.stats();
    assert!(st.deletion_records <= 60, "{} records held", st.deletion_records);
    assert!(st.deletion_records_dropped_early >= 240, "{}", st.deletion_records_dropped_early);
    // The newest requests remain whole (their deletes and their records); older ones are gone.
    let requests = e.delete_requests();
    assert!(requests.len() <= 60 && requests.len() >= 50, "{} requests", requests.len());
    assert!(requests.iter().all(|r| r.deletes == 1), "{requests:?}");
    assert_eq!(requests.last().unwrap().request.id, 1_299);
    assert!(e.deletion(seq).is_some() && e.deletion(401).is_none());
    // The rewritten ledger holds what memory held.
    drop(e);
    let e = Engine::open(d.path(), o).unwrap();
    assert!(e.stats().deletion_records <= 60);
    assert_eq!(e.delete_requests().last().unwrap().request.id, 1_299);
}
