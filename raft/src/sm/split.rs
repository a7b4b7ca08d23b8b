//! Splitting a group: every replica of the parent, applying the same `Split` entry, forks its
//! engine into the first state of the child group on the same node.
//!
//! The child starts where the parent's log stood at the split entry: its engine is a checkpoint
//! of the parent's (hard links: no data is copied) holding the parent's applied state and
//! membership, with the entry's child batch written at the entry's sequence numbers; its log
//! is empty, purged up to the split entry, with the entry's term voted. So the child's replicas
//! agree on its state without a word between them, its first leader is elected in a later
//! term, its entries follow the parent's index (engine sequence numbers keep rising above
//! every forked row), and a replica that missed the fork (it installed a later snapshot of the
//! parent) gets the child's state as a snapshot from the child's leader.

use std::path::{Path, PathBuf};

use ebb_storage::{Engine, WriteBatch};
use openraft::{LogId, Vote};

use super::applied;
use super::replica::{engine_dir_name, Replica};
use super::snapshot::{sync_dir, write_atomic};
use crate::error::ReplicaError;
use crate::types::NodeId;

/// The name of group `id`'s directory among a node's shard directories.
pub fn group_dir_name(id: u64) -> String {
    format!("shard-{id}")
}

/// Key prefix, in the parent's reserved keys, of the record that it split off child `id`
/// (an entry splitting off the same child again is a no-op).
const SPLIT_PREFIX: &[u8] = b"\xff\xff\xff\xffraft/split/";

/// The key recording that a group split off child `child`.
pub(super) fn split_key(child: u64) -> Vec<u8> {
    let mut k = SPLIT_PREFIX.to_vec();
    k.extend_from_slice(&child.to_be_bytes());
    k
}

/// The directory of group `child` beside the group whose replica lives in `replica_root`
/// (`<node dir>/shard-{id}/shard`).
fn child_dir(replica_root: &Path, child: u64) -> Option<PathBuf> {
    Some(replica_root.parent()?.parent()?.join(group_dir_name(child)))
}

/// Forks `engine` (the parent replica's, every entry before `log_id` applied) into group
/// `child`'s directory, applying `batch` to the child at `seq`. Does nothing if the child's
/// directory exists already (this node forked it before a crash, or opened the child's replica
/// to receive a snapshot).
pub(super) fn fork(
    replica: &Replica,
    engine: &Engine,
    child: u64,
    batch: &WriteBatch,
    log_id: &LogId<NodeId>,
    seq: u64,
) -> Result<(), ReplicaError> {
    let Some(dir) = child_dir(replica.root(), child) else {
        return Err(ReplicaError::invalid(replica.root(), "no parent directory to fork beside"));
    };
    if dir.exists() {
        tracing::info!(child, dir = %dir.display(), "the child of a split is here already");
        return Ok(());
    }
    let base = dir.parent().map(Path::to_path_buf).unwrap_or_default();
    let tmp = base.join(format!("{}.forking", group_dir_name(child)));
    let _ = std::fs::remove_dir_all(&tmp);
    let made = make(replica, engine, batch, log_id, seq, &tmp);
    if made.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    made?;
    if dir.exists() {
        // The node opened the child's replica meanwhile (the cluster routed to it before this
        // replica applied the split): it is sent the child's state by the child's leader.
        let _ = std::fs::remove_dir_all(&tmp);
        tracing::info!(child, "the child of a split opened here before its fork");
        return Ok(());
    }
    if let Err(e) = std::fs::rename(&tmp, &dir) {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(ReplicaError::io(&dir)(e));
    }
    sync_dir(&base)?;
    tracing::info!(child, index = log_id.index, "forked a split's child");
    Ok(())
}

/// Makes the child's directory in `tmp`: the engine checkpoint with `batch` and the applied
/// state written, and the seeded log.
fn make(
    replica: &Replica,
    engine: &Engine,
    batch: &WriteBatch,
    log_id: &LogId<NodeId>,
    seq: u64,
    tmp: &Path,
) -> Result<(), ReplicaError> {
    let shard = tmp.join("shard");
    ebb_storage::durable::create_dir_all(&shard).map_err(ReplicaError::io(&shard))?;
    let engine_dir = shard.join(engine_dir_name(1));
    engine.checkpoint(&engine_dir)?;
    write_atomic(&shard.join("ENGINE"), b"1")?;
    let (_, membership) = applied::read(engine)?;
    {
        let forked = Engine::open(&engine_dir, replica.engine_options().clone())?;
        let mut b = batch.clone();
        applied::record(&mut b, log_id, Some(&membership))?;
        forked.write(&b, seq)?;
        forked.close()?;
    }
    let vote = Vote::new(log_id.leader_id.term, log_id.leader_id.node_id);
    crate::log::seed(&tmp.join("log"), vote, *log_id)
        .map_err(|e| ReplicaError::io(tmp)(std::io::Error::other(e.to_string())))?;
    sync_dir(tmp)
}
