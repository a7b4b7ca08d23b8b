//! [`Database::maintain_rollups`]: bringing rollups up to date with their sources.
//!
//! A round reads the dirty marks, then each marked bucket: if every marked change is newer
//! than what the bucket's stored partials include (appends), the newer rows are merged into
//! them; else the bucket is recomputed whole from its source. That is planned outside the
//! writer lock, against a snapshot; under the lock the round writes the partials and removes
//! exactly the marks it read. A write applied meanwhile left marks of its own, which the next
//! round reads. A change that removes rows (a delete, an erasure, a dropped table, a trim, a
//! retention purge) applied meanwhile, whoever planned it, could be undone by partials read
//! before it, so then the round is planned again under the lock. On a shard, only the leader
//! maintains, after a read barrier (so it plans from everything committed before, also by an
//! earlier leader); its change goes through the Raft log like any other.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ebb_storage::{Engine, WriteBatch};

use super::{Database, Writer};
use crate::error::Result;
use crate::model::catalog::{mark_ranges, parse_mark, CatalogDelta};
use crate::model::keys::{parse_row_key, row_key, series_range};
use crate::model::rollup::{decode_touched, Mark};
use crate::model::row::{decode_row, encode_row, Value};
use crate::model::schema::TableDef;
use crate::model::series::{encode_series_key, TagValues};

/// Dirty marks one maintenance round reads at most, and buckets it brings up to date (its
/// change stays well within what one shard write may hold); more are left to the next round.
const MARKS_PER_ROUND: usize = 65_536;
const BUCKETS_PER_ROUND: usize = 65_536;

/// What one call of [`Database::maintain_rollups`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RollupRound {
    /// Dirty marks read and removed.
    pub marks: u64,
    /// Buckets recomputed or merged (a row written or removed each).
    pub buckets: u64,
}

/// Buckets starting less than this (ns) past the rollup's retention horizon are left to
/// expire: the round's batch reaches the engine later than it is planned.
const MARGIN_NS: i64 = 60_000_000_000;

/// One bucket to bring up to date: `(rollup, source series, bucket start)`.
type Bucket = (u32, u64, i64);

/// The new state of one bucket of one rollup series.
struct Updated {
    rollup: u32,
    /// The series' canonical key and tags (the source series').
    key: Vec<u8>,
    tags: TagValues,
    bucket: i64,
    /// The encoded partials (`None`: the bucket has no rows left).
    row: Option<Vec<u8>>,
}

/// A round planned against a snapshot.
struct Planned {
    /// The marks read.
    marks: Vec<bytes::Bytes>,
    updated: Vec<Updated>,
    /// Rollups whose tags must widen to their source's.
    widened: BTreeMap<u32, TableDef>,
    /// True if it stopped reading marks at its limit.
    full: bool,
}

impl Database {
    /// Brings the rollups up to date with the changes their dirty marks name, round after
    /// round until none is left. Call it on a single node, or on a shard this replica leads.
    pub fn maintain_rollups(&self) -> Result<RollupRound> {
        let mut total = RollupRound::default();
        if !self.catalog.has_rollups() {
            return Ok(total);
        }
        // A new leader plans from everything the group committed before (a delete another
        // leader committed, say), not from what it happened to have applied.
        if let Some(rep) = &self.replication {
            rep.barrier()?;
        }
        let removals = || self.removals.load(std::sync::atomic::Ordering::Acquire);
        loop {
            let before = removals();
            let planned = self.plan_round()?;
            if planned.marks.is_empty() {
                return Ok(total);
            }
            let mut w = self.writer.lock();
            let planned = match removals() == before {
                true => planned,
                false => self.plan_round()?,
            };
            let full = planned.marks.len() >= MARKS_PER_ROUND || planned.full;
            total.marks += planned.marks.len() as u64;
            total.buckets += planned.updated.len() as u64;
            self.commit_round(&mut w, planned)?;
            if !full {
                return Ok(total);
            }
        }
    }

