//! Line-protocol writes: all or nothing.
//!
//! A request is parsed and checked whole (syntax, names, field types against the schema and
//! against earlier lines, retention) before anything is written, and planned (series resolved,
//! rows encoded) outside the writer lock ([`super::write_plan`]); under the lock, the catalog
//! records it needs (new tables, columns, series) and its rows go into one engine write batch,
//! which is atomic. Two writes of the same point (series and time) merge their fields, the later
//! value of a field winning, as in InfluxDB.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::Ordering;

use ebb_storage::WriteBatch;

use super::apply::Change;
use super::write_group::Outcome;
use super::write_plan::{Fields, Prepared, Source};
use super::Database;
use crate::error::{QueryError, Result};
use crate::lp::{Line, Precision};
use crate::model::keys::{row_key, series_range, u64_to_time, ROW_KEY_LEN};
use crate::model::row::{decode_row, encode_row, merge_rows};

/// Limits on what one write request may add, checked while it is planned (nothing of a
/// request over one is written).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteLimits {
    /// Most tags one line may carry.
    pub max_tags_per_line: usize,
    /// Most columns (tags, fields and `time`) a table may have.
    pub max_columns_per_table: usize,
    /// Most new series one request may create.
    pub max_series_per_request: usize,
}

impl WriteLimits {
    /// The settings of the limits, as their refusals name them.
    pub const SETTINGS: [&'static str; 3] =
        ["max_tags_per_line", "max_columns_per_table", "max_series_per_request"];
}

impl Default for WriteLimits {
    fn default() -> Self {
        WriteLimits {
            max_tags_per_line: 256,
            max_columns_per_table: 1_000,
            max_series_per_request: 100_000,
        }
    }
}

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriteSummary {
    /// Lines accepted.
    pub lines: usize,
    /// Distinct rows (points) written.
    pub rows: usize,
    /// Tables created.
    pub tables_created: usize,
    /// Series created.
    pub series_created: usize,
}

impl Database {
    /// Writes a line-protocol request body into database `db`. Lines without a timestamp get
    /// `now_ns`. Either every line is written or none is.
    pub fn write_lines(
        &self,
        db: &str,
        body: &str,
        precision: Precision,
        now_ns: i64,
    ) -> Result<WriteSummary> {
        self.write_from(db, Source::Body(body), precision, now_ns, None)
    }

