//! Deletes on a replicated group: a delete with a short deadline becomes persisted on every
//! replica only once the engine, the Raft log and the snapshots all hold none of its data, and
//! the log purger gets it there before the deadline. Audits of all three find the data before
//! and nothing after.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::harness::{key, Cluster};
use ebb_raft::transport::GroupHandle;
use ebb_raft::{LogPurger, PurgeOutcome};
use ebb_storage::{DeleteRequest, WriteBatch};

const T: Duration = Duration::from_secs(20);

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// Covered values found in the engine, the log and the snapshots of one replica.
fn found(g: &GroupHandle, ids: &[u64]) -> (u64, u64, u64) {
    let engine = g.replica.engine();
    let cov = engine.coverage(ids).unwrap();
    let sum = |v: Vec<ebb_storage::audit::SourceScan>| v.iter().map(|s| s.found).sum::<u64>();
    (
        sum(engine.audit(&cov).unwrap()),
        sum(g.log.audit(&cov).unwrap()),
        sum(g.replica.audit_other_files(&cov).unwrap()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_delete_leaves_engine_log_and_snapshots_of_every_replica_by_its_deadline() {
    let mut c = Cluster::new(200); // openraft snapshots (and keeps logs) on its own too
    for id in 1..=3 {
        c.start(id).await;
    }
    c.initialize(&[1, 2, 3]).await;
    for start in (0..3000u64).step_by(100) {
        let mut b = WriteBatch::new();
        for j in start..start + 100 {
            b.put(key(1, j), format!("secret-{j:05}"));
        }
        c.write(&b, T).await.unwrap();
    }
    let issued = now_ms();
    // Far beyond what the work takes here, so a loaded machine meets it too.
    let deadline = issued + 45_000;
    let mut b = WriteBatch::new();
    b.delete_range(key(1, 0), key(1, 1000)).set_issued_at(issued).set_request(DeleteRequest {
        id: 42,
        kind: "erase".into(),
        text: "writer 1, rows 0..1000".into(),
        rows: Some(1000),
        deadline_ms: Some(deadline),
        issued_by: String::new(),
    });
    let seq = c.write(&b, T).await.unwrap().seq;
    c.wait_converged(T).await;
    for n in c.nodes.values() {
        let (_, in_log, _) = found(&n.group, &[seq]);
        assert_eq!(in_log, 1000, "node {}: the log holds every deleted value", n.id);
        let r = n.group.replica.engine().delete_requests();
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].request.id, r[0].deadline_ms.ms(), r[0].pending), (42, Some(deadline), 1));
    }
    // Writes go on; every replica's purger ticks.
    let purgers: Vec<LogPurger> = (0..3).map(|_| LogPurger::new(Duration::from_secs(30))).collect();
    let start = Instant::now();
    let mut next = 3000u64;
    loop {
        let mut b = WriteBatch::new();
        for j in next..next + 20 {
            b.put(key(2, j), format!("other-{j}"));
        }
        next += 20;
        c.write(&b, T).await.unwrap();
        for (p, n) in purgers.iter().zip(c.nodes.values()) {
            p.tick(&n.group, now_ms()).await.unwrap();
        }
        let done = c
            .nodes
            .values()
            .all(|n| n.group.replica.engine().delete_requests()[0].persisted_at_ms.is_some());
        if done {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(90), "not persisted everywhere");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for n in c.nodes.values() {
        let r = &n.group.replica.engine().delete_requests()[0];
        let at = r.persisted_at_ms.unwrap();
        assert!(at <= deadline, "node {}: persisted {} ms late", n.id, at - deadline);
        assert_eq!(found(&n.group, &[seq]), (0, 0, 0), "node {}", n.id);
        let index = ebb_raft::sm::applied::seq_index(seq).unwrap();
        assert!(n.group.log.first_stored() > index, "the log was purged past the delete");
    }
    c.assert_replicas_identical();
    c.shutdown().await;
}

/// A delete still pending when a replica is added reaches it with its original issue time and
/// deadline, whether the new replica catches up by snapshot or by replaying the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_replica_keeps_the_deadline_of_a_pending_delete() {
    for by_snapshot in [true, false] {
        let mut c = Cluster::new(100_000);
        for id in 1..=2 {
            c.start(id).await;
        }
        c.initialize(&[1, 2]).await;
        for start in (0..500u64).step_by(50) {
            let mut b = WriteBatch::new();
            for j in start..start + 50 {
                b.put(key(1, j), format!("v{j}"));
            }
            c.write(&b, T).await.unwrap();
        }
        let issued = now_ms() - 5_000;
        let deadline = issued + 3_600_000;
        let mut b = WriteBatch::new();
        b.delete_range(key(1, 0), key(1, 100)).set_issued_at(issued).set_request(DeleteRequest {
            id: 77,
            kind: "delete".into(),
            text: "rows 0..100".into(),
            rows: Some(100),
            deadline_ms: Some(deadline),
            issued_by: String::new(),
        });
        c.write(&b, T).await.unwrap();
        for start in (500..1000u64).step_by(50) {
            let mut b = WriteBatch::new();
            for j in start..start + 50 {
                b.put(key(1, j), format!("v{j}"));
            }
            c.write(&b, T).await.unwrap();
        }
        let leader = c.wait_leader(T).await;
        let raft = c.nodes[&leader].group.raft.clone();
        if by_snapshot {
            // The leader's log no longer reaches back: a new replica must take a snapshot.
            let g = c.nodes[&leader].group.clone();
            raft.trigger().snapshot().await.unwrap();
            let start = Instant::now();
            while g.replica.current_snapshot().is_none() {
                assert!(start.elapsed() < T, "no snapshot");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let index = g.replica.current_snapshot().unwrap().0.meta.last_log_id.unwrap().index;
            raft.trigger().purge_log(index).await.unwrap();
            while g.log.first_stored() <= index {
                assert!(start.elapsed() < T, "not purged");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        // Replica 3 joins now, well after the delete was issued.
        c.start(3).await;
        raft.add_learner(3, c.member(3), true).await.unwrap();
        c.wait_converged(T).await;
        let installed = c.nodes[&3].group.replica.current_snapshot().is_some();
        assert_eq!(installed, by_snapshot, "caught up by snapshot iff the log was purged");
        let r = c.nodes[&3].group.replica.engine().delete_requests();
        let r = r.iter().find(|r| r.request.id == 77).expect("the request reached the new replica");
        assert_eq!((r.issued_at_ms, r.deadline_ms.ms()), (issued, Some(deadline)), "{by_snapshot}");
        assert_eq!(r.persisted_at_ms, None, "still pending");
        c.assert_replicas_identical();
        c.shutdown().await;
    }
}

/// A snapshot being received may hold any deleted value, so it holds back every delete on its
/// replica; compacting the log cannot change that, so the purger waits rather than compacting
/// over and over, and persists the delete once the receive is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_snapshot_being_received_holds_deletes_back_without_compactions() {
    let mut c = Cluster::new(10_000);
    for id in 1..=3 {
        c.start(id).await;
    }
    c.initialize(&[1, 2, 3]).await;
    let mut b = WriteBatch::new();
    for j in 0..500u64 {
        b.put(key(1, j), format!("secret-{j:05}"));
    }
    c.write(&b, T).await.unwrap();
    let deadline = now_ms() + 60_000;
    let mut b = WriteBatch::new();
    b.delete_range(key(1, 0), key(1, 500)).set_issued_at(now_ms()).set_request(DeleteRequest {
        id: 7,
        kind: "delete".into(),
        text: "rows 0..500".into(),
        rows: Some(500),
        deadline_ms: Some(deadline),
        issued_by: String::new(),
    });
    let seq = c.write(&b, T).await.unwrap().seq;
    c.wait_converged(T).await;
    let n = c.nodes.values().next().unwrap();
    n.group.replica.engine().flush().unwrap();
    n.group.replica.engine().compact_range(None, None).unwrap();
    let receiving = n.group.replica.incoming_dir("receiving").unwrap();
    std::fs::write(receiving.join("00000009.sst"), b"partial").unwrap();
    let p = LogPurger::new(Duration::from_secs(1));
    let before = n.group.log.first_stored();
    for _ in 0..3 {
        assert_eq!(p.tick(&n.group, now_ms()).await.unwrap(), PurgeOutcome::Idle);
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    assert_eq!(n.group.log.first_stored(), before, "no compaction while the copy is there");
    assert!(n.group.replica.engine().delete_requests()[0].persisted_at_ms.is_none());
    std::fs::remove_dir_all(&receiving).unwrap();
    assert!(matches!(p.tick(&n.group, now_ms()).await.unwrap(), PurgeOutcome::Compacted(_)));
    p.tick(&n.group, now_ms()).await.unwrap();
    let r = &n.group.replica.engine().delete_requests()[0];
    assert!(r.persisted_at_ms.is_some_and(|at| at <= deadline), "{r:?}");
    assert_eq!(found(&n.group, &[seq]), (0, 0, 0));
    c.shutdown().await;
}
