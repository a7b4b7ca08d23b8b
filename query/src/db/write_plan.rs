//! Planning a line-protocol write, outside the writer lock: names and field types checked
//! against the catalog and earlier lines, tables and series resolved (new ones get the ids the
//! catalog would give next), rows merged per point and encoded. A plan records the catalog
//! generation it read; the writer applies it only if the catalog is still at that generation,
//! and plans again under its lock otherwise.

use crate::model::hashspace::{series_hash, HashFilter};
use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;

use super::write::WriteSummary;
use super::Database;
use crate::error::{QueryError, Result};
use crate::lp::{FieldValue, Line, LineError, Lines, Precision};
use crate::model::catalog::CatalogDelta;
use crate::model::keys::{row_key, ROW_KEY_LEN};
use crate::model::row::{encode_row, merge_rows, Value};
use crate::model::schema::{check_name, TableDef, TIME_COLUMN};
use crate::model::series::{decode_series_key, encode_series_key};

pub(super) type Fields = Vec<(usize, Value)>;

/// The lines of a write: a request body, parsed line by line as it is planned (no line outlives
/// its planning), lines parsed before, or parsed points in their wire form
/// ([`crate::lp::wire`]), read point by point.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a, 'l> {
    /// A line-protocol body.
    Body(&'a str),
    /// Parsed lines, numbered for error messages.
    Parsed(&'a [(usize, Line<'l>)]),
    /// Points another node parsed ([`crate::lp::wire::PointsWriter`]).
    Points(&'a [u8]),
}

impl Source<'_, '_> {
    /// Calls `f` on every line, in order; returns how many there were.
    fn each(&self, mut f: impl FnMut(usize, &Line<'_>) -> Result<()>) -> Result<usize> {
        match self {
            Source::Body(body) => {
                let mut n = 0;
                for item in Lines::new(body) {
                    let (no, line) = item?;
                    f(no, &line)?;
                    n += 1;
                }
                Ok(n)
            }
            Source::Parsed(lines) => {
                for (no, line) in lines.iter() {
                    f(*no, line)?;
                }
                Ok(lines.len())
            }
            Source::Points(buf) => {
                let mut n = 0;
                for item in crate::lp::wire::PointsReader::new(buf)? {
                    let (no, line) = item?;
                    f(no, &line)?;
                    n += 1;
                }
                Ok(n)
            }
        }
    }
}

/// The tentative catalog of one request.
pub(super) struct Plan<'c> {
    db: &'c Database,
    pub(super) database: String,
    pub(super) delta: CatalogDelta,
    /// Table definitions as this request leaves them, by name.
    pub(super) tables: HashMap<String, TableDef, ahash::RandomState>,
    /// Series created by this request: (table, key) -> id.
    pub(super) new_series: HashMap<(u32, Vec<u8>), u64>,
    pub(super) next_table: u32,
    pub(super) next_series: u64,
    /// Rows by (table, series, time).
    pub(super) rows: BTreeMap<(u32, u64, i64), Fields>,
    /// The series hashes the shard holds, if it holds only some (it has split).
    holds: Option<HashFilter>,
    /// What the request may add.
    limits: super::write::WriteLimits,
}

