//! Rollups kept by a database (see [`crate::model::rollup`]): creating one, and the dirty
//! marks writes and deletes leave in their own batches for the maintainer
//! ([`super::rollup_round`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use ebb_storage::WriteBatch;

use super::{Database, DeleteTarget};
use crate::error::{QueryError, Result};
use crate::model::catalog::{mark_key, CatalogDelta};
use crate::model::keys::{parse_row_key, series_range, table_prefix, table_range, time_to_u64};
use crate::model::rollup::{encode_touched, Mark, RollupDef, Touched};
use crate::model::schema::{check_name, TableDef};
use crate::model::series::encode_series_key;

/// Series the backfill of a new rollup lists per batch of marks.
const BACKFILL_MARKS_PER_BATCH: usize = 16_384;

impl Database {
    /// Creates rollup `name` of database `db` computing `def` over its source, kept for
    /// `retention` (`None`: the source's), then marks every bucket the source holds rows in,
    /// so the maintainer fills it.
    pub fn create_rollup(
        &self,
        db: &str,
        name: &str,
        def: RollupDef,
        retention: Option<Option<Duration>>,
    ) -> Result<Arc<TableDef>> {
        check_name("table", name)?;
        let source = self.existing(db, &def.source)?;
        if source.rollup.is_some() {
            return Err(QueryError::invalid(format!(
                "{} is a rollup; a rollup's source must be a table",
                source.name
            )));
        }
        if def.bucket_ns <= 0 {
            return Err(QueryError::invalid("a rollup's bucket width must be positive"));
        }
        for t in &def.group {
            if !source.tags.contains(t) {
                return Err(QueryError::invalid(format!(
                    "rollup: {t:?} is not a tag of {} (group by tags only)",
                    source.name
                )));
            }
        }
        let fields = def.partial_columns(&source)?;
        let retention_ns = match retention {
            Some(r) => r.map(|d| d.as_nanos().min(u64::MAX as u128) as u64),
            None => source.retention_ns,
        };
        let id = {
            let mut w = self.writer.lock();
            if self.catalog.table(db, name).is_some() {
                return Err(QueryError::invalid(format!("table {db}.{name} already exists")));
            }
            let (id, _) = self.catalog.next_ids();
            let mut new = TableDef {
                id,
                database: db.to_string(),
                name: name.to_string(),
                tags: source.tags.clone(),
                fields: Vec::new(),
                retention_ns,
                rollup: Some(def.clone()),
            };
            for (f, ty) in fields {
                new.check_new_column(&f)?;
                new.fields.push((f, ty));
            }
            let mut delta = CatalogDelta::default();
            delta.tables.insert(id, new);
            let mut batch = WriteBatch::new();
            delta.write_to(&mut batch)?;
            self.commit(&mut w, &batch, delta)?;
            id
        };
        if let Some(ns) = retention_ns {
            self.set_rule(table_prefix(id).to_vec(), Some(Duration::from_nanos(ns)))?;
        }
        self.backfill_marks(&source, id, &def)?;
        self.catalog.table_by_id(id).ok_or_else(|| QueryError::Internal("rollup vanished".into()))
    }

    /// Marks every bucket of every series `source` holds rows in, for rollup `rollup`.
    fn backfill_marks(&self, source: &TableDef, rollup: u32, def: &RollupDef) -> Result<()> {
        let engine = self.engine();
        let snap = engine.snapshot();
        let mut series: Vec<u64> =
            self.catalog.with_series(source.id, |idx| idx.iter().map(|(id, _)| id).collect());
        series.sort_unstable();
        // Written as they are found, a bounded number at a time.
        let mut marks: BTreeMap<i64, Vec<Touched>> = BTreeMap::new();
        let mut listed = 0;
        let write = |marks: &mut BTreeMap<i64, Vec<Touched>>| -> Result<()> {
            let mut batch = WriteBatch::new();
            for (bucket, touched) in std::mem::take(marks) {
                let m = Mark::Series { rollup, bucket };
                batch.put(mark_key(&m, super::new_request_id()), encode_touched(&touched));
            }
            let mut w = self.writer.lock();
            self.commit(&mut w, &batch, CatalogDelta::default()).map(|_| ())
        };
        for s in series {
            let (lo, hi) = series_range(source.id, s, i64::MIN, None);
            let mut last = None;
            for item in engine.scan(lo..hi, Some(&snap))? {
                let (k, _) = item?;
                let Some((_, _, t)) = parse_row_key(&k) else { continue };
                let b = def.bucket_of(t);
                if last != Some(b) {
                    last = Some(b);
                    marks.entry(b).or_default().push((s, None));
                    listed += 1;
                    if listed >= BACKFILL_MARKS_PER_BATCH {
                        write(&mut marks)?;
                        listed = 0;
                    }
                }
            }
        }
        if !marks.is_empty() {
            write(&mut marks)?;
        }
        Ok(())
    }

