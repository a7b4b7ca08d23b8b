//! One shard group replicated over three (and more) nodes in one process, on loopback gRPC:
//! replication, leader failure, restarts from disk, partitions, snapshot install to a lagging
//! node and membership change under load. After each: no acknowledged write lost, no deleted
//! row visible, every replica identical.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use crate::harness::{key, Cluster, Oracle};
use ebb_storage::WriteBatch;

const T: Duration = Duration::from_secs(20);

/// Writes rows `from..to` of writer `w` in batches of `per` (and deletes every 10th batch's
/// first half again with a range delete), recording acknowledged outcomes in `oracle`.
async fn load(c: &Cluster, oracle: &mut Oracle, w: u32, from: u64, to: u64, per: u64) -> usize {
    let mut failed = 0;
    let mut i = from;
    while i < to {
        let end = (i + per).min(to);
        let mut b = WriteBatch::new();
        for j in i..end {
            b.put(key(w, j), format!("w{w}-{j}"));
        }
        let delete = (i / per) % 10 == 9;
        let mid = i + (end - i) / 2;
        if delete {
            b.delete_range(key(w, i), key(w, mid));
            b.set_issued_at(1_800_000_000_000 + i);
        }
        match c.write(&b, T).await {
            Ok(r) => {
                assert_eq!(r.error, None);
                for j in i..end {
                    if delete && j < mid {
                        oracle.deleted.insert(key(w, j));
                    } else {
                        oracle.present.insert(key(w, j), format!("w{w}-{j}").into_bytes());
                    }
                }
            }
            Err(_) => failed += 1,
        }
        i = end;
    }
    failed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicates_to_every_node_and_survives_leader_failure_and_restart() {
    let mut c = Cluster::new(10_000);
    for id in 1..=3 {
        c.start(id).await;
    }
    c.initialize(&[1, 2, 3]).await;
    let mut oracle = Oracle::default();
    assert_eq!(load(&c, &mut oracle, 1, 0, 2000, 50).await, 0);
    c.wait_converged(T).await;
    oracle.check(&c.assert_replicas_identical());

    // Kill the leader: the other two elect a new one and go on acknowledging writes.
    let leader = c.wait_leader(T).await;
    c.kill(leader).await;
    let new_leader = c.wait_leader(T).await;
    assert_ne!(new_leader, leader);
    assert_eq!(load(&c, &mut oracle, 2, 0, 1000, 50).await, 0);

    // The old leader restarts from disk and catches up.
    c.start(leader).await;
    assert_eq!(load(&c, &mut oracle, 3, 0, 500, 50).await, 0);
    c.wait_converged(T).await;
    oracle.check(&c.assert_replicas_identical());

    // Restart every node at once (a full cluster crash): nothing acknowledged is lost.
    for id in 1..=3 {
        c.kill(id).await;
    }
    for id in 1..=3 {
        c.start(id).await;
    }
    c.wait_leader(T).await;
    assert_eq!(load(&c, &mut oracle, 4, 0, 200, 50).await, 0);
    c.wait_converged(T).await;
    oracle.check(&c.assert_replicas_identical());
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partitioned_leader_steps_aside_and_the_cluster_heals() {
    let mut c = Cluster::new(10_000);
    for id in 1..=3 {
        c.start(id).await;
    }
    c.initialize(&[1, 2, 3]).await;
    let mut oracle = Oracle::default();
    load(&c, &mut oracle, 1, 0, 500, 50).await;
    let old = c.wait_leader(T).await;
    let others: Vec<u64> = (1..=3).filter(|&i| i != old).collect();
    c.faults.isolate(old, &others);
    // The majority side elects a leader of its own and keeps acknowledging writes; the
    // isolated node cannot acknowledge anything.
    let new = c.wait_leader(T).await;
    assert_ne!(new, old);
    let mut b = WriteBatch::new();
    b.put(key(99, 0), "lost-leader");
    let stale = tokio::time::timeout(
        Duration::from_secs(2),
        c.nodes[&old].group.raft.client_write(ebb_raft::Command::Batch(b.to_bytes())),
    )
    .await;
    assert!(!matches!(stale, Ok(Ok(_))), "an isolated leader acknowledged a write");
    assert_eq!(load(&c, &mut oracle, 2, 0, 500, 50).await, 0);
    c.faults.heal();
    c.wait_converged(T).await;
    let rows = c.assert_replicas_identical();
    oracle.check(&rows);
    assert!(!rows.iter().any(|(k, _)| *k == key(99, 0)), "an unacknowledged write appeared");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lagging_node_catches_up_from_a_streamed_snapshot() {
    // Snapshots every 100 entries; the log before them is purged, so a node that missed them
    // can only catch up by installing a snapshot.
    let mut c = Cluster::new(100);
    for id in 1..=3 {
        c.start(id).await;
    }
    c.initialize(&[1, 2, 3]).await;
    let mut oracle = Oracle::default();
    load(&c, &mut oracle, 1, 0, 500, 50).await;
    c.wait_converged(T).await;
    let leader = c.wait_leader(T).await;
    let lagging = (1..=3).find(|&i| i != leader).unwrap();
    c.kill(lagging).await;
    assert_eq!(load(&c, &mut oracle, 2, 0, 20_000, 40).await, 0);
    let purged = c.nodes[&leader].group.raft.metrics().borrow().purged;
    assert!(purged.is_some(), "the leader should have purged its log after snapshots");
    c.start(lagging).await;
    c.wait_converged(Duration::from_secs(60)).await;
    let m = c.nodes[&lagging].group.raft.metrics().borrow().clone();
    assert!(m.snapshot.is_some(), "the lagging node must have installed a snapshot");
    oracle.check(&c.assert_replicas_identical());
    // Deletion ledgers match: same ids with the same original issue times.
    let ledger = |id: u64| {
        c.nodes[&id]
            .group
            .replica
            .engine()
            .deletions()
            .into_iter()
            .map(|d| (d.id, d.issued_at_ms))
            .collect::<Vec<_>>()
    };
    assert!(!ledger(leader).is_empty());
    assert_eq!(ledger(lagging), ledger(leader));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn membership_changes_under_load_lose_nothing() {
    let mut c = Cluster::new(500);
    for id in 1..=5 {
        c.start(id).await;
    }
    c.initialize(&[1, 2, 3]).await;
    let mut oracle = Oracle::default();
    load(&c, &mut oracle, 1, 0, 300, 30).await;
    let c = std::sync::Arc::new(tokio::sync::Mutex::new(c));
    let writer = {
        let c = c.clone();
        tokio::spawn(async move {
            let mut oracle = Oracle::default();
            let mut failed = 0;
            for round in 0..40u64 {
                let g = c.lock().await;
                failed += load(&g, &mut oracle, 2, round * 30, round * 30 + 30, 30).await;
                drop(g);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            (oracle, failed)
        })
    };
    // Move the group from {1,2,3} to {3,4,5}: learners first, then the voter change.
    for id in [4, 5] {
        let (raft, member) = {
            let g = c.lock().await;
            let l = g.wait_leader(T).await;
            (g.nodes[&l].group.raft.clone(), g.member(id))
        };
        raft.add_learner(id, member, true).await.unwrap();
    }
    {
        let g = c.lock().await;
        let l = g.wait_leader(T).await;
        let raft = g.nodes[&l].group.raft.clone();
        drop(g);
        raft.change_membership([3u64, 4, 5], false).await.unwrap();
    }
    let (more, failed) = writer.await.unwrap();
    assert_eq!(failed, 0, "writes failed during the membership change");
    oracle.present.extend(more.present);
    oracle.deleted.extend(more.deleted);
    let mut c = std::sync::Arc::try_unwrap(c).ok().unwrap().into_inner();
    // Nodes 1 and 2 left; the rest are identical and complete.
    c.kill(1).await;
    c.kill(2).await;
    load(&c, &mut oracle, 3, 0, 100, 50).await;
    c.wait_converged(T).await;
    oracle.check(&c.assert_replicas_identical());
    let voters: Vec<u64> = {
        let l = c.wait_leader(T).await;
        c.nodes[&l]
            .group
            .raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .voter_ids()
            .collect()
    };
    assert_eq!(voters, vec![3, 4, 5]);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lost_and_delayed_messages_lose_nothing() {
    let mut c = Cluster::new(300);
    for id in 1..=3 {
        c.start(id).await;
    }
    c.initialize(&[1, 2, 3]).await;
    // One request in ten and one reply in ten lost, every message 3 ms late.
    c.faults.set_drop(0.1);
    c.faults.set_delay(Duration::from_millis(3));
    let mut oracle = Oracle::default();
    let failed = load(&c, &mut oracle, 1, 0, 3000, 30).await;
    assert_eq!(failed, 0, "writes kept failing under message loss");
    c.faults.heal();
    c.wait_converged(T).await;
    oracle.check(&c.assert_replicas_identical());
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_power_cut_of_the_whole_cluster_loses_nothing_acknowledged() {
    // Shard engines keep no WAL: what they had not flushed comes back from the Raft log.
    let mut c = Cluster::new(10_000);
    c.watch_power();
    for id in 1..=3 {
        c.start(id).await;
    }
    c.initialize(&[1, 2, 3]).await;
    let mut oracle = Oracle::default();
    assert_eq!(load(&c, &mut oracle, 1, 0, 300, 30).await, 0);
    for round in 0..2u64 {
        for id in 1..=3 {
            c.kill(id).await;
        }
        c.power_cut(ebb_storage::durable::Loss::Torn(round * 7 + 1));
        for id in 1..=3 {
            c.start(id).await;
        }
        c.wait_leader(T).await;
        assert_eq!(load(&c, &mut oracle, 2 + round as u32, 0, 100, 20).await, 0);
        c.wait_converged(T).await;
        oracle.check(&c.assert_replicas_identical());
    }
    c.shutdown().await;
}