impl<'c> Plan<'c> {
    fn table(&mut self, name: &str, line: usize) -> Result<&mut TableDef> {
        if !self.tables.contains_key(name) {
            check_name("table", name).map_err(|e| line_err(line, e.to_string()))?;
            let def = match self.db.catalog.table(&self.database, name) {
                Some(def) if def.rollup.is_some() => {
                    let source = def.rollup.as_ref().map_or("", |r| r.source.as_str());
                    return Err(line_err(
                        line,
                        format!("{name} is a rollup of {source}, kept from it; write to {source}"),
                    ));
                }
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
                        rollup: None,
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

/// A line over one of the request's limits.
fn over_limit(line: usize, what: String, limit: usize, setting: &'static str) -> QueryError {
    QueryError::Limit(crate::error::LimitError {
        what: format!("line {line}: {what}"),
        limit,
        setting,
    })
}

pub(super) fn line_err(line: usize, reason: impl Into<String>) -> QueryError {
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

/// A write planned outside the writer lock: its catalog records and its rows, encoded.
pub(super) struct Prepared {
    /// The catalog generation it was planned against.
    pub generation: u64,
    /// Catalog records to write with the rows.
    pub delta: CatalogDelta,
    /// What the write does.
    pub summary: WriteSummary,
    /// Names of the tables it creates.
    pub created: Vec<String>,
    /// Series it creates, sorted.
    pub new_series: Vec<u64>,
    /// Points, in key order: `(table, series, time)`.
    pub points: Vec<(u32, u64, i64)>,
    /// Row key and encoded fields of each point (slices of two shared buffers).
    pub keys: Vec<Bytes>,
    /// Encoded fields of each point.
    pub values: Vec<Bytes>,
    /// Newest time written per series: `(table, series, time)`.
    pub newest: Vec<(u32, u64, i64)>,
}

impl Database {
    /// Plans `numbered` for database `db`: catalog records, then every point's key and encoded
    /// fields in two shared buffers (no allocation per row).
    pub(super) fn prepare(
        &self,
        db: &str,
        lines: Source<'_, '_>,
        precision: Precision,
        now_ns: i64,
    ) -> Result<Prepared> {
        let generation = self.catalog.generation();
        let (next_table, _) = self.catalog.next_ids();
        let (mut plan, count) = self.plan(db, lines, precision, now_ns)?;
        let mut summary = WriteSummary {
            lines: count,
            rows: plan.rows.len(),
            tables_created: plan.delta.tables.keys().filter(|id| **id >= next_table).count(),
            series_created: plan.new_series.len(),
        };
        if count == 0 {
            summary.tables_created = 0;
        }
        // Changed table definitions go into the delta.
        for def in plan.tables.values() {
            let before = self.catalog.table_by_id(def.id);
            if before.as_deref() != Some(def) {
                plan.delta.tables.insert(def.id, def.clone());
            }
        }
        let created = plan
            .delta
            .tables
            .values()
            .filter(|d| d.id >= next_table)
            .map(|d| d.name.clone())
            .collect();
        let rows = std::mem::take(&mut plan.rows);
        let n = rows.len();
        let mut points = Vec::with_capacity(n);
        let mut key_buf = Vec::with_capacity(n * ROW_KEY_LEN);
        let mut value_buf = Vec::with_capacity(n * 64);
        let mut ends = Vec::with_capacity(n);
        let mut newest: Vec<(u32, u64, i64)> = Vec::new();
        for ((table, series, time), fields) in rows {
            points.push((table, series, time));
            key_buf.extend_from_slice(&row_key(table, series, time));
            encode_row(fields.iter().map(|(i, v)| (*i, v)), &mut value_buf);
            ends.push(value_buf.len());
            // Points come in key order: the last of a series is its newest.
            match newest.last_mut() {
                Some(last) if (last.0, last.1) == (table, series) => last.2 = time,
                _ => newest.push((table, series, time)),
            }
        }
        let key_buf = Bytes::from(key_buf);
        // The memtable keeps slices of it and counts their lengths: no spare capacity.
        let value_buf = Bytes::from(value_buf.into_boxed_slice());
        let keys = (0..n).map(|i| key_buf.slice(i * ROW_KEY_LEN..(i + 1) * ROW_KEY_LEN)).collect();
        let mut start = 0;
        let values = ends
            .iter()
            .map(|&end| {
                let v = value_buf.slice(start..end);
                start = end;
                v
            })
            .collect();
        let mut new_series: Vec<u64> = plan.new_series.values().copied().collect();
        new_series.sort_unstable();
        Ok(Prepared {
            generation,
            delta: plan.delta,
            summary,
            created,
            new_series,
            points,
            keys,
            values,
            newest,
        })
    }

    /// The tentative catalog and rows of a request (catalog ids are final only under the
    /// writer lock).
    pub(super) fn plan(
        &self,
        db: &str,
        lines: Source<'_, '_>,
        precision: Precision,
        now_ns: i64,
    ) -> Result<(Plan<'_>, usize)> {
        let (next_table, next_series) = self.catalog.next_ids();
        let mut plan = Plan {
            db: self,
            database: db.to_string(),
            delta: CatalogDelta::default(),
            tables: HashMap::default(),
            new_series: HashMap::new(),
            next_table,
            next_series,
            rows: BTreeMap::new(),
            holds: self.catalog.hashes(),
            limits: self.write_limits(),
        };
        if !self.catalog.has_database(db) {
            plan.delta.databases.insert(db.to_string());
        }
        let mut key_buf = Vec::new();
        let count = lines.each(|no, line| {
            let planned = self.plan_line(&mut plan, no, line, precision, now_ns, &mut key_buf);
            match (planned, plan.holds) {
                // A line of a series the shard does not hold is refused as such, whatever else
                // is wrong with it: the shard that holds it judges the rest.
                (Err(e), Some(holds)) if !matches!(e, QueryError::NotHeld { .. }) => {
                    match holds.holds(series_hash(&line.measurement, &line.tags)) {
                        true => Err(e),
                        false => Err(QueryError::NotHeld { line: no }),
                    }
                }
                (planned, _) => planned,
            }
        })?;
        Ok((plan, count))
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
        let time = precision.time_of(line.timestamp, now_ns).ok_or_else(|| {
            line_err(no, format!("timestamp {} out of range", line.timestamp.unwrap_or_default()))
        })?;
        let limits = plan.limits;
        let def = plan.table(&line.measurement, no)?;
        if let Some(r) = def.retention_ns {
            let horizon = now_ns.saturating_sub(r.min(i64::MAX as u64) as i64);
            if time < horizon {
                return Err(QueryError::BeyondRetention {
                    message: format!(
                        "line {no}: time {} is older than table {}'s retention horizon, {}",
                        crate::rfc3339(time),
                        def.name,
                        crate::rfc3339(horizon)
                    ),
                    line: Some(no),
                });
            }
        }
        if line.tags.len() > limits.max_tags_per_line {
            return Err(over_limit(
                no,
                format!("{} tags", line.tags.len()),
                limits.max_tags_per_line,
                "max_tags_per_line",
            ));
        }
        // A new column must leave the table within its limit (`time` is one of its columns).
        let room = |def: &TableDef| match def.tags.len() + def.fields.len() + 1
            < limits.max_columns_per_table
        {
            true => Ok(()),
            false => Err(over_limit(
                no,
                format!("table {:?}'s columns", def.name),
                limits.max_columns_per_table,
                "max_columns_per_table",
            )),
        };
        let mut tag_idx: smallvec::SmallVec<[(usize, &str); 12]> = smallvec::SmallVec::new();
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
                    room(def)?;
                    def.tags.push(k.to_string());
                    def.tags.len() - 1
                }
            };
            tag_idx.push((i, v));
        }
        tag_idx.sort_unstable_by_key(|(i, _)| *i);
        if let Some(w) = tag_idx.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(line_err(no, format!("tag {:?} given twice", def.tags[w[0].0])));
        }
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
                    room(def)?;
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
        // A split shard refuses series it does not hold (a known series' hash is noted once).
        let holds = plan.holds;
        let known = self.catalog.with_series(table, |idx| {
            idx.get(key_buf).map(|id| (id, holds.and_then(|_| idx.hash(id))))
        });
        if let Some(holds) = holds {
            let hash = match known {
                Some((_, Some(hash))) => hash,
                _ => series_hash(&line.measurement, &line.tags),
            };
            if !holds.holds(hash) {
                return Err(QueryError::NotHeld { line: no });
            }
        }
        let series = match known.map(|(id, _)| id) {
            Some(id) => id,
            None => match plan.new_series.get(&(table, key_buf.clone())) {
                Some(id) => *id,
                None => {
                    if plan.new_series.len() >= limits.max_series_per_request {
                        return Err(over_limit(
                            no,
                            "the request's new series".to_string(),
                            limits.max_series_per_request,
                            "max_series_per_request",
                        ));
                    }
                    let id = plan.next_series;
                    plan.next_series += 1;
                    let tags = decode_series_key(key_buf, tag_count)?;
                    plan.delta.series.push((table, key_buf.clone(), id, tags));
                    plan.new_series.insert((table, key_buf.clone()), id);
                    id
                }
            },
        };
        match plan.rows.entry((table, series, time)) {
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(fields);
            }
            std::collections::btree_map::Entry::Occupied(mut e) => {
                let merged = merge_rows(std::mem::take(e.get_mut()), fields);
                *e.get_mut() = merged;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lp::Precision;
    use crate::model::catalog::CatalogDelta;
    use crate::model::hashspace::Span;

    const T0: i64 = 1_700_000_000_000_000_000;

    /// A host whose series `cpu,host=<host>` the filter holds (`true`) or not.
    fn host(filter: &HashFilter, held: bool, from: usize) -> String {
        (from..)
            .map(|i| format!("h{i}"))
            .find(|h| filter.holds(series_hash("cpu", &[("host", h.as_str())])) == held)
            .unwrap()
    }

    #[test]
    fn a_split_shard_refuses_series_it_does_not_hold_before_any_other_error() {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::open(dir.path(), ebb_storage::Options::default()).unwrap();
        // Half the hashes of one root: the lower half.
        let filter = HashFilter { roots: 1, span: Span { root: 0, lo: 0, end: Some(1 << 63) } };
        let (held, other) = (host(&filter, true, 0), host(&filter, false, 0));
        let (new_held, new_other) = (host(&filter, true, 1000), host(&filter, false, 1000));
        let write = |body: String| db.write_lines("db", &body, Precision::Nanoseconds, 0);
        // Both series exist before the shard splits.
        write(format!("cpu,host={held} v=1 {T0}\ncpu,host={other} v=1 {T0}")).unwrap();
        db.catalog().apply(CatalogDelta { hashes: Some(filter), ..Default::default() });

        // Known series: the noted hash decides.
        write(format!("cpu,host={held} v=2 {}", T0 + 1)).unwrap();
        let refused = write(format!("cpu,host={held} v=2 {}\ncpu,host={other} v=2 {T0}", T0 + 2));
        assert!(matches!(refused, Err(QueryError::NotHeld { line: 2 })), "{refused:?}");
        // New series: hashed from the line.
        write(format!("cpu,host={new_held} v=1 {T0}")).unwrap();
        let refused = write(format!("cpu,host={new_other} v=1 {T0}"));
        assert!(matches!(refused, Err(QueryError::NotHeld { line: 1 })), "{refused:?}");
        // A line that is wrong in another way too is refused as not held...
        for bad in [
            format!("cpu,host={other} v=\"text\" {T0}"),
            format!("cpu,host={new_other} time=1i {T0}"),
        ] {
            let refused = write(bad.clone());
            assert!(matches!(refused, Err(QueryError::NotHeld { line: 1 })), "{bad}: {refused:?}");
        }
        // ...and a held one by what is wrong with it.
        let refused = write(format!("cpu,host={held} v=\"text\" {T0}"));
        assert!(matches!(refused, Err(QueryError::TypeConflict { .. })), "{refused:?}");
        // Nothing refused was written.
        let def = db.catalog().table("db", "cpu").unwrap();
        let series = db.catalog().with_series(def.id, |idx| idx.len());
        assert_eq!(series, 3, "the series of {held}, {other} and {new_held}");
    }
}