    /// Adds to `batch` the dirty marks of the rollups of the tables `points` (`(table, series,
    /// time)`, in key order) write to.
    pub(super) fn mark_written(&self, points: &[(u32, u64, i64)], batch: &mut WriteBatch) {
        if points.is_empty() || !self.catalog.has_rollups() {
            return;
        }
        let mut rollups: HashMap<u32, Vec<Arc<TableDef>>> = HashMap::new();
        // Per rollup and bucket, the series written with the earliest time written (points
        // are in time order within a series): a bucket whose partials include everything
        // before that is merged with the newer rows alone.
        let mut touched: BTreeMap<(u32, i64), Vec<Touched>> = BTreeMap::new();
        for &(table, series, time) in points {
            let of =
                rollups.entry(table).or_insert_with(|| match self.catalog.table_by_id(table) {
                    Some(def) => self.catalog.rollups_of(&def),
                    None => Vec::new(),
                });
            for r in of.iter() {
                let Some(def) = &r.rollup else { continue };
                let list = touched.entry((r.id, def.bucket_of(time))).or_default();
                if list.last().map(|t| t.0) != Some(series) {
                    list.push((series, Some(time)));
                }
            }
        }
        let nonce = super::new_request_id();
        for ((rollup, bucket), list) in touched {
            batch.put(mark_key(&Mark::Series { rollup, bucket }, nonce), encode_touched(&list));
        }
    }

    /// Adds to `batch`, a delete of `targets` of `source` as request `nonce`, the deletes of
    /// the rollup buckets those rows were part of (whole buckets, so what the rollups held of
    /// the deleted rows goes with the same request), and dirty marks for the buckets the
    /// targets cover only in part, whose remaining rows are recomputed.
    pub(super) fn cascade_delete(
        &self,
        source: &TableDef,
        targets: &[DeleteTarget],
        nonce: u64,
        batch: &mut WriteBatch,
    ) {
        for r in self.catalog.rollups_of(source) {
            let Some(def) = &r.rollup else { continue };
            let outward = |lo: Option<i64>, hi: Option<i64>| {
                let b_lo = lo.map(|t| def.bucket_of(t));
                let b_hi = hi.and_then(|t| def.bucket_end(def.bucket_of(t.saturating_sub(1))));
                let mut edges = BTreeSet::new();
                if let (Some(t), Some(b)) = (lo, b_lo) {
                    if t != b {
                        edges.insert(b);
                    }
                }
                if let Some(t) = hi {
                    let b = def.bucket_of(t);
                    if t != b {
                        edges.insert(b);
                    }
                }
                (b_lo, b_hi, edges)
            };
            // Edge buckets per rollup bucket, over every target (one mark each: marks of one
            // request share its nonce, so a second mark of a bucket would replace the first).
            let mut edge_series: BTreeMap<i64, BTreeSet<u64>> = BTreeMap::new();
            let mut edge_windows: BTreeSet<i64> = BTreeSet::new();
            for t in targets {
                match t {
                    DeleteTarget::Series { series, t_lo, t_hi } => {
                        let (b_lo, b_hi, edges) = outward(*t_lo, *t_hi);
                        for &s in series {
                            if let Some(rs) = self.rollup_series(source, &r, s) {
                                let (lo, hi) =
                                    series_range(r.id, rs, b_lo.unwrap_or(i64::MIN), b_hi);
                                if lo < hi {
                                    batch.delete_range(lo, hi);
                                }
                            }
                        }
                        for b in edges {
                            edge_series.entry(b).or_default().extend(series.iter().copied());
                        }
                    }
                    DeleteTarget::TimeWindow { t_lo, t_hi } => {
                        let (b_lo, b_hi, edges) = outward(*t_lo, *t_hi);
                        let d_lo = time_to_u64(b_lo.unwrap_or(i64::MIN));
                        let d_hi = b_hi.map_or(u64::MAX, time_to_u64);
                        if d_lo < d_hi {
                            let (lo, hi) = table_range(r.id);
                            batch.delete_time_range(d_lo, d_hi, lo, hi);
                        }
                        edge_windows.extend(edges);
                    }
                }
            }
            for (bucket, series) in edge_series {
                let list: Vec<Touched> = series.into_iter().map(|s| (s, None)).collect();
                let m = Mark::Series { rollup: r.id, bucket };
                batch.put(mark_key(&m, nonce), encode_touched(&list));
            }
            for bucket in edge_windows {
                batch.put(mark_key(&Mark::Window { rollup: r.id, bucket }, nonce), Vec::new());
            }
        }
    }

    /// The id of rollup `rollup`'s series for source series `series`, if it has one.
    fn rollup_series(&self, source: &TableDef, rollup: &TableDef, series: u64) -> Option<u64> {
        let tags = self.catalog.with_series(source.id, |idx| idx.tags(series).cloned())?;
        let mut key = Vec::new();
        encode_series_key(tags.iter(), &mut key);
        self.catalog.with_series(rollup.id, |idx| idx.get(&key))
    }
}