    /// Writes parsed lines (numbered for error messages) into database `db`, all or nothing.
    pub fn write_parsed(
        &self,
        db: &str,
        numbered: &[(usize, Line<'_>)],
        precision: Precision,
        now_ns: i64,
    ) -> Result<WriteSummary> {
        self.write_from(db, Source::Parsed(numbered), precision, now_ns, None)
    }

    /// Writes `lines` as write `id`, which a coordinator may send again (a retry after a
    /// timeout): a replicated database applies it once, and answers a repeat with what the
    /// first did. Records of writes are kept ten minutes.
    pub fn write_once(
        &self,
        db: &str,
        lines: Source<'_, '_>,
        precision: Precision,
        now_ns: i64,
        id: u64,
    ) -> Result<WriteSummary> {
        if let Some(done) = self.written(id)? {
            return Ok(done);
        }
        match self.write_from(db, lines, precision, now_ns, Some(id)) {
            // An earlier attempt was applied while this one was planned.
            Err(QueryError::Completed) => self
                .written(id)?
                .ok_or_else(|| QueryError::Internal(format!("write {id} completed unrecorded"))),
            other => other,
        }
    }

    fn write_from(
        &self,
        db: &str,
        lines: Source<'_, '_>,
        precision: Precision,
        now_ns: i64,
        once: Option<u64>,
    ) -> Result<WriteSummary> {
        crate::model::schema::check_writable_database(db)?;
        self.check_reserve()?;
        loop {
            // Planned outside the writer lock, so concurrent requests plan in parallel.
            let p = self.prepare(db, lines, precision, now_ns)?;
            if p.summary.lines == 0 {
                return Ok(p.summary);
            }
            if !p.delta.is_empty() {
                return self.write_alone(db, lines, precision, now_ns, once, p);
            }
            // Committed with the writes queued meanwhile (`write_group`).
            let queued = self.queue.push(p, once);
            let mut group = self.commit_queued(&mut self.writer.lock());
            loop {
                if let Some(g) = group.take() {
                    g.finish(self);
                }
                match queued.wait() {
                    Outcome::Written(summary) => {
                        self.rows_written.fetch_add(summary.rows as u64, Ordering::Relaxed);
                        return Ok(summary);
                    }
                    Outcome::Failed(e) => return Err(e),
                    Outcome::Finish(g) => group = Some(g),
                    Outcome::Replan => break,
                    Outcome::Alone => {
                        let p = self.prepare(db, lines, precision, now_ns)?;
                        return self.write_alone(db, lines, precision, now_ns, once, p);
                    }
                }
            }
        }
    }

    /// Commits a write on its own: one that changes the catalog, or one whose group was refused
    /// for what one of its writes holds (planned again under the writer lock if the catalog
    /// changed since `p` was planned).
    fn write_alone(
        &self,
        db: &str,
        lines: Source<'_, '_>,
        precision: Precision,
        now_ns: i64,
        once: Option<u64>,
        mut p: Prepared,
    ) -> Result<WriteSummary> {
        let mut w = self.writer.lock();
        if p.generation != self.catalog.generation() {
            p = self.prepare(db, lines, precision, now_ns)?;
        }
        let existing = self.existing_rows(&p)?;
        let mut batch = WriteBatch::new();
        if let Some(id) = once {
            // First: a replica applies a batch whose record it already holds as a no-op.
            super::outcome::put_written(&mut batch, id, &p.summary);
            let now_ms = crate::now_ms();
            if now_ms.saturating_sub(w.written_forgotten_ms) >= 60_000 {
                w.written_forgotten_ms = now_ms;
                super::outcome::forget_old_records(&mut batch, now_ms);
            }
        }
        let delta = std::mem::take(&mut p.delta);
        delta.write_to(&mut batch)?;
        self.mark_written(&p.points, &mut batch);
        batch.reserve(p.points.len());
        let mut merged = Vec::new();
        for (i, (key, value)) in p.keys.drain(..).zip(p.values.drain(..)).enumerate() {
            let stored = if existing.is_empty() { None } else { existing.get(&p.points[i]) };
            match stored {
                Some(old) => {
                    let fields = merge_rows(old.clone(), decode_row(&value)?);
                    merged.clear();
                    encode_row(fields.iter().map(|(i, v)| (*i, v)), &mut merged);
                    batch.put(key, merged.clone());
                }
                None => {
                    batch.put(key, value);
                }
            }
        }
        let catalog_change = !delta.is_empty();
        let change = Change { batch: &batch, delta, newest: Cow::Borrowed(&p.newest) };
        let pending = self.commit_staged(&mut w, change)?;
        match &self.replication {
            // Later plans must see the catalog records applied.
            Some(_) if catalog_change => {
                pending.wait()?;
                drop(w);
            }
            // Proposed: later writes to these points see their newest times and wait for
            // the proposal before merging with stored rows (`existing_rows`).
            Some(_) => {
                self.catalog.note_times(&p.newest);
                drop(w);
                pending.wait()?;
            }
            // Acknowledged once durable; writers that arrived meanwhile share the fsync.
            None => {
                drop(w);
                pending.wait()?;
            }
        }
        // Tables this write created get the default retention.
        if let Some(d) = self.default_retention() {
            for name in &p.created {
                if let Err(e) = self.set_retention(db, name, Some(d)) {
                    tracing::warn!(table = %name, %e, "setting the default retention");
                }
            }
        }
        self.rows_written.fetch_add(p.summary.rows as u64, Ordering::Relaxed);
        Ok(p.summary)
    }

    /// Rows written through this database since it opened (on a shard replica: while it led;
    /// the cluster's split policy reads its rate).
    pub fn rows_written(&self) -> u64 {
        self.rows_written.load(Ordering::Relaxed)
    }

    /// Checks `lines` against the schema of database `db` as a write would (names, field types
    /// against the tables and earlier lines, retention) without writing anything: what a
    /// coordinator asks every shard before any of them writes its part of a request.
    pub fn check(
        &self,
        db: &str,
        lines: Source<'_, '_>,
        precision: Precision,
        now_ns: i64,
    ) -> Result<()> {
        crate::model::schema::check_writable_database(db)?;
        self.check_reserve()?;
        self.plan(db, lines, precision, now_ns).map(|_| ())
    }

    /// Stored rows the request's points must merge with: for series that existed before it,
    /// points at or below the newest time written since open are looked up; for series not
    /// written since open, the stored rows from the request's earliest time on are read.
    pub(super) fn existing_rows(&self, p: &Prepared) -> Result<HashMap<(u32, u64, i64), Fields>> {
        let mut out = HashMap::new();
        // The first point of every series the request does not create (points are in key
        // order), with where its points end.
        let mut firsts: Vec<(usize, usize)> = Vec::new();
        for (i, &(table, series, _)) in p.points.iter().enumerate() {
            match firsts.last_mut() {
                Some((f, end)) if (p.points[*f].0, p.points[*f].1) == (table, series) => {
                    *end = i + 1
                }
                _ => firsts.push((i, i + 1)),
            }
        }
        firsts.retain(|(f, _)| p.new_series.binary_search(&p.points[*f].1).is_err());
        if firsts.is_empty() {
            return Ok(out);
        }
        let ids: Vec<(u32, u64)> =
            firsts.iter().map(|(f, _)| (p.points[*f].0, p.points[*f].1)).collect();
        let max_times = self.catalog.max_times(&ids);
        // A proposal in flight may write points this request merges with: they are read
        // once none is in flight (before the snapshot every series' look-ups share).
        let merges = firsts
            .iter()
            .zip(&max_times)
            .any(|(&(first, _), max)| max.is_some_and(|max| max >= p.points[first].2));
        if let (true, Some(rep)) = (merges, &self.replication) {
            rep.drain();
        }
        let engine = self.engine();
        // Writes staged before this one under the writer lock may still wait for their fsync.
        let mut snap = None;
        for (&(first, end), max) in firsts.iter().zip(max_times) {
            let (table, series, t0) = p.points[first];
            match max {
                Some(max) if max < t0 => {} // every point is newer than anything stored
                Some(max) => {
                    let snap = snap.get_or_insert_with(|| engine.staged_snapshot());
                    for &(t, s, time) in &p.points[first..end] {
                        if time > max {
                            break;
                        }
                        if let Some(v) = engine.get(&row_key(t, s, time), Some(snap))? {
                            out.insert((t, s, time), decode_row(&v)?);
                        }
                    }
                }
                None => {
                    let snap = snap.get_or_insert_with(|| engine.staged_snapshot());
                    let wanted = &p.points[first..end];
                    let (lo, hi) = series_range(table, series, t0, None);
                    let mut newest = None;
                    for item in engine.scan(lo..hi, Some(snap))? {
                        let (k, v) = item?;
                        if k.len() != ROW_KEY_LEN {
                            continue;
                        }
                        let time = u64_to_time(u64::from_be_bytes(
                            k[12..]
                                .try_into()
                                .map_err(|_| QueryError::Corrupt("row key".into()))?,
                        ));
                        if wanted.binary_search(&(table, series, time)).is_ok() {
                            out.insert((table, series, time), decode_row(&v)?);
                        }
                        newest = Some(time);
                    }
                    if let Some(t) = newest {
                        self.catalog.note_times(&[(table, series, t)]);
                    }
                }
            }
        }
        Ok(out)
    }
}
