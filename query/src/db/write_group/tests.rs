//! Group commit on a single node: writes queued together commit as one batch, merges, replans,
//! failures and hand-offs.

use std::time::{Duration, Instant};

use super::*;
use crate::db::write_plan::Source;
use crate::lp::Precision;
use crate::model::keys::row_key;

const T0: i64 = 1_700_000_000_000_000_000;

fn open() -> (tempfile::TempDir, Arc<Database>) {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), ebb_storage::Options::default()).unwrap();
    (dir, Arc::new(db))
}

/// The fields stored at point `(host, time)` of table `m`.
fn fields(db: &Database, host: &str, time: i64) -> Vec<usize> {
    let def = db.catalog().table("db", "m").unwrap();
    let series = db.catalog().with_series(def.id, |idx| idx.with_tag(0, host))[0];
    let v = db.engine().get(&row_key(def.id, series, time), None).unwrap().unwrap();
    decode_row(&v).unwrap().into_iter().map(|(i, _)| i).collect()
}

/// Runs `writes` on threads of their own while the writer lock is held, until all of them
/// are queued: they are then committed together. `then` runs under the lock first.
fn queued_together(
    db: &Arc<Database>,
    writes: Vec<String>,
    then: impl FnOnce(&mut Writer),
) -> Vec<Result<WriteSummary>> {
    let mut w = db.writer.lock();
    let n = writes.len();
    let threads: Vec<_> = writes
        .into_iter()
        .map(|body| {
            let db = db.clone();
            std::thread::spawn(move || db.write_lines("db", &body, Precision::Nanoseconds, 0))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while db.queue.queued.lock().len() < n {
        assert!(Instant::now() < deadline, "the writes were not queued");
        std::thread::sleep(Duration::from_millis(5));
    }
    then(&mut w);
    drop(w);
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn queued_writes_commit_as_one_batch_and_each_answers_its_own() {
    let (_dir, db) = open();
    // The schema first: writes that change the catalog commit alone.
    db.write_lines(
        "db",
        &format!("m,host=a x=0,y=0 {T0}\nm,host=b x=0,y=0 {T0}"),
        Precision::Nanoseconds,
        0,
    )
    .unwrap();
    let seq = db.writer.lock().next_seq;
    let writes =
        (1..=6).map(|i| format!("m,host=a x={i} {}\nm,host=b y={i} {}", T0 + i, T0 + i)).collect();
    for r in queued_together(&db, writes, |_| {}) {
        assert_eq!(r.unwrap(), WriteSummary { lines: 2, rows: 2, ..Default::default() });
    }
    // One batch: twelve rows, at consecutive sequence numbers from one commit.
    assert_eq!(db.writer.lock().next_seq, seq + 12);
    assert_eq!(db.group_commits(), GroupCommits { groups: 1, writes: 6, replans: 0 });
    for i in 1..=6 {
        assert_eq!(fields(&db, "a", T0 + i).len(), 1);
    }
}

#[test]
fn a_write_merging_with_a_point_of_the_group_waits_for_the_next_group() {
    let (_dir, db) = open();
    db.write_lines("db", &format!("m,host=a x=0,y=0 {T0}"), Precision::Nanoseconds, 0).unwrap();
    // Both write the same point, each one field: both fields are kept.
    let writes = vec![format!("m,host=a x=1 {}", T0 + 1), format!("m,host=a y=2 {}", T0 + 1)];
    for r in queued_together(&db, writes, |_| {}) {
        r.unwrap();
    }
    assert_eq!(fields(&db, "a", T0 + 1).len(), 2);
}

#[test]
fn a_bad_write_fails_alone_and_a_replanned_one_still_commits() {
    let (_dir, db) = open();
    db.write_lines("db", &format!("m,host=a x=0 {T0}"), Precision::Nanoseconds, 0).unwrap();
    // The catalog changes while they are queued (a database is created): they are planned
    // again, and commit.
    let writes = vec![format!("m,host=a x=1 {}", T0 + 1), format!("m,host=a x=2 {}", T0 + 2)];
    let before = db.queue.counts();
    let r = queued_together(&db, writes, |w| {
        let mut delta = CatalogDelta::default();
        delta.databases.insert("other".into());
        let mut batch = WriteBatch::new();
        delta.write_to(&mut batch).unwrap();
        db.commit(w, &batch, delta).unwrap();
    });
    assert!(r.iter().all(|r| r.is_ok()), "{r:?}");
    let after = db.queue.counts();
    assert_eq!(after.replans, before.replans + 2);
    // Planned again, they commit in one group or two.
    assert_eq!(after.writes, before.writes + 2);
    assert!((before.groups + 1..=before.groups + 2).contains(&after.groups), "{after:?}");
    for t in [T0 + 1, T0 + 2] {
        assert_eq!(fields(&db, "a", t).len(), 1);
    }
    // A write that gives x the wrong type is refused when planned, and fails alone.
    let writes = [format!("m,host=a x=\"text\" {}", T0 + 3), format!("m,host=a x=4 {}", T0 + 4)];
    let (bad, good) = {
        let mut r = queued_together(&db, vec![writes[1].clone()], |_| {}).into_iter();
        (db.write_lines("db", &writes[0], Precision::Nanoseconds, 0), r.next().unwrap())
    };
    assert!(matches!(bad, Err(QueryError::TypeConflict { .. })), "{bad:?}");
    assert_eq!(good.unwrap().rows, 1);
}

#[test]
fn writes_queued_while_groups_are_in_flight_are_committed_by_the_one_that_finishes() {
    let (_dir, db) = open();
    db.write_lines("db", &format!("m,host=a x=0 {T0}"), Precision::Nanoseconds, 0).unwrap();
    let before = db.group_commits();
    let mut w = db.writer.lock();
    // As many groups in flight as allowed, one of them ours.
    w.groups_in_flight = GROUPS_IN_FLIGHT - 1;
    let first = db.queue.push(
        db.prepare(
            "db",
            Source::Body(&format!("m,host=a x=1 {}", T0 + 1)),
            Precision::Nanoseconds,
            0,
        )
        .unwrap(),
        None,
    );
    let group = db.commit_queued(&mut w).unwrap();
    assert_eq!(w.groups_in_flight, GROUPS_IN_FLIGHT);
    drop(w);
    // Writers arriving now find no room: they queue and wait.
    let threads: Vec<_> = (2..6)
        .map(|i| {
            let db = db.clone();
            let body = format!("m,host=a x={i} {}", T0 + i);
            std::thread::spawn(move || db.write_lines("db", &body, Precision::Nanoseconds, 0))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while db.queue.queued.lock().len() < 4 {
        assert!(Instant::now() < deadline, "the writes were not queued");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Ours finishes: it commits them as one group, which one of them finishes.
    group.finish(&db);
    assert!(matches!(first.wait(), Outcome::Written(s) if s.rows == 1));
    for t in threads {
        assert_eq!(t.join().unwrap().unwrap().rows, 1);
    }
    let after = db.group_commits();
    assert_eq!((after.groups, after.writes), (before.groups + 2, before.writes + 5));
    assert_eq!(db.writer.lock().groups_in_flight, GROUPS_IN_FLIGHT - 1);
    for i in 1..6 {
        assert_eq!(fields(&db, "a", T0 + i).len(), 1);
    }
}

#[test]
fn a_group_refused_for_one_write_sends_each_back_alone_and_others_fail_together() {
    let member = || {
        let q = Arc::new(Queued {
            once: None,
            plan: Mutex::new(None),
            outcome: Mutex::new(None),
            decided: Condvar::new(),
        });
        (Member { queued: q.clone(), summary: WriteSummary::default(), decided: false }, q)
    };
    let (members, queued): (Vec<_>, Vec<_>) = (0..3).map(|_| member()).unzip();
    fail(members, &QueryError::BeyondRetention { message: "row too old".into(), line: None });
    assert!(queued.iter().all(|q| matches!(q.wait(), Outcome::Alone)));
    let (members, queued): (Vec<_>, Vec<_>) = (0..3).map(|_| member()).unzip();
    fail(members, &QueryError::NotLeader(Some(2)));
    assert!(queued
        .iter()
        .all(|q| matches!(q.wait(), Outcome::Failed(QueryError::NotLeader(Some(2))))));
    // A write alone in its group fails with the group.
    let (m, q) = member();
    fail(vec![m], &QueryError::BeyondRetention { message: "row too old".into(), line: None });
    assert!(matches!(q.wait(), Outcome::Failed(QueryError::BeyondRetention { .. })));
    // A write dropped undecided (its committer panicked) fails.
    let (m, q) = member();
    drop(m);
    assert!(matches!(q.wait(), Outcome::Failed(QueryError::Internal(_))));
}

#[test]
fn a_write_sent_back_alone_commits_alone() {
    let (_dir, db) = open();
    db.write_lines("db", &format!("m,host=a x=0 {T0}"), Precision::Nanoseconds, 0).unwrap();
    let w = db.writer.lock();
    let writer = {
        let db = db.clone();
        let body = format!("m,host=a x=1 {}", T0 + 1);
        std::thread::spawn(move || db.write_lines("db", &body, Precision::Nanoseconds, 0))
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let queued = loop {
        if let Some(q) = db.queue.pop() {
            break q;
        }
        assert!(Instant::now() < deadline, "the write was not queued");
        std::thread::sleep(Duration::from_millis(5));
    };
    queued.plan.lock().take();
    queued.decide(Outcome::Alone);
    drop(w);
    assert_eq!(writer.join().unwrap().unwrap().rows, 1);
    assert_eq!(fields(&db, "a", T0 + 1).len(), 1);
    assert_eq!(db.group_commits().groups, 0);
}

#[test]
fn a_write_merges_with_a_group_only_where_their_points_meet() {
    let p = |points: Vec<(u32, u64, i64)>| Prepared {
        generation: 0,
        delta: CatalogDelta::default(),
        summary: WriteSummary::default(),
        created: Vec::new(),
        new_series: Vec::new(),
        newest: Vec::new(),
        keys: Vec::new(),
        values: Vec::new(),
        points,
    };
    let written: Points = [(1, 7, 100), (1, 7, 102), (1, 8, 50)].into_iter().collect();
    // Earlier and later times of the same series, between the group's, are no merge.
    assert!(!merges_with(&p(vec![(1, 7, 99), (1, 7, 101), (1, 8, 51), (2, 7, 100)]), &written));
    assert!(merges_with(&p(vec![(1, 7, 101), (1, 8, 50)]), &written));
    assert!(!merges_with(&p(vec![(1, 9, 0)]), &Points::default()));
}
