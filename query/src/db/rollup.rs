//! Rollups kept by a database (see [`crate::model::rollup`]): creating one, the dirty marks
//! writes and deletes leave, and [`Database::maintain_rollups`], which recomputes marked buckets
//! from their source.
//!
//! The maintainer plans under the writer lock and waits for its change before releasing it,
//! as catalog changes do: an `ERASE` or `DELETE` (also under the lock) is then wholly before
//! or wholly after a recompute, so a recompute never writes back what an erasure removed. On a
//! shard, only the leader maintains, and its change goes through the Raft log like any other.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use ebb_storage::WriteBatch;

use super::{Database, DeleteTarget};
use crate::error::{QueryError, Result};
use crate::model::catalog::{mark_key, mark_ranges, parse_mark, CatalogDelta};
use crate::model::keys::{row_key, series_range, table_prefix, table_range, time_to_u64};
use crate::model::rollup::{Mark, RollupDef};
use crate::model::row::{decode_row, encode_row, Value};
use crate::model::schema::{check_name, TableDef};
use crate::model::series::encode_series_key;

/// Dirty marks one maintenance round reads at most (its change stays well within what one
/// shard write may hold).
const MARKS_PER_ROUND: usize = 16_384;

/// Marks the backfill of a new rollup writes per batch.
const BACKFILL_MARKS_PER_BATCH: usize = 16_384;

/// What one call of [`Database::maintain_rollups`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RollupRound {
    /// Dirty marks read and removed.
    pub marks: u64,
    /// Buckets recomputed (a row written or removed each).
    pub buckets: u64,
}

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
        let nonce = super::new_request_id();
        let mut marks = Vec::new();
        for s in series {
            let (lo, hi) = series_range(source.id, s, i64::MIN, None);
            let mut last = None;
            for item in engine.scan(lo..hi, Some(&snap))? {
                let (k, _) = item?;
                let Some((_, _, t)) = crate::model::keys::parse_row_key(&k) else { continue };
                let b = def.bucket_of(t);
                if last != Some(b) {
                    last = Some(b);
                    marks.push(Mark::Series { rollup, series: s, bucket: b });
                }
            }
        }
        drop(snap);
        for chunk in marks.chunks(BACKFILL_MARKS_PER_BATCH) {
            let mut batch = WriteBatch::new();
            for m in chunk {
                batch.put(mark_key(m, nonce), Vec::new());
            }
            let mut w = self.writer.lock();
            self.commit(&mut w, &batch, CatalogDelta::default())?;
        }
        Ok(())
    }

    /// Adds to `batch` the dirty marks of the rollups of the tables `points` (`(table, series,
    /// time)`, in key order) write to.
    pub(super) fn mark_written(&self, points: &[(u32, u64, i64)], batch: &mut WriteBatch) {
        if points.is_empty() || !self.catalog.has_rollups() {
            return;
        }
        let nonce = super::new_request_id();
        let mut rollups: HashMap<u32, Vec<Arc<TableDef>>> = HashMap::new();
        let mut last: Option<(u32, u64, i64, u32)> = None;
        for &(table, series, time) in points {
            let of =
                rollups.entry(table).or_insert_with(|| match self.catalog.table_by_id(table) {
                    Some(def) => self.catalog.rollups_of(&def),
                    None => Vec::new(),
                });
            for r in of.iter() {
                let Some(def) = &r.rollup else { continue };
                let bucket = def.bucket_of(time);
                if last == Some((table, series, bucket, r.id)) {
                    continue;
                }
                last = Some((table, series, bucket, r.id));
                batch.put(
                    mark_key(&Mark::Series { rollup: r.id, series, bucket }, nonce),
                    Vec::new(),
                );
            }
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
                            for &b in &edges {
                                let m = Mark::Series { rollup: r.id, series: s, bucket: b };
                                batch.put(mark_key(&m, nonce), Vec::new());
                            }
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
                        for &b in &edges {
                            let m = Mark::Window { rollup: r.id, bucket: b };
                            batch.put(mark_key(&m, nonce), Vec::new());
                        }
                    }
                }
            }
        }
    }

    /// The id of rollup `rollup`'s series for source series `series`, if it has one.
    fn rollup_series(&self, source: &TableDef, rollup: &TableDef, series: u64) -> Option<u64> {
        let tags = self.catalog.with_series(source.id, |idx| idx.tags(series).cloned())?;
        let mut key = Vec::new();
        encode_series_key(
            tags.iter().enumerate().filter_map(|(i, v)| Some((i, v.as_deref()?))),
            &mut key,
        );
        self.catalog.with_series(rollup.id, |idx| idx.get(&key))
    }
}

/// One bucket to recompute: `(rollup, source series, bucket start)`.
type Bucket = (u32, u64, i64);

impl Database {
    /// Recomputes the rollup buckets marked dirty, round after round until none is left (each
    /// round under the writer lock, released between rounds). Call it on a single node, or on
    /// a shard this replica leads.
    pub fn maintain_rollups(&self) -> Result<RollupRound> {
        let mut total = RollupRound::default();
        if !self.catalog.has_rollups() {
            return Ok(total);
        }
        loop {
            let round = self.rollup_round()?;
            total.marks += round.marks;
            total.buckets += round.buckets;
            if round.marks < MARKS_PER_ROUND as u64 {
                return Ok(total);
            }
        }
    }

