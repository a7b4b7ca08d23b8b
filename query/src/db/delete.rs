//! Deletes of rows: per-series key ranges (GLORAN range deletes, key x sequence rectangles) and
//! table-wide time windows (KiWi time-window deletes), written in one atomic batch.

use std::collections::HashSet;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ebb_storage::{PageTaker, SummarizedPage, WriteBatch};

use super::{Database, RequestSpec};
use crate::error::{QueryError, Result};
use crate::model::catalog::CatalogDelta;
use crate::model::keys::{series_range, table_range, time_to_u64};
use crate::model::schema::TableDef;

/// Rows to delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteTarget {
    /// Rows of these series with `time` in `[t_lo, t_hi)` (`None`: unbounded).
    Series {
        /// Series ids.
        series: Vec<u64>,
        /// Lower time bound (inclusive).
        t_lo: Option<i64>,
        /// Upper time bound (exclusive).
        t_hi: Option<i64>,
    },
    /// Rows of every series with `time` in `[t_lo, t_hi)`.
    TimeWindow {
        /// Lower time bound (inclusive).
        t_lo: Option<i64>,
        /// Upper time bound (exclusive).
        t_hi: Option<i64>,
    },
}

/// What a delete did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteOutcome {
    /// Rows that matched (and are now invisible).
    pub rows: u64,
    /// Ledger ids of the engine deletes written.
    pub ids: Vec<u64>,
    /// The request they were issued under (see `system.deletions`).
    pub request: u64,
}

/// Tables with at most this many series read a time window series by series (one seek each)
/// rather than walking the whole table and filtering by time.
const WINDOW_SEEK_SERIES: usize = 4096;

impl Database {
    /// The series of `table` in key order, when a bounded time window is better read series by
    /// series: `None` if `unbounded` or the table has more than [`WINDOW_SEEK_SERIES`] series.
    pub(crate) fn window_series(&self, table: u32, unbounded: bool) -> Option<Vec<u64>> {
        if unbounded {
            return None;
        }
        self.catalog.with_series(table, |idx| {
            (idx.len() <= WINDOW_SEEK_SERIES).then(|| {
                let mut ids: Vec<u64> = idx.iter().map(|(id, _)| id).collect();
                ids.sort_unstable();
                ids
            })
        })
    }

    /// Deletes the rows of `table` that any of `targets` selects, as request `spec`. Counts
    /// them first (under the writer lock, so the count is exact), then writes every engine
    /// delete in one batch.
    pub fn delete(
        &self,
        table: &TableDef,
        targets: &[DeleteTarget],
        spec: &RequestSpec,
    ) -> Result<DeleteOutcome> {
        if targets.is_empty() {
            return Err(QueryError::Internal("delete without targets".into()));
        }
        let mut w = self.writer.lock();
        self.check_not_completed(spec)?;
        if self.catalog.table_by_id(table.id).is_none() {
            return Err(QueryError::UnknownTable(format!("{}.{}", table.database, table.name)));
        }
        if let Some(r) = &table.rollup {
            return Err(QueryError::invalid(format!(
                "{} is a rollup of {}: its rows follow its source; delete from {}",
                table.name, r.source, r.source
            )));
        }
        let snap = self.counting_snapshot();
        let mut seen: HashSet<bytes::Bytes> = HashSet::new();
        let dedupe = targets.len() > 1;
        let mut rows = 0u64;
        // One target selects each row once: pages answered from their summaries count their
        // rows unread. Several may overlap: their rows are counted by key.
        let pages = Arc::new(PageRows::default());
        let engine = self.engine();
        let mut count_range = |range: (Bound<Vec<u8>>, Bound<Vec<u8>>),
                               time: Option<(u64, u64)>|
         -> Result<()> {
            if dedupe {
                let iter = match time {
                    Some((a, b)) => engine.scan_time(range, a, b, Some(&snap))?,
                    None => engine.scan(range, Some(&snap))?,
                };
                for item in iter {
                    if seen.insert(item?.0) {
                        rows += 1;
                    }
                }
            } else {
                let mut iter = engine.scan_summarized(range, time, Some(&snap), pages.clone())?;
                while let Some(item) = iter.next_ref() {
                    item?;
                    rows += 1;
                }
            }
            Ok(())
        };
        let mut batch = WriteBatch::new();
        for t in targets {
            match t {
                DeleteTarget::Series { series, t_lo, t_hi } => {
                    for &s in series {
                        let (lo, hi) = series_range(table.id, s, t_lo.unwrap_or(i64::MIN), *t_hi);
                        if lo >= hi {
                            continue;
                        }
                        count_range(
                            (Bound::Included(lo.clone()), Bound::Excluded(hi.clone())),
                            None,
                        )?;
                        batch.delete_range(lo, hi);
                    }
                }
                DeleteTarget::TimeWindow { t_lo, t_hi } => {
                    let d_lo = time_to_u64(t_lo.unwrap_or(i64::MIN));
                    let d_hi = t_hi.map_or(u64::MAX, time_to_u64);
                    if d_lo >= d_hi {
                        continue;
                    }
                    let (lo, hi) = table_range(table.id);
                    let range = (
                        Bound::Included(lo.clone()),
                        if hi.is_empty() { Bound::Unbounded } else { Bound::Excluded(hi.clone()) },
                    );
                    match self.window_series(table.id, false) {
                        Some(ids) => {
                            for s in ids {
                                let (lo, hi) =
                                    series_range(table.id, s, t_lo.unwrap_or(i64::MIN), *t_hi);
                                if lo < hi {
                                    count_range((Bound::Included(lo), Bound::Excluded(hi)), None)?;
                                }
                            }
                        }
                        None => count_range(range, Some((d_lo, d_hi)))?,
                    }
                    batch.delete_time_range(d_lo, d_hi, lo, hi);
                }
            }
        }
        drop(snap);
        self.cascade_delete(table, targets, spec.id, &mut batch);
        rows += pages.rows.load(Ordering::Relaxed);
        let n = batch.len() as u64;
        batch.set_request(spec.request(rows));
        if spec.recorded {
            let done = super::RequestOutcome { rows, deletes: n, ..Default::default() };
            super::outcome::put_outcome(&mut batch, spec.id, &done);
        }
        let seq = self.commit(&mut w, &batch, CatalogDelta::default())?;
        Ok(DeleteOutcome {
            rows,
            ids: (seq..seq + n).filter(|_| n > 0).collect(),
            request: spec.id,
        })
    }
}

/// Counts the rows of the pages a summarized scan offers (all of them: a page's entry count
/// is its row count, whatever its summary says).
#[derive(Default)]
struct PageRows {
    rows: AtomicU64,
}

impl PageTaker for PageRows {
    fn take(&self, page: &SummarizedPage<'_>) -> bool {
        self.rows.fetch_add(u64::from(page.entries), Ordering::Relaxed);
        true
    }
}
