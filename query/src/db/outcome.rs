//! What a request a coordinator issues on every shard did on this shard, recorded under its id
//! in the catalog, in the same batch as the request's (last) change; and likewise each part of
//! a line-protocol request a coordinator sends a shard under a write id. Records of writes are
//! kept ten minutes and those of requests seven days: the write path removes older ones once a
//! minute. The coordinator retries a
//! request until every shard answers, so a shard may see one twice: it answers a request it
//! has completed from the record, and a replica applies a batch that completes a request only
//! once (a proposal still in flight from an earlier attempt becomes a no-op).

use ebb_storage::{BatchOp, Engine, WriteBatch};
use serde::{Deserialize, Serialize};

use super::{Admission, Database};
use crate::error::{QueryError, Result};
use crate::model::catalog::{outcome_key, written_key};

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

/// The record that decides whether `batch` may be applied, if any: a line-protocol write's
/// record (which leads its batch), the outcome record of the request a batch belongs to (every
/// batch of a request completed already is stale), or the outcome record a batch of its own
/// writes (a request that changed nothing, or DDL).
fn completes(batch: &WriteBatch) -> Option<Vec<u8>> {
    let ops = batch.ops();
    if let Some(BatchOp::Put { key, .. }) = ops.first() {
        if is_written_key(key) {
            return Some(key.to_vec());
        }
    }
    if let Some(r) = batch.request() {
        return Some(outcome_key(r.id));
    }
    match ops.last() {
        Some(BatchOp::Put { key, .. }) if is_outcome_key(key) => Some(key.to_vec()),
        _ => None,
    }
}

fn is_outcome_key(key: &[u8]) -> bool {
    let any = outcome_key(0);
    key.len() == any.len() && key[..any.len() - 8] == any[..any.len() - 8]
}

fn is_written_key(key: &[u8]) -> bool {
    let any = written_key(0);
    key.len() == any.len() && key[..any.len() - 8] == any[..any.len() - 8]
}

/// How long the records of writes are kept: far longer than a coordinator retries one.
pub(crate) const WRITES_KEPT_MS: u64 = 10 * 60 * 1000;

/// Adds the record of write `id`, which did `summary`, to `batch` (as its first operation: the
/// batch must be empty).
pub(crate) fn put_written(batch: &mut WriteBatch, id: u64, summary: &crate::WriteSummary) {
    let n = [summary.lines, summary.rows, summary.tables_created, summary.series_created];
    batch.put(written_key(id), serde_json::to_vec(&n.map(|n| n as u64)).unwrap_or_default());
}

/// How long the outcome records of requests are kept: far longer than an intent stays open.
pub(crate) const OUTCOMES_KEPT_MS: u64 = 7 * 24 * 3600 * 1000;

/// Adds the removal of the records of writes made before `now_ms - WRITES_KEPT_MS`, and of
/// requests issued before `now_ms - OUTCOMES_KEPT_MS`, to `batch` (ids begin with their time,
/// so each is one key range).
pub(crate) fn forget_old_records(batch: &mut WriteBatch, now_ms: u64) {
    let id_at = |kept: u64| super::request::request_id_at(now_ms.saturating_sub(kept));
    batch.delete_range(written_key(0), written_key(id_at(WRITES_KEPT_MS)));
    batch.delete_range(outcome_key(0), outcome_key(id_at(OUTCOMES_KEPT_MS)));
}

