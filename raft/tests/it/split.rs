//! A group splits: every replica forks the same child at the split entry, the child group
//! elects a leader on its own, holds what the parent held minus what its first batch drops,
//! takes writes, and a second split off the same child changes nothing.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use crate::harness::{contents, key, Cluster, Rows};
use ebb_raft::transport::GroupHandle;
use ebb_raft::Command;
use ebb_storage::WriteBatch;

const T: Duration = Duration::from_secs(20);
const CHILD: u64 = 8;

/// Rows of writers 1 and 2, `n` each.
fn rows(n: u64) -> WriteBatch {
    let mut b = WriteBatch::new();
    for w in 1..=2 {
        for i in 0..n {
            b.put(key(w, i), format!("w{w}-{i}"));
        }
    }
    b
}

/// The user rows of `rows` (replication keys left out).
fn user(rows: Rows) -> Rows {
    rows.into_iter().filter(|(k, _)| !k.starts_with(b"\xff\xff\xff\xff")).collect()
}

/// Which of `children` leads the child group. An index, not a handle: a handle kept past a
/// node's restart would hold that replica's engine (and its directory lock) open.
async fn child_leader(children: &[GroupHandle]) -> usize {
    let deadline = Instant::now() + T;
    loop {
        if let Some(l) = children.iter().position(|g| g.raft.metrics().borrow().state.is_leader()) {
            return l;
        }
        assert!(Instant::now() < deadline, "the child elected no leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn wait_applied(groups: &[GroupHandle], index: u64) {
    let deadline = Instant::now() + T;
    while groups
        .iter()
        .any(|g| g.raft.metrics().borrow().last_applied.map(|l| l.index) < Some(index))
    {
        assert!(Instant::now() < deadline, "child replicas did not apply {index}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_replica_forks_the_same_child_which_then_runs_as_a_group_of_its_own() {
    let mut c = Cluster::new(10_000);
    for id in 1..=3 {
        c.start(id).await;
    }
    c.initialize(&[1, 2, 3]).await;
    c.write(&rows(300), T).await.unwrap();
    // The parent keeps writer 1, the child writer 2.
    let mut keep = WriteBatch::new();
    keep.delete_range(key(2, 0), key(3, 0));
    let mut give = WriteBatch::new();
    give.delete_range(key(1, 0), key(2, 0));
    let split =
        Command::Split { child: CHILD, batch: keep.to_bytes(), child_batch: give.to_bytes() };
    let leader = c.wait_leader(T).await;
    let r = c.nodes[&leader].group.raft.client_write(split.clone()).await.unwrap();
    assert_eq!((r.data.error.as_deref(), r.data.duplicate), (None, false));
    let split_index = r.log_id.index;
    c.wait_converged(T).await;
    let parent = user(c.assert_replicas_identical());
    assert!(parent.iter().all(|(k, _)| k[..12] == key(1, 0)[..12]), "the parent kept writer 1");
    assert_eq!(parent.len(), 300);

    let mut children = Vec::new();
    for id in 1..=3 {
        children.push(c.start_child(id, CHILD).await);
    }
    let leader = &children[child_leader(&children).await];
    let term = leader.raft.metrics().borrow().current_term;
    assert!(term > r.log_id.leader_id.term, "the child's terms continue the parent's");
    let mut more = WriteBatch::new();
    more.put(key(2, 1000), "after the split");
    let w = leader.raft.client_write(Command::Batch(more.to_bytes())).await.unwrap();
    assert!(w.log_id.index > split_index, "the child's log follows the split entry");
    wait_applied(&children, w.log_id.index).await;
    let first = user(contents(&children[0].replica.engine()));
    for g in &children[1..] {
        assert!(user(contents(&g.replica.engine())) == first, "child replicas differ");
    }
    assert_eq!(first.len(), 301);
    assert!(first.iter().all(|(k, _)| k[..12] == key(2, 0)[..12]), "the child holds writer 2");
    assert!(first.iter().any(|(k, v)| *k == key(2, 1000) && v == b"after the split"));

    // Splitting off the same child again is a no-op.
    let leader = c.wait_leader(T).await;
    let again = c.nodes[&leader].group.raft.client_write(split).await.unwrap();
    assert!(again.data.duplicate);
    c.wait_converged(T).await;
    assert_eq!(user(c.assert_replicas_identical()), parent);

    // A restarted node reopens its child replica from disk.
    let _ = children[2].raft.shutdown().await;
    children.pop();
    c.kill(3).await;
    c.start(3).await;
    children.push(c.start_child(3, CHILD).await);
    let leader = &children[child_leader(&children).await];
    let mut more = WriteBatch::new();
    more.put(key(2, 1001), "after a restart");
    let w = leader.raft.client_write(Command::Batch(more.to_bytes())).await.unwrap();
    wait_applied(&children, w.log_id.index).await;
    for g in &children {
        assert_eq!(user(contents(&g.replica.engine())).len(), 302);
        let _ = g.raft.shutdown().await;
    }
    c.shutdown().await;
}
