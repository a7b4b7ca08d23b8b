//! What a caller's own log (and copies of the engine's files, such as snapshots) no longer
//! holds, for engines whose writes also live in the caller's log (`Options::external_log`): a
//! delete is persisted only once both the engine and the caller hold none of its data.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{Engine, Inner};
use crate::Result;

/// Deletes the caller's log and copies hold no data of: every delete below `below`, and the
/// ones in `also` above it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogClearance {
    /// Every delete with a lower id is clear.
    pub below: u64,
    /// Further deletes that are clear.
    pub also: BTreeSet<u64>,
}

impl LogClearance {
    /// Every delete below `below`, none above.
    pub fn below(below: u64) -> LogClearance {
        LogClearance { below, also: BTreeSet::new() }
    }

    /// True if delete `id` is clear.
    pub fn is_clear(&self, id: u64) -> bool {
        id < self.below || self.also.contains(&id)
    }
}

impl Inner {
    pub(super) fn log_clearance(&self) -> Arc<LogClearance> {
        self.deletes.log_clearance.read().clone()
    }
}

impl Engine {
    /// With `Options::external_log`: what the caller's log and copies no longer hold. Deletes
    /// clear of both the engine and the caller are marked persisted. The caller recomputes it
    /// from what it stores, so it may shrink (a new snapshot links files with pending deletes).
    pub fn set_log_clearance(&self, c: LogClearance) -> Result<()> {
        if !self.inner.opts.external_log {
            return Ok(());
        }
        let before =
            std::mem::replace(&mut *self.inner.deletes.log_clearance.write(), Arc::new(c.clone()));
        if c.below > before.below || c.also.iter().any(|id| !before.is_clear(*id)) {
            self.inner.advance_ledger()?;
        }
        Ok(())
    }

    /// Narrows the clearance to `c` (before the caller copies files that hold data of deletes
    /// `c` does not clear): the lower bound and only ids clear in both.
    pub fn narrow_log_clearance(&self, c: &LogClearance) {
        if !self.inner.opts.external_log {
            return;
        }
        let mut cur = self.inner.deletes.log_clearance.write();
        let below = cur.below.min(c.below);
        let also = cur
            .also
            .iter()
            .chain(&c.also)
            .copied()
            .filter(|id| *id >= below && cur.is_clear(*id) && c.is_clear(*id))
            .collect();
        *cur = Arc::new(LogClearance { below, also });
    }

    /// The current clearance (everything without an external log).
    pub fn log_clearance(&self) -> LogClearance {
        (*self.inner.log_clearance()).clone()
    }

    /// What the engine's own files, memtables and WAL no longer hold: the persistence
    /// watermark, and the expedited deletes above it that are gone (what a snapshot taken now
    /// is clear of).
    pub fn engine_clearance(&self) -> Result<LogClearance> {
        let below = self.inner.persistence_watermark();
        let also = self.inner.cleared_expedited(below, None)?.into_iter().collect();
        Ok(LogClearance { below, also })
    }

    /// With an external log: the earliest deadline of a pending delete that the engine itself
    /// no longer holds data of but the caller's log or copies still hold, counting only the
    /// deletes `fixed` clears (`fixed`: what the copies a purge of the log does not replace
    /// are clear of; `None`: none such). The caller purges its log (and replaces its
    /// snapshots) when this is near: a delete `fixed` does not clear would wait all the same.
    pub fn awaiting_log(&self, fixed: &LogClearance) -> Result<Option<crate::ledger::Deadline>> {
        let inner = &self.inner;
        if !inner.opts.external_log {
            return Ok(None);
        }
        let clear = inner.log_clearance();
        let engine = self.engine_clearance()?;
        let executed: Vec<u64> =
            inner.deletes.window_state.lock().executed.iter().copied().collect();
        let ledger = inner.deletes.ledger.lock();
        let held = ledger
            .pending()
            .take_while(|d| d.id < engine.below)
            .chain(engine.also.iter().filter_map(|id| ledger.get(*id)))
            .chain(executed.iter().filter_map(|id| ledger.get(*id)))
            .filter(|d| !clear.is_clear(d.id) && !d.is_persisted() && fixed.is_clear(d.id));
        Ok(held.map(|d| d.deadline_ms).min())
    }
}