    /// Reads the marks and plans every marked bucket's new partials.
    fn plan_round(&self) -> Result<Planned> {
        let engine = self.engine();
        let snap = engine.staged_snapshot();
        let mut marks = Vec::new();
        // Each bucket with the earliest time its marks name (`None`: recompute it whole).
        let mut buckets: BTreeMap<Bucket, Option<i64>> = BTreeMap::new();
        let mut windows: BTreeSet<(u32, i64)> = BTreeSet::new();
        'ranges: for (lo, hi) in mark_ranges() {
            for item in engine.scan(lo..hi, Some(&snap))? {
                let (k, v) = item?;
                match parse_mark(&k) {
                    Some(Mark::Series { rollup, bucket }) => {
                        for (series, since) in decode_touched(&v).unwrap_or_default() {
                            let e = buckets.entry((rollup, series, bucket)).or_insert(since);
                            *e = (*e).zip(since).map(|(a, b)| a.min(b));
                        }
                    }
                    Some(Mark::Window { rollup, bucket }) => {
                        windows.insert((rollup, bucket));
                    }
                    None => {}
                }
                marks.push(k);
                if buckets.len() >= BUCKETS_PER_ROUND || marks.len() >= MARKS_PER_ROUND {
                    break 'ranges;
                }
            }
        }
        // A window mark stands for the bucket of every series of the source.
        for (rollup, bucket) in windows {
            let Some(source) = self.source_of(rollup) else { continue };
            self.catalog.with_series(source.id, |idx| {
                for (s, _) in idx.iter() {
                    buckets.insert((rollup, s, bucket), None);
                }
            });
        }
        let full = buckets.len() >= BUCKETS_PER_ROUND;
        let mut planned = Planned { marks, updated: Vec::new(), widened: BTreeMap::new(), full };
        let holds = self.catalog.hashes();
        let now_ns = engine.options().clock.now_ms().saturating_mul(1_000_000) as i64;
        let horizon =
            |r: Option<u64>| r.map(|r| now_ns.saturating_sub(r.min(i64::MAX as u64) as i64));
        let mut defs: BTreeMap<u32, (Arc<TableDef>, Arc<TableDef>)> = BTreeMap::new();
        for ((rollup, series, bucket), since) in buckets {
            let (rdef, source) = match defs.entry(rollup) {
                Entry::Occupied(e) => e.into_mut(),
                Entry::Vacant(v) => {
                    let (Some(r), Some(src)) =
                        (self.catalog.table_by_id(rollup), self.source_of(rollup))
                    else {
                        continue; // dropped
                    };
                    v.insert((r, src))
                }
            };
            let Some(def) = &rdef.rollup else { continue };
            let Some((tags, hash)) = self
                .catalog
                .with_series(source.id, |idx| Some((idx.tags(series)?.clone(), idx.hash(series))))
            else {
                continue; // erased, or trimmed off by a split
            };
            let hash =
                hash.unwrap_or_else(|| crate::model::hashspace::hash_of_series(source, &tags));
            if holds.is_some_and(|h| !h.holds(hash)) {
                continue; // the other half of a split holds it
            }
            let Some(end) = def.bucket_end(bucket) else { continue };
            // Past the source's retention its rows are (being) purged: the bucket stays as
            // computed last. Near or past the rollup's own, it is (being) purged too (and the
            // engine would refuse the whole round's batch for a row past it).
            if horizon(source.retention_ns).is_some_and(|h| end <= h)
                || horizon(rdef.retention_ns).is_some_and(|h| bucket < h.saturating_add(MARGIN_NS))
            {
                continue;
            }
            // The rollup's tags follow its source's (same order, so the same series keys).
            if rdef.tags.len() < source.tags.len() {
                let mut wide = (**rdef).clone();
                wide.tags = source.tags.clone();
                planned.widened.insert(rollup, wide);
            }
            let mut key = Vec::new();
            encode_series_key(tags.iter(), &mut key);
            let existing = self.catalog.with_series(rollup, |idx| idx.get(&key));
            let stored = match existing {
                Some(rs) => engine.get(&row_key(rollup, rs, bucket), Some(&snap))?,
                None => None,
            };
            // A bucket starting before the source's horizon has lost rows to retention: newer
            // rows may be merged into it, but a recompute would drop what expired.
            let whole = horizon(source.retention_ns).is_none_or(|h| bucket >= h);
            let row = bucket_row(
                (&engine, &snap),
                (rdef, source),
                (series, bucket, end),
                since,
                stored,
                whole,
            )?;
            if let Some(row) = row {
                planned.updated.push(Updated { rollup, key, tags, bucket, row });
            }
        }
        Ok(planned)
    }

    /// Writes a planned round and removes the marks it read.
    fn commit_round(&self, w: &mut Writer, planned: Planned) -> Result<()> {
        let mut batch = WriteBatch::new();
        let mut delta = CatalogDelta { tables: planned.widened, ..CatalogDelta::default() };
        let (_, mut next_series) = self.catalog.next_ids();
        let mut created: BTreeMap<(u32, Vec<u8>), u64> = BTreeMap::new();
        for u in planned.updated {
            let existing = self
                .catalog
                .with_series(u.rollup, |idx| idx.get(&u.key))
                .or_else(|| created.get(&(u.rollup, u.key.clone())).copied());
            match (u.row, existing) {
                (None, Some(rs)) => {
                    batch.delete(row_key(u.rollup, rs, u.bucket).to_vec());
                }
                (None, None) => {}
                (Some(row), Some(rs)) => {
                    batch.put(row_key(u.rollup, rs, u.bucket).to_vec(), row);
                }
                (Some(row), None) => {
                    let rs = next_series;
                    next_series += 1;
                    created.insert((u.rollup, u.key.clone()), rs);
                    delta.series.push((u.rollup, u.key, rs, u.tags));
                    batch.put(row_key(u.rollup, rs, u.bucket).to_vec(), row);
                }
            }
        }
        for k in planned.marks {
            batch.delete(k);
        }
        delta.write_to(&mut batch)?;
        self.commit(w, &batch, delta)?;
        Ok(())
    }

    /// The source table of rollup `rollup`.
    pub(super) fn source_of(&self, rollup: u32) -> Option<Arc<TableDef>> {
        let r = self.catalog.table_by_id(rollup)?;
        let def = r.rollup.as_ref()?;
        self.catalog.table(&r.database, &def.source)
    }
}

