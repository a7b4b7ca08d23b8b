//! Line-protocol writes: all or nothing.
//!
//! A request is parsed and checked whole (syntax, names, field types against the schema and
//! against earlier lines, retention) before anything is written; then the catalog records it
//! needs (new tables, columns, series) and its rows go into one engine write batch, which is
//! atomic. Two writes of the same point (series and time) merge their fields, the later value
//! of a field winning, as in InfluxDB.

use std::collections::{BTreeMap, HashMap};

use ebb_storage::WriteBatch;

use super::{Database, Writer};
use crate::error::{QueryError, Result};
use crate::lp::{FieldValue, Line, LineError, Lines, Precision};
use crate::model::catalog::CatalogDelta;
use crate::model::keys::{row_key, series_range, u64_to_time, ROW_KEY_LEN};
use crate::model::row::{decode_row, encode_row, merge_rows, Value};
use crate::model::schema::{check_name, TableDef, TIME_COLUMN};
use crate::model::series::{decode_series_key, encode_series_key};

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

type Fields = Vec<(usize, Value)>;

/// The tentative catalog of one request.
struct Plan<'c> {
    db: &'c Database,
    database: String,
    delta: CatalogDelta,
    /// Table definitions as this request leaves them, by name.
    tables: HashMap<String, TableDef>,
    /// Series created by this request: (table, key) -> id.
    new_series: HashMap<(u32, Vec<u8>), u64>,
    next_table: u32,
    next_series: u64,
    /// Rows by (table, series, time).
    rows: BTreeMap<(u32, u64, i64), Fields>,
}

impl<'c> Plan<'c> {
    fn table(&mut self, name: &str, line: usize) -> Result<&mut TableDef> {
        if !self.tables.contains_key(name) {
            check_name("table", name).map_err(|e| line_err(line, e.to_string()))?;
            let def = match self.db.catalog.table(&self.database, name) {
                Some(def) => (*def).clone(),
                None => {
                    let id = self.next_table;
                    self.next_table += 1;
                    let def = TableDef {
                        id,
                        database: self.database.clone(),
                        name: name.to_string(),
                        tags: Vec::new(),
                        fields: Vec::new(),
                        retention_ns: None,
                    };
                    self.delta.tables.insert(id, def.clone());
                    def
                }
            };
            self.tables.insert(name.to_string(), def);
        }
        self.tables.get_mut(name).ok_or_else(|| QueryError::Internal("table vanished".into()))
    }
}

/// The position of the first item matching `is`, trying `hint` first: lines of one source list
/// tags and fields in the same order, which is usually the table's order.
fn find_near<T>(items: &[T], hint: usize, is: impl Fn(&T) -> bool) -> Option<usize> {
    match items.get(hint) {
        Some(item) if is(item) => Some(hint),
        _ => items.iter().position(is),
    }
}

fn line_err(line: usize, reason: impl Into<String>) -> QueryError {
    QueryError::Line(LineError { line, reason: reason.into() })
}