impl Database {
    /// What write `id` did on this shard, if it was applied here.
    pub fn written(&self, id: u64) -> Result<Option<crate::WriteSummary>> {
        let Some(v) = self.engine().get(&written_key(id), None)? else { return Ok(None) };
        let n: [u64; 4] = serde_json::from_slice(&v)
            .map_err(|e| QueryError::Corrupt(format!("record of write {id}: {e}")))?;
        Ok(Some(crate::WriteSummary {
            lines: n[0] as usize,
            rows: n[1] as usize,
            tables_created: n[2] as usize,
            series_created: n[3] as usize,
        }))
    }

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
        if self.outcome(id)?.is_some() {
            return Ok(());
        }
        let mut batch = WriteBatch::new();
        put_outcome(&mut batch, id, outcome);
        match self.commit(&mut w, &batch, Default::default()) {
            Ok(_) | Err(QueryError::Completed) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Fails with [`QueryError::Completed`] if `spec` is a recorded request that has completed
    /// here (checked under the writer lock, before any work).
    pub(crate) fn check_not_completed(&self, spec: &super::RequestSpec) -> Result<()> {
        match spec.recorded && self.outcome(spec.id)?.is_some() {
            true => Err(QueryError::Completed),
            false => Ok(()),
        }
    }
}

/// Removes from `batch` what `engine` records as applied already: the whole batch if it
/// completes a request recorded as completed, and each write of a group whose record exists
/// (a group commit's batch holds several writes, each led by its record). Every replica
/// decides alike, as each holds the same records.
pub fn admit(
    engine: &Engine,
    batch: &mut WriteBatch,
) -> std::result::Result<Admission, ebb_storage::Error> {
    let applied = |key: &[u8]| Ok::<_, ebb_storage::Error>(engine.get(key, None)?.is_some());
    // Only a batch led by a write's record can hold a group (every batch is looked at here).
    let grouped = batch.ops().first().is_some_and(|op| written_record(op).is_some());
    let writes: Vec<&[u8]> = match grouped {
        true => batch.ops().iter().filter_map(written_record).collect(),
        false => Vec::new(),
    };
    if writes.len() > 1 {
        let fresh = writes.iter().map(|k| applied(k).map(|a| !a)).collect::<Result<Vec<_>, _>>()?;
        if fresh.iter().all(|f| *f) {
            return Ok(Admission::All);
        }
        if !fresh.iter().any(|f| *f) {
            *batch = WriteBatch::new();
            return Ok(Admission::Nothing);
        }
        let mut write = 0;
        let mut keep = false;
        batch.retain(|op| {
            if written_record(op).is_some() {
                keep = fresh[write];
                write += 1;
            }
            keep
        });
        return Ok(Admission::Part);
    }
    match completes(batch) {
        Some(key) if applied(&key)? => {
            *batch = WriteBatch::new();
            Ok(Admission::Nothing)
        }
        _ => Ok(Admission::All),
    }
}

/// The key of `op` if it is the record of a line-protocol write.
fn written_record(op: &BatchOp) -> Option<&[u8]> {
    match op {
        BatchOp::Put { key, .. } if is_written_key(key) => Some(key),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::request::request_id_at;

    #[test]
    fn old_records_are_forgotten_and_recent_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(dir.path(), ebb_storage::Options::default()).unwrap();
        let now = 1_800_000_000_000;
        let (old_w, new_w) = (request_id_at(now - WRITES_KEPT_MS - 1), request_id_at(now - 1));
        let (old_r, new_r) = (request_id_at(now - OUTCOMES_KEPT_MS - 1), request_id_at(now - 1));
        let mut b = WriteBatch::new();
        for id in [old_w, new_w] {
            put_written(&mut b, id, &crate::WriteSummary::default());
        }
        for id in [old_r, new_r] {
            put_outcome(&mut b, id, &RequestOutcome::default());
        }
        e.write(&b, 1).unwrap();
        let mut forget = WriteBatch::new();
        forget_old_records(&mut forget, now);
        e.write(&forget, 10).unwrap();
        let has = |k: Vec<u8>| e.get(&k, None).unwrap().is_some();
        assert!(!has(written_key(old_w)) && has(written_key(new_w)));
        assert!(!has(outcome_key(old_r)) && has(outcome_key(new_r)));
    }

    #[test]
    fn a_group_loses_the_writes_applied_already_and_keeps_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(dir.path(), ebb_storage::Options::default()).unwrap();
        let ids = [request_id_at(1_000), request_id_at(2_000), request_id_at(3_000)];
        let group = || {
            let mut b = WriteBatch::new();
            for (i, id) in ids.iter().enumerate() {
                put_written(&mut b, *id, &crate::WriteSummary::default());
                b.put(format!("row-{i}-a"), "v");
                b.put(format!("row-{i}-b"), "v");
            }
            b
        };
        let rows = |b: &WriteBatch| -> Vec<String> {
            b.ops()
                .iter()
                .filter_map(|op| match op {
                    BatchOp::Put { key, .. } if key.starts_with(b"row-") => {
                        Some(String::from_utf8_lossy(key).into_owned())
                    }
                    _ => None,
                })
                .collect()
        };
        let mut b = group();
        assert_eq!(admit(&e, &mut b).unwrap(), Admission::All);
        assert_eq!(b, group());
        // The second write was applied by an earlier attempt.
        let mut first = WriteBatch::new();
        put_written(&mut first, ids[1], &crate::WriteSummary::default());
        e.write(&first, 1).unwrap();
        let mut b = group();
        assert_eq!(admit(&e, &mut b).unwrap(), Admission::Part);
        assert_eq!(rows(&b), ["row-0-a", "row-0-b", "row-2-a", "row-2-b"]);
        assert_eq!(b.ops().iter().filter(|op| written_record(op).is_some()).count(), 2);
        // All of them were.
        let mut rest = WriteBatch::new();
        for id in [ids[0], ids[2]] {
            put_written(&mut rest, id, &crate::WriteSummary::default());
        }
        e.write(&rest, 10).unwrap();
        let mut b = group();
        assert_eq!(admit(&e, &mut b).unwrap(), Admission::Nothing);
        assert!(b.is_empty());
        // A lone write is admitted or not as a whole.
        let mut lone = WriteBatch::new();
        put_written(&mut lone, ids[0], &crate::WriteSummary::default());
        lone.put("row-x", "v");
        assert_eq!(admit(&e, &mut lone).unwrap(), Admission::Nothing);
    }
}
