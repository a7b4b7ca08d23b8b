//! [`Database::apply`]: the one path by which a change reaches the engine and the catalog. A
//! single node applies its changes under its writer lock, at the sequence numbers the writer
//! assigns; every replica of a shard applies the changes its Raft group commits, in log order, at
//! the sequence numbers their log index gives.

use std::borrow::Cow;
use std::collections::HashMap;

use ebb_storage::{BatchOp, Engine, Staged, WriteBatch};

use super::Database;
use crate::model::catalog::{Catalog, CatalogDelta};
use crate::model::keys::{parse_row_key, CATALOG_TABLE};

/// A change to a database: an engine write batch and what it changes in the catalog.
pub(crate) struct Change<'a> {
    /// The batch (catalog records included).
    pub batch: &'a WriteBatch,
    /// The catalog records the batch holds.
    pub delta: CatalogDelta,
    /// The newest row time the batch writes, per series: `(table, series, time)`.
    pub newest: Cow<'a, [(u32, u64, i64)]>,
}

impl<'a> Change<'a> {
    /// The change `batch` makes, read from the batch alone (for a batch another node planned).
    /// Catalog records that do not decode are logged and skipped: the batch is applied whatever
    /// they hold, alike on every replica.
    pub fn read_from(batch: &'a WriteBatch, catalog: &Catalog) -> Change<'a> {
        let delta = CatalogDelta::read_from(batch, catalog).unwrap_or_else(|e| {
            tracing::error!(%e, "an applied batch holds undecodable catalog records");
            CatalogDelta::default()
        });
        let mut touched: HashMap<(u32, u64), i64> = HashMap::new();
        for op in batch.ops() {
            if let BatchOp::Put { key, .. } = op {
                if let Some((table, series, time)) = parse_row_key(key) {
                    if table != CATALOG_TABLE {
                        let t = touched.entry((table, series)).or_insert(time);
                        *t = (*t).max(time);
                    }
                }
            }
        }
        let newest = touched.into_iter().map(|((table, series), t)| (table, series, t)).collect();
        Change { batch, delta, newest: Cow::Owned(newest) }
    }
}

impl Database {
    /// Writes `change.batch` to `engine` at sequence numbers from `seq`, then installs its
    /// catalog records and notes the newest times it writes. The write is ordered and visible
    /// on return; it is durable once the returned [`Staged`] is (none for an empty batch). If
    /// the engine refuses the batch, nothing changes.
    pub(crate) fn apply(
        &self,
        engine: &Engine,
        change: Change<'_>,
        seq: u64,
    ) -> Result<Option<Staged>, ebb_storage::Error> {
        let removes = !change.delta.dropped.is_empty()
            || !change.delta.removed_series.is_empty()
            || change.batch.ops().iter().any(|op| {
                matches!(op, BatchOp::DeleteRange { .. } | BatchOp::DeleteTimeRange { .. })
            });
        if removes {
            self.removals.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        }
        let staged = match change.batch.is_empty() {
            true => None,
            false => Some(engine.stage(change.batch, seq)?),
        };
        self.catalog.apply(change.delta);
        self.catalog.note_times(&change.newest);
        Ok(staged)
    }
}