    fn rollup_round(&self) -> Result<RollupRound> {
        let mut w = self.writer.lock();
        let engine = self.engine();
        let snap = engine.staged_snapshot();
        let mut keys = Vec::new();
        let mut buckets: BTreeSet<Bucket> = BTreeSet::new();
        let mut windows: BTreeSet<(u32, i64)> = BTreeSet::new();
        'ranges: for (lo, hi) in mark_ranges() {
            for item in engine.scan(lo..hi, Some(&snap))? {
                let (k, _) = item?;
                match parse_mark(&k) {
                    Some(Mark::Series { rollup, series, bucket }) => {
                        buckets.insert((rollup, series, bucket));
                    }
                    Some(Mark::Window { rollup, bucket }) => {
                        windows.insert((rollup, bucket));
                    }
                    None => {}
                }
                keys.push(k);
                if keys.len() >= MARKS_PER_ROUND {
                    break 'ranges;
                }
            }
        }
        if keys.is_empty() {
            return Ok(RollupRound::default());
        }
        // A window mark stands for the bucket of every series of the source.
        for (rollup, bucket) in windows {
            let Some(source) = self.source_of(rollup) else { continue };
            self.catalog.with_series(source.id, |idx| {
                buckets.extend(idx.iter().map(|(s, _)| (rollup, s, bucket)));
            });
        }
        let mut batch = WriteBatch::new();
        let mut delta = CatalogDelta::default();
        let (_, mut next_series) = self.catalog.next_ids();
        let holds = self.catalog.hashes();
        let now_ns = engine.options().clock.now_ms().saturating_mul(1_000_000) as i64;
        let mut done = 0u64;
        let mut defs: BTreeMap<u32, (TableDef, Arc<TableDef>)> = BTreeMap::new();
        for (rollup, series, bucket) in buckets {
            let (rdef, source) = match defs.entry(rollup) {
                Entry::Occupied(e) => e.into_mut(),
                Entry::Vacant(v) => {
                    let (Some(r), Some(src)) =
                        (self.catalog.table_by_id(rollup), self.source_of(rollup))
                    else {
                        continue; // dropped
                    };
                    v.insert(((*r).clone(), src))
                }
            };
            let Some(def) = rdef.rollup.clone() else { continue };
            let Some((tags, hash)) = self
                .catalog
                .with_series(source.id, |idx| Some((idx.tags(series)?.clone(), idx.hash(series))))
            else {
                continue; // erased, or trimmed off by a split
            };
            let hash =
                hash.unwrap_or_else(|| crate::cluster::hashspace::hash_of_series(source, &tags));
            if holds.is_some_and(|h| !h.holds(hash)) {
                continue; // the other half of a split holds it
            }
            let Some(end) = def.bucket_end(bucket) else { continue };
            let horizon =
                |r: Option<u64>| r.map(|r| now_ns.saturating_sub(r.min(i64::MAX as u64) as i64));
            // Past the source's retention the rows are (being) purged: the bucket stays as
            // recomputed last. Past the rollup's own, it is (being) purged too.
            if horizon(source.retention_ns).is_some_and(|h| end <= h)
                || horizon(rdef.retention_ns).is_some_and(|h| bucket < h)
            {
                continue;
            }
            let mut accs = def.accumulators(source);
            let mut rows = 0u64;
            let (lo, hi) = series_range(source.id, series, bucket, Some(end));
            for item in engine.scan(lo..hi, Some(&snap))? {
                let (_, v) = item?;
                let fields = decode_row(&v)?;
                for a in &mut accs {
                    a.add(&fields);
                }
                rows += 1;
            }
            // The rollup's tags follow its source's (same order, so the same series keys).
            if rdef.tags.len() < source.tags.len() {
                rdef.tags = source.tags.clone();
                delta.tables.insert(rdef.id, rdef.clone());
            }
            let mut key = Vec::new();
            encode_series_key(
                tags.iter().enumerate().filter_map(|(i, v)| Some((i, v.as_deref()?))),
                &mut key,
            );
            let existing = self.catalog.with_series(rollup, |idx| idx.get(&key)).or_else(|| {
                delta.series.iter().find(|(t, k, _, _)| *t == rollup && *k == key).map(|s| s.2)
            });
            done += 1;
            if rows == 0 {
                if let Some(rs) = existing {
                    batch.delete(row_key(rollup, rs, bucket).to_vec());
                }
                continue;
            }
            let rs = match existing {
                Some(rs) => rs,
                None => {
                    let id = next_series;
                    next_series += 1;
                    delta.series.push((rollup, key, id, tags.clone()));
                    id
                }
            };
            let mut values: Vec<(usize, Value)> = Vec::new();
            let mut at = 0;
            for (a, o) in accs.iter().zip(&def.outputs) {
                let n = o.partial_names().len();
                let types: Vec<_> =
                    rdef.fields.get(at..at + n).unwrap_or_default().iter().map(|f| f.1).collect();
                for (j, v) in a.finish(&types).into_iter().enumerate() {
                    if let Some(v) = v {
                        values.push((at + j, v));
                    }
                }
                at += n;
            }
            let mut encoded = Vec::new();
            encode_row(values.iter().map(|(i, v)| (*i, v)), &mut encoded);
            batch.put(row_key(rollup, rs, bucket).to_vec(), encoded);
        }
        drop(snap);
        let marks = keys.len() as u64;
        for k in keys {
            batch.delete(k);
        }
        delta.write_to(&mut batch)?;
        self.commit(&mut w, &batch, delta)?;
        Ok(RollupRound { marks, buckets: done })
    }

    /// The source table of rollup `rollup`.
    fn source_of(&self, rollup: u32) -> Option<Arc<TableDef>> {
        let r = self.catalog.table_by_id(rollup)?;
        let def = r.rollup.as_ref()?;
        self.catalog.table(&r.database, &def.source)
    }
}