/// The new partials of bucket `bucket` (ending at `end`) of source series `series`, given the
/// stored ones and the earliest time the bucket's marks name (`since`, `None`: recompute):
/// `Some(None)` if the bucket has no rows left, `None` if the stored partials stand (also when
/// only a recompute would do and `whole` forbids one).
fn bucket_row(
    (engine, snap): (&Engine, &ebb_storage::Snapshot),
    (rdef, source): (&TableDef, &TableDef),
    (series, bucket, end): (u64, i64, i64),
    since: Option<i64>,
    stored: Option<bytes::Bytes>,
    whole: bool,
) -> Result<Option<Option<Vec<u8>>>> {
    let Some(def) = &rdef.rollup else { return Ok(None) };
    let mut accs = def.accumulators(source);
    let mut from = bucket;
    let mut upto = None;
    // Merged into the stored partials if every marked change is newer than what they include.
    if let (Some(since), Some(stored)) = (since, &stored) {
        let mut values: Vec<Option<Value>> = vec![None; rdef.fields.len()];
        for (i, v) in decode_row(stored)? {
            if let Some(slot) = values.get_mut(i) {
                *slot = Some(v);
            }
        }
        let stored_upto = match values.last() {
            Some(Some(Value::Integer(t))) => Some(*t),
            _ => None,
        };
        if let Some(u) = stored_upto.filter(|u| since > *u) {
            let mut at = 0;
            for (a, o) in accs.iter_mut().zip(&def.outputs) {
                let n = o.partial_names().len();
                a.resume(values.get(at..at + n).unwrap_or_default());
                at += n;
            }
            from = since;
            upto = Some(u);
        }
    }
    let merging = upto.is_some();
    if !merging && !whole {
        return Ok(None);
    }
    let mut rows = 0u64;
    let (lo, hi) = series_range(source.id, series, from, Some(end));
    for item in engine.scan(lo..hi, Some(snap))? {
        let (k, v) = item?;
        let fields = decode_row(&v)?;
        for a in &mut accs {
            a.add(&fields);
        }
        rows += 1;
        upto = parse_row_key(&k).map(|(_, _, t)| t).max(upto);
    }
    match (rows, merging) {
        (0, true) => return Ok(None), // nothing newer after all
        (0, false) => return Ok(Some(None)),
        _ => {}
    }
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
    if let Some(t) = upto {
        values.push((at, Value::Integer(t)));
    }
    let mut encoded = Vec::new();
    encode_row(values.iter().map(|(i, v)| (*i, v)), &mut encoded);
    Ok(Some(Some(encoded)))
}
