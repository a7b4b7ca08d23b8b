//! Erasure of everything one tag value identifies (a user's data, for a right-to-be-forgotten
//! request): every series carrying it, in every table of a database, is deleted and removed
//! from its table's series index, under one request id.

use ebb_storage::WriteBatch;

use super::{Database, RequestSpec};
use crate::error::{QueryError, Result};
use crate::model::catalog::CatalogDelta;
use crate::model::keys::series_range;

/// Engine operations per batch of an erasure (a replicated shard takes batches of bounded
/// size; the request id ties the batches together).
const OPS_PER_BATCH: usize = 4096;

/// What an erasure did on one database (one shard in a cluster).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EraseOutcome {
    /// Rows deleted (now invisible).
    pub rows: u64,
    /// Series deleted and removed from the series index.
    pub series: u64,
    /// Tables that had such series.
    pub tables: u64,
    /// Ledger ids of the engine deletes written.
    pub ids: Vec<u64>,
    /// The request id.
    pub request: u64,
}

impl Database {
    /// Deletes every series of every table of database `db` whose tag `tag` is `value`, and
    /// removes those series from the series index, as request `spec`. Rows are counted under
    /// the writer lock first, so the count is exact. Writes that arrive later with the same
    /// tag value make new series.
    pub fn erase(
        &self,
        db: &str,
        tag: &str,
        value: &str,
        spec: &RequestSpec,
    ) -> Result<EraseOutcome> {
        if !self.catalog.has_database(db) {
            return Err(QueryError::UnknownDatabase(db.to_string()));
        }
        let mut w = self.writer.lock();
        self.check_not_completed(spec)?;
        let engine = self.engine();
        let snap = self.counting_snapshot();
        let mut out =
            EraseOutcome { rows: 0, series: 0, tables: 0, ids: Vec::new(), request: spec.id };
        // (table, series, rows) of everything to erase.
        let mut doomed: Vec<(u32, u64, u64)> = Vec::new();
        for t in self.catalog.tables().iter().filter(|t| t.database == db) {
            let Some(pos) = t.tags.iter().position(|x| x == tag) else { continue };
            let mut series: Vec<u64> = self.catalog.with_series(t.id, |idx| {
                idx.iter()
                    .filter(|(_, tags)| tags.get(pos) == Some(value))
                    .map(|(id, _)| id)
                    .collect()
            });
            if series.is_empty() {
                continue;
            }
            series.sort_unstable();
            out.tables += 1;
            for s in series {
                let (lo, hi) = series_range(t.id, s, i64::MIN, None);
                let rows = engine.scan(lo..hi, Some(&snap))?.count() as u64;
                doomed.push((t.id, s, rows));
            }
        }
        drop(snap);
        // Each series takes two operations: its rows and its index record.
        let chunks = doomed.chunks(OPS_PER_BATCH / 2).count();
        for (i, chunk) in doomed.chunks(OPS_PER_BATCH / 2).enumerate() {
            let mut batch = WriteBatch::new();
            let mut delta = CatalogDelta::default();
            let mut rows = 0;
            for &(table, s, n) in chunk {
                let (lo, hi) = series_range(table, s, i64::MIN, None);
                batch.delete_range(lo, hi);
                delta.removed_series.push((table, s));
                rows += n;
            }
            delta.write_to(&mut batch)?;
            batch.set_request(spec.request(rows));
            let n = batch.len() as u64;
            if spec.recorded && i + 1 == chunks {
                // The last batch completes the erasure.
                let done = super::RequestOutcome {
                    rows: out.rows + rows,
                    series: out.series + chunk.len() as u64,
                    tables: out.tables,
                    deletes: out.ids.len() as u64 + n,
                };
                super::outcome::put_outcome(&mut batch, spec.id, &done);
            }
            let seq = self.commit(&mut w, &batch, delta)?;
            out.ids.extend(seq..seq + n);
            out.rows += rows;
            out.series += chunk.len() as u64;
        }
        if spec.recorded && doomed.is_empty() {
            // Nothing to erase here: recorded all the same, so a repeat does nothing either.
            drop(w);
            self.record_outcome(spec.id, &super::RequestOutcome::default())?;
        }
        Ok(out)
    }
}
