//! A cluster shard's part in a split (see the node's shard splits): proposing the `Split`
//! entry that forks its replicas into a child group, and trimming, once the cluster routes by
//! the new spans, the rows and series of the half a shard no longer holds.

use ebb_storage::WriteBatch;

use super::Database;
use crate::error::{QueryError, Result};
use crate::model::catalog::CatalogDelta;
use crate::model::hashspace::{hash_of_series, HashFilter};
use crate::model::keys::series_range;

/// How soon the rows a trim drops must be physically gone from every replica: the deletion
/// deadlines compact them away (and the half a shard gave up stops taking its space).
const TRIM_DEADLINE: std::time::Duration = std::time::Duration::from_secs(120);

/// Operations per trim batch (each range delete drops a run of series, and each series record
/// is one more).
const OPS_PER_BATCH: usize = 4096;

/// What [`Database::trim`] dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrimOutcome {
    /// Series dropped.
    pub series: u64,
    /// Range deletes written (one per run of consecutive dropped series).
    pub ranges: u64,
}

impl Database {
    /// Splits this shard (on its leader): proposes the entry on which every replica forks
    /// group `child`, which holds the series hashes of `give`, while this shard keeps those of
    /// `keep` and refuses writes of other series from then on. Writes planned before it are
    /// applied before it. Returns the log index of the split entry, or `None` if this shard
    /// had split off `child` already.
    pub fn split(&self, child: u64, keep: HashFilter, give: HashFilter) -> Result<Option<u64>> {
        let Some(rep) = &self.replication else {
            return Err(QueryError::invalid("only a shard of a cluster splits"));
        };
        let _w = self.writer.lock();
        // Nothing planned against the whole span may commit after the split.
        rep.drain();
        let (mut parent, mut child_batch) = (WriteBatch::new(), WriteBatch::new());
        CatalogDelta { hashes: Some(keep), ..Default::default() }.write_to(&mut parent)?;
        CatalogDelta { hashes: Some(give), ..Default::default() }.write_to(&mut child_batch)?;
        match rep.split(child, &parent, &child_batch) {
            Ok(index) => Ok(Some(index)),
            Err(QueryError::Completed) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Drops the rows and series records of every series whose hash this shard no longer holds
    /// (it split): one range delete per run of consecutive such series ids. Does nothing on a
    /// shard that never split.
    pub fn trim(&self) -> Result<TrimOutcome> {
        let Some(holds) = self.catalog.hashes() else { return Ok(TrimOutcome::default()) };
        let mut w = self.writer.lock();
        // Runs of dropped series: (table, first, last, ids).
        let mut runs: Vec<(u32, Vec<u64>)> = Vec::new();
        for t in self.catalog.tables() {
            let mut all: Vec<(u64, bool)> = self.catalog.with_series(t.id, |idx| {
                idx.iter()
                    .map(|(id, tags)| {
                        (id, holds.holds(idx.hash(id).unwrap_or_else(|| hash_of_series(&t, tags))))
                    })
                    .collect()
            });
            all.sort_unstable();
            let mut run = Vec::new();
            for (id, held) in all {
                if !held {
                    run.push(id);
                } else if !run.is_empty() {
                    runs.push((t.id, std::mem::take(&mut run)));
                }
            }
            if !run.is_empty() {
                runs.push((t.id, run));
            }
        }
        let mut out = TrimOutcome::default();
        let deadline = crate::now_ms() + TRIM_DEADLINE.as_millis() as u64;
        let spec = super::RequestSpec::new("trim", "rows of series a split moved to another shard")
            .with_issuer("split")
            .with_deadline(Some(deadline));
        let fresh = || {
            let mut b = WriteBatch::new();
            b.set_request(spec.request(None));
            b
        };
        let (mut batch, mut delta) = (fresh(), CatalogDelta::default());
        for (table, ids) in runs {
            let (Some(&first), Some(&last)) = (ids.first(), ids.last()) else { continue };
            let lo = series_range(table, first, i64::MIN, None).0;
            let hi = series_range(table, last, i64::MIN, None).1;
            batch.delete_range(lo, hi);
            out.ranges += 1;
            out.series += ids.len() as u64;
            delta.removed_series.extend(ids.into_iter().map(|id| (table, id)));
            if batch.len() + delta.removed_series.len() >= OPS_PER_BATCH {
                delta.write_to(&mut batch)?;
                self.commit(&mut w, &batch, std::mem::take(&mut delta))?;
                batch = fresh();
            }
        }
        if !delta.is_empty() {
            delta.write_to(&mut batch)?;
            self.commit(&mut w, &batch, delta)?;
        }
        Ok(out)
    }
}
