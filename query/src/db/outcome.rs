//! What a request a coordinator issues on every shard did on this shard, recorded under its id
//! in the catalog, in the same batch as the request's (last) change. The coordinator retries a
//! request until every shard answers, so a shard may see one twice: it answers a request it
//! has completed from the record, and a replica applies a batch that completes a request only
//! once (a proposal still in flight from an earlier attempt becomes a no-op).

use ebb_storage::{BatchOp, Engine, WriteBatch};
use serde::{Deserialize, Serialize};

use super::Database;
use crate::error::{QueryError, Result};
use crate::model::catalog::outcome_key;

/// What a request did on one shard.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestOutcome {
    /// Rows it deleted (or erased).
    pub rows: u64,
    /// Series it erased.
    pub series: u64,
    /// Tables it touched (an erasure).
    pub tables: u64,
    /// Engine deletes it wrote.
    pub deletes: u64,
}

/// Adds the outcome record of request `id` to `batch`, making it the batch that completes it.
pub(crate) fn put_outcome(batch: &mut WriteBatch, id: u64, outcome: &RequestOutcome) {
    // Encoding a struct of integers cannot fail.
    batch.put(outcome_key(id), serde_json::to_vec(outcome).unwrap_or_default());
}

/// The request whose outcome record `batch` writes, if any.
fn completes(batch: &WriteBatch) -> Option<Vec<u8>> {
    let id = batch.request()?.id;
    let key = outcome_key(id);
    batch
        .ops()
        .iter()
        .any(|op| matches!(op, BatchOp::Put { key: k, .. } if *k == key))
        .then_some(key)
}

impl Database {
    /// The recorded outcome of request `id` on this shard, if it completed here.
    pub fn outcome(&self, id: u64) -> Result<Option<RequestOutcome>> {
        match self.engine().get(&outcome_key(id), None)? {
            None => Ok(None),
            Some(v) => serde_json::from_slice(&v)
                .map(Some)
                .map_err(|e| QueryError::Corrupt(format!("outcome of request {id}: {e}"))),
        }
    }

    /// Records that request `id` completed here with `outcome` (for statements whose changes
    /// are idempotent, recorded after them).
    pub fn record_outcome(&self, id: u64, outcome: &RequestOutcome) -> Result<()> {
        let mut w = self.writer.lock();
        let mut batch = WriteBatch::new();
        put_outcome(&mut batch, id, outcome);
        self.commit(&mut w, &batch, Default::default()).map(|_| ())
    }
}

/// False if `batch` completes a request `engine` has already recorded as completed: a replica
/// applies it as a no-op. Every replica decides alike, as each holds the same records.
pub fn admits(
    engine: &Engine,
    batch: &WriteBatch,
) -> std::result::Result<bool, ebb_storage::Error> {
    match completes(batch) {
        None => Ok(true),
        Some(key) => Ok(engine.get(&key, None)?.is_none()),
    }
}
