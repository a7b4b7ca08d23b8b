//! How log entries map onto the engine: sequence numbers derived from the log index, and the
//! applied state (last applied log id, last membership) kept in the engine under reserved keys,
//! written in the same engine batch as the entry's data.

use ebb_storage::{Engine, WriteBatch};
use openraft::{BasicNode, LogId, StoredMembership};

use crate::error::ReplicaError;
use crate::types::NodeId;

/// Bits of an engine sequence number below the log index: the position of an operation inside
/// its entry. An entry holds at most [`MAX_BATCH_OPS`] operations.
pub const POSITION_BITS: u32 = 20;

/// The most operations one replicated write batch may hold (two positions of each entry are kept
/// for the applied state).
pub const MAX_BATCH_OPS: usize = (1 << POSITION_BITS) - 2;

/// Key prefix reserved for replication state (table id `u32::MAX` in the row-key layout).
pub const RESERVED_PREFIX: &[u8] = b"\xff\xff\xff\xffraft/";

/// The key holding the last applied log id.
pub const APPLIED_KEY: &[u8] = b"\xff\xff\xff\xffraft/applied";

/// The key holding the last membership.
pub const MEMBERSHIP_KEY: &[u8] = b"\xff\xff\xff\xffraft/membership";

/// The membership type of every group.
pub type Membership = StoredMembership<NodeId, BasicNode>;

/// The engine sequence number of the first operation of log entry `index`: `(index + 1) << 20`,
/// so every replica stores identical (key, seq) pairs and a range delete is the same key x seq
/// rectangle everywhere.
pub fn entry_seq(index: u64) -> Result<u64, ReplicaError> {
    index
        .checked_add(1)
        .and_then(|i| i.checked_mul(1 << POSITION_BITS))
        .ok_or(ReplicaError::IndexTooLarge(index))
}

/// The log index an engine sequence number was written by (inverse of [`entry_seq`]).
pub fn seq_index(seq: u64) -> Option<u64> {
    (seq >> POSITION_BITS).checked_sub(1)
}

/// Adds the applied-state keys for `log_id` (and `membership` when it changed) to `batch`.
pub fn record(
    batch: &mut WriteBatch,
    log_id: &LogId<NodeId>,
    membership: Option<&Membership>,
) -> Result<(), ReplicaError> {
    batch.put(APPLIED_KEY, postcard::to_allocvec(log_id)?);
    if let Some(m) = membership {
        batch.put(MEMBERSHIP_KEY, postcard::to_allocvec(m)?);
    }
    Ok(())
}

/// Reads the applied state of `engine`.
pub fn read(engine: &Engine) -> Result<(Option<LogId<NodeId>>, Membership), ReplicaError> {
    let applied = match engine.get(APPLIED_KEY, None)? {
        Some(v) => Some(postcard::from_bytes(&v)?),
        None => None,
    };
    let membership = match engine.get(MEMBERSHIP_KEY, None)? {
        Some(v) => postcard::from_bytes(&v)?,
        None => Membership::default(),
    };
    Ok((applied, membership))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_follow_the_log_index() {
        assert_eq!(entry_seq(0).unwrap(), 1 << 20);
        assert_eq!(entry_seq(5).unwrap(), 6 << 20);
        assert_eq!(seq_index(entry_seq(5).unwrap() + 17), Some(5));
        assert_eq!(seq_index(3), None);
        assert!(entry_seq(u64::MAX >> 10).is_err());
        // Consecutive entries never overlap: the last op of entry i is below the first of i+1.
        let last_of_5 = entry_seq(5).unwrap() + MAX_BATCH_OPS as u64 + 1;
        assert!(last_of_5 < entry_seq(6).unwrap());
    }
}