fn value_of(v: &FieldValue<'_>) -> Value {
    match v {
        FieldValue::Float(f) => Value::Float(*f),
        FieldValue::Integer(i) => Value::Integer(*i),
        FieldValue::UInteger(u) => Value::UInteger(*u),
        FieldValue::Boolean(b) => Value::Boolean(*b),
        FieldValue::String(s) => Value::String(s.to_string()),
    }
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
        check_name("database", db)?;
        let numbered: Vec<(usize, Line<'_>)> =
            Lines::new(body).collect::<Result<_, LineError>>()?;
        self.write_parsed(db, &numbered, precision, now_ns)
    }

    /// Writes parsed lines (numbered for error messages) into database `db`, all or nothing.
    pub fn write_parsed(
        &self,
        db: &str,
        numbered: &[(usize, Line<'_>)],
        precision: Precision,
        now_ns: i64,
    ) -> Result<WriteSummary> {
        self.write_parsed_as(db, numbered, precision, now_ns, None)
    }

    /// [`Database::write_lines`] as write `id`, which a coordinator may send again (a retry
    /// after a timeout): a replicated database applies it once, and answers a repeat with what
    /// the first did. Records of writes are kept ten minutes.
    pub fn write_lines_once(
        &self,
        db: &str,
        body: &str,
        precision: Precision,
        now_ns: i64,
        id: u64,
    ) -> Result<WriteSummary> {
        if let Some(done) = self.written(id)? {
            return Ok(done);
        }
        check_name("database", db)?;
        let numbered: Vec<(usize, Line<'_>)> =
            Lines::new(body).collect::<Result<_, LineError>>()?;
        match self.write_parsed_as(db, &numbered, precision, now_ns, Some(id)) {
            // An earlier attempt was applied while this one was planned.
            Err(QueryError::Completed) => self
                .written(id)?
                .ok_or_else(|| QueryError::Internal(format!("write {id} completed unrecorded"))),
            other => other,
        }
    }

    fn write_parsed_as(
        &self,
        db: &str,
        numbered: &[(usize, Line<'_>)],
        precision: Precision,
        now_ns: i64,
        once: Option<u64>,
    ) -> Result<WriteSummary> {
        check_name("database", db)?;
        self.check_reserve()?;
        let mut w = self.writer.lock();
        let (next_table, _) = self.catalog.next_ids();
        let mut plan = self.plan(db, numbered, precision, now_ns)?;
        let mut summary = WriteSummary {
            lines: numbered.len(),
            rows: plan.rows.len(),
            tables_created: plan.delta.tables.keys().filter(|id| **id >= next_table).count(),
            series_created: plan.new_series.len(),
        };
        if numbered.is_empty() {
            summary.tables_created = 0;
            return Ok(summary);
        }
        // Changed table definitions go into the delta.
        for def in plan.tables.values() {
            let before = self.catalog.table_by_id(def.id);
            if before.as_deref() != Some(def) {
                plan.delta.tables.insert(def.id, def.clone());
            }
        }
        let created: Vec<String> = plan
            .delta
            .tables
            .values()
            .filter(|d| d.id >= next_table)
            .map(|d| d.name.clone())
            .collect();
        let existing = self.existing_rows(&plan)?;
        let mut batch = WriteBatch::new();
        if let Some(id) = once {
            // First: a replica applies a batch whose record it already holds as a no-op.
            super::outcome::put_written(&mut batch, id, &summary);
            let now_ms = crate::now_ms();
            if now_ms.saturating_sub(w.written_forgotten_ms) >= 60_000 {
                w.written_forgotten_ms = now_ms;
                super::outcome::forget_old_records(&mut batch, now_ms);
            }
        }
        plan.delta.write_to(&mut batch)?;
        let mut value = Vec::new();
        let mut touched: HashMap<(u32, u64), i64> = HashMap::new();
        for ((table, series, time), fields) in std::mem::take(&mut plan.rows) {
            let fields = match existing.get(&(table, series, time)) {
                Some(old) => merge_rows(old.clone(), fields),
                None => fields,
            };
            value.clear();
            encode_row(fields.iter().map(|(i, v)| (*i, v)), &mut value);
            batch.put(row_key(table, series, time).to_vec(), value.clone());
            let t = touched.entry((table, series)).or_insert(time);
            *t = (*t).max(time);
        }
        let staged = self.commit_write(&mut w, &batch, plan.delta)?;
        // A replicated database noted them when the batch was applied (`on_applied`).
        if !self.is_replicated() {
            for ((table, series), t) in touched {
                self.catalog.with_series_mut(table, |idx| idx.note_time(series, t));
            }
        }
        drop(w);
        // Acknowledged once durable; writers that arrived meanwhile share the fsync.
        if let Some(s) = staged {
            s.durable()?;
        }
        // Tables this write created get the default retention.
        if let Some(d) = self.default_retention() {
            for name in created {
                if let Err(e) = self.set_retention(db, &name, Some(d)) {
                    tracing::warn!(table = %name, %e, "setting the default retention");
                }
            }
        }
        Ok(summary)
    }

    /// Checks a line-protocol request body against the schema of database `db` as a write
    /// would (names, field types against the tables and earlier lines, retention) without
    /// writing anything: what a coordinator asks every shard before any of them writes its part
    /// of a request.
    pub fn check_lines(
        &self,
        db: &str,
        body: &str,
        precision: Precision,
        now_ns: i64,
    ) -> Result<()> {
        check_name("database", db)?;
        self.check_reserve()?;
        let numbered: Vec<(usize, Line<'_>)> =
            Lines::new(body).collect::<Result<_, LineError>>()?;
        self.plan(db, &numbered, precision, now_ns).map(|_| ())
    }

    /// The tentative catalog and rows of a request (catalog ids are final only under the
    /// writer lock).
    fn plan(
        &self,
        db: &str,
        numbered: &[(usize, Line<'_>)],
        precision: Precision,
        now_ns: i64,
    ) -> Result<Plan<'_>> {
        let (next_table, next_series) = self.catalog.next_ids();
        let mut plan = Plan {
            db: self,
            database: db.to_string(),
            delta: CatalogDelta::default(),
            tables: HashMap::new(),
            new_series: HashMap::new(),
            next_table,
            next_series,
            rows: BTreeMap::new(),
        };
        if !self.catalog.has_database(db) {
            plan.delta.databases.insert(db.to_string());
        }
        let mut key_buf = Vec::new();
        for (no, line) in numbered {
            self.plan_line(&mut plan, *no, line, precision, now_ns, &mut key_buf)?;
        }
        Ok(plan)
    }

    fn commit_write(
        &self,
        w: &mut Writer,
        batch: &WriteBatch,
        delta: CatalogDelta,
    ) -> Result<Option<ebb_storage::Staged>> {
        self.commit_staged(w, batch, delta).map(|(_, staged)| staged)
    }

    fn plan_line(
        &self,
        plan: &mut Plan<'_>,
        no: usize,
        line: &Line<'_>,
        precision: Precision,
        now_ns: i64,
        key_buf: &mut Vec<u8>,
    ) -> Result<()> {
        let time = match line.timestamp {
            Some(ts) => precision
                .to_nanos(ts)
                .ok_or_else(|| line_err(no, format!("timestamp {ts} out of range")))?,
            None => now_ns,
        };
        let def = plan.table(&line.measurement, no)?;
        if let Some(r) = def.retention_ns {
            let horizon = now_ns.saturating_sub(r.min(i64::MAX as u64) as i64);
            if time < horizon {
                return Err(QueryError::BeyondRetention(format!(
                    "line {no}: time {time} is older than the retention horizon {horizon} of table {}",
                    def.name
                )));
            }
        }
        let mut tag_idx: Vec<(usize, &str)> = Vec::with_capacity(line.tags.len());
        for (n, (k, v)) in line.tags.iter().enumerate() {
            if k == TIME_COLUMN {
                return Err(line_err(no, "\"time\" cannot be a tag"));
            }
            let i = match find_near(&def.tags, n, |t| t == k) {
                Some(i) => i,
                None if def.fields.iter().any(|(f, _)| f == k) => {
                    return Err(line_err(
                        no,
                        format!("{k:?} is a field of {}, not a tag", def.name),
                    ))
                }
                None => {
                    def.tags.push(k.to_string());
                    def.tags.len() - 1
                }
            };
            if tag_idx.iter().any(|(j, _)| *j == i) {
                return Err(line_err(no, format!("tag {k:?} given twice")));
            }
            tag_idx.push((i, v));
        }
        tag_idx.sort_unstable_by_key(|(i, _)| *i);
        let mut fields: Fields = Vec::with_capacity(line.fields.len());
        for (n, (k, v)) in line.fields.iter().enumerate() {
            if k == TIME_COLUMN {
                return Err(line_err(no, "\"time\" cannot be a field"));
            }
            let value = value_of(v);
            let ty = value.field_type();
            let i = match find_near(&def.fields, n, |(f, _)| f == k) {
                Some(i) if def.fields[i].1 != ty => {
                    return Err(QueryError::TypeConflict {
                        table: def.name.clone(),
                        field: k.to_string(),
                        existing: def.fields[i].1.name(),
                        given: ty.name(),
                        line: Some(no),
                    })
                }
                Some(i) => i,
                None if def.tags.iter().any(|t| t == k) => {
                    return Err(line_err(
                        no,
                        format!("{k:?} is a tag of {}, not a field", def.name),
                    ))
                }
                None => {
                    def.fields.push((k.to_string(), ty));
                    def.fields.len() - 1
                }
            };
            match fields.iter_mut().find(|(j, _)| *j == i) {
                Some(slot) => slot.1 = value, // the last value of a repeated field wins
                None => fields.push((i, value)),
            }
        }
        fields.sort_unstable_by_key(|(i, _)| *i);
        let (table, tag_count) = (def.id, def.tags.len());
        encode_series_key(tag_idx.iter().copied(), key_buf);
        let series = match self.catalog.with_series(table, |idx| idx.get(key_buf)) {
            Some(id) => id,
            None => match plan.new_series.get(&(table, key_buf.clone())) {
                Some(id) => *id,
                None => {
                    let id = plan.next_series;
                    plan.next_series += 1;
                    let tags = decode_series_key(key_buf, tag_count)?;
                    plan.delta.series.push((table, key_buf.clone(), id, tags));
                    plan.new_series.insert((table, key_buf.clone()), id);
                    id
                }
            },
        };
        let slot = plan.rows.entry((table, series, time)).or_default();
        let merged = merge_rows(std::mem::take(slot), fields);
        *slot = merged;
        Ok(())
    }

    /// Stored rows the request's rows must merge with: for series that existed before it,
    /// rows at or below the newest time written since open are looked up; for series not
    /// written since open, the stored rows from the request's earliest time on are read.
    fn existing_rows(&self, plan: &Plan<'_>) -> Result<HashMap<(u32, u64, i64), Fields>> {
        let mut out = HashMap::new();
        // Writes staged before this one under the writer lock may still wait for their fsync.
        let snap = self.engine().staged_snapshot();
        let mut first_time: BTreeMap<(u32, u64), i64> = BTreeMap::new();
        let new: std::collections::HashSet<u64> = plan.new_series.values().copied().collect();
        for &(table, series, time) in plan.rows.keys() {
            if new.contains(&series) {
                continue;
            }
            first_time.entry((table, series)).or_insert(time);
        }
        for ((table, series), t0) in first_time {
            match self.catalog.with_series(table, |idx| idx.max_time(series)) {
                Some(max) if max < t0 => {} // every row is newer than anything stored
                Some(max) => {
                    let lo = (table, series, t0);
                    let hi = (table, series, max);
                    for (&(t, s, time), _) in plan.rows.range(lo..=hi) {
                        let key = row_key(t, s, time);
                        if let Some(v) = self.engine().get(&key, Some(&snap))? {
                            out.insert((t, s, time), decode_row(&v)?);
                        }
                    }
                }
                None => {
                    let (lo, hi) = series_range(table, series, t0, None);
                    for item in self.engine().scan(lo..hi, Some(&snap))? {
                        let (k, v) = item?;
                        if k.len() != ROW_KEY_LEN {
                            continue;
                        }
                        let time = u64_to_time(u64::from_be_bytes(
                            k[12..]
                                .try_into()
                                .map_err(|_| QueryError::Corrupt("row key".into()))?,
                        ));
                        if plan.rows.contains_key(&(table, series, time)) {
                            out.insert((table, series, time), decode_row(&v)?);
                        }
                        self.catalog.with_series_mut(table, |idx| idx.note_time(series, time));
                    }
                }
            }
        }
        Ok(out)
    }
}
