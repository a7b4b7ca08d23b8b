//! A [`Database`] whose changes are replicated: every write batch and retention change is
//! proposed to the shard's Raft group, and every replica (the proposer included) installs the
//! catalog changes and engine swaps the group applies.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ebb_storage::{BatchOp, Engine, WriteBatch};
use parking_lot::{Mutex, RwLock};

use super::{Database, Writer};
use crate::error::Result;
use crate::model::catalog::{Catalog, CatalogDelta};
use crate::model::keys::{parse_row_key, CATALOG_TABLE};

/// Where a replicated database's changes go: a Raft group. Calls block until the change is
/// committed and applied on this replica, so callers run off the async executor.
pub trait Replicator: Send + Sync + std::fmt::Debug {
    /// Proposes `batch`, issued at `issued_at_ms` unless it carries its own issue time, and
    /// waits until it is applied here. Returns the engine sequence number of its first
    /// operation. A batch the group applied as a no-op (refused alike by every replica) is an
    /// error.
    fn propose(&self, batch: &WriteBatch, issued_at_ms: u64) -> Result<u64>;

    /// Proposes a retention change for keys starting with `prefix` and waits until it is
    /// applied here.
    fn propose_retention(&self, prefix: Vec<u8>, retention: Option<Duration>) -> Result<()>;
}

impl Database {
    /// The database of a shard replica over `engine`, whose changes go through `replicator`.
    /// Install [`Database::on_applied`] and [`Database::on_replaced`] as the replica's apply
    /// hook before the group applies anything.
    pub fn replicated(engine: Arc<Engine>, replicator: Arc<dyn Replicator>) -> Result<Database> {
        let catalog = Catalog::load(&engine)?;
        let next_seq = engine.last_seq() + 1;
        Ok(Database {
            engine: RwLock::new(engine),
            catalog,
            writer: Mutex::new(Writer { next_seq, written_forgotten_ms: 0 }),
            replicator: Some(replicator),
            default_retention: RwLock::new(None),
            access: RwLock::new(Default::default()),
            reserve: RwLock::new(None),
        })
    }

    /// True if changes go through a Raft group.
    pub fn is_replicated(&self) -> bool {
        self.replicator.is_some()
    }

    pub(super) fn propose(&self, rep: &dyn Replicator, batch: &WriteBatch) -> Result<u64> {
        if batch.is_empty() {
            return Ok(0);
        }
        rep.propose(batch, crate::now_ms())
    }

    /// Sets a retention rule: on the engine, or through the group.
    pub(super) fn set_rule(&self, prefix: Vec<u8>, retention: Option<Duration>) -> Result<()> {
        match &self.replicator {
            Some(rep) => rep.propose_retention(prefix, retention),
            None => Ok(self.engine().set_retention(prefix, retention)?),
        }
    }

    /// Installs what an applied batch changed in the catalog (tables, series, the newest time
    /// of each written series). Called on every replica for every applied batch.
    pub fn on_applied(&self, batch: &WriteBatch) {
        match CatalogDelta::read_from(batch, &self.catalog) {
            Ok(delta) if !delta.is_empty() => self.catalog.apply(delta),
            Ok(_) => {}
            Err(e) => tracing::error!(%e, "an applied batch holds undecodable catalog records"),
        }
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
        for ((table, series), t) in touched {
            self.catalog.with_series_mut(table, |idx| idx.note_time(series, t));
        }
    }

    /// Switches to `engine` (a snapshot replaced the replica's) and reloads the catalog from it.
    pub fn on_replaced(&self, engine: &Arc<Engine>) -> Result<()> {
        let _w = self.writer.lock();
        *self.engine.write() = engine.clone();
        self.catalog.reload(engine)
    }
}
