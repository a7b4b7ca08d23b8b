//! Seeding a group from a backup: a replica's engine checkpoint (taken with the last log
//! entry it held, see [`super::Replica::checkpoint`]) becomes the first state of a group with
//! one voter, this node, the way a split's child starts (see `split`): the engine keeps the
//! applied entry and records the new membership; the log is empty, purged up to that entry.
//! The group's first leader is elected in a later term, and its entries follow the entry's
//! index, so engine sequence numbers keep rising above every restored row.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use ebb_storage::{Engine, Options, WriteBatch};
use openraft::{BasicNode, LogId, StoredMembership, Vote};

use super::applied;
use super::replica::engine_dir_name;
use super::snapshot::write_atomic;
use crate::error::ReplicaError;
use crate::types::NodeId;

/// Where a restore puts a group's engine checkpoint under the group's directory (`dir`): the
/// first engine generation, which [`seed_restored`] then makes the group's.
pub fn restored_engine_dir(dir: &Path) -> std::path::PathBuf {
    dir.join("shard").join(engine_dir_name(1))
}

/// Makes the group in `dir` (its engine checkpoint at [`restored_engine_dir`]) one whose only
/// voter is `me` at `addr`, starting after the last entry the checkpoint holds; `opts` are the
/// node's engine options. Returns that entry.
pub fn seed_restored(
    dir: &Path,
    opts: &Options,
    me: NodeId,
    addr: &str,
) -> Result<LogId<NodeId>, ReplicaError> {
    let engine_dir = restored_engine_dir(dir);
    let opts = Options { wal: false, external_log: true, ..opts.clone() };
    let engine = Engine::open(&engine_dir, opts)?;
    let (last, _) = applied::read(&engine)?;
    let last = last.ok_or_else(|| {
        ReplicaError::io(&engine_dir)(std::io::Error::other(
            "the restored engine names no applied log entry (not a replica's checkpoint)",
        ))
    })?;
    let members = openraft::Membership::new(
        vec![BTreeSet::from([me])],
        BTreeMap::from([(me, BasicNode::new(addr))]),
    );
    let membership = StoredMembership::new(Some(last), members);
    let mut b = WriteBatch::new();
    applied::record(&mut b, &last, Some(&membership))?;
    engine.write(&b, engine.last_seq() + 1)?;
    engine.close()?;
    write_atomic(&dir.join("shard").join("ENGINE"), b"1")?;
    let vote = Vote::new(last.leader_id.term, last.leader_id.node_id);
    crate::log::seed(&dir.join("log"), vote, last)
        .map_err(|e| ReplicaError::io(dir)(std::io::Error::other(e.to_string())))?;
    Ok(last)
}
