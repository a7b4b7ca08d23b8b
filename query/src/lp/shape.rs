//! The shape of a line-protocol request: per table, its tag keys, its fields with their types
//! and its oldest time. A node that splits a request between shards checks the shape whole
//! before any shard writes its part: a field given two types, or a name used as both tag and
//! field, rejects the request even when the conflicting lines go to different shards (each
//! shard alone would accept its part); then [`Shape::check_against`] checks each table's shape
//! against the definition every shard it goes to has of it, as a shard's write would.

use std::collections::{BTreeMap, HashMap};

use super::{FieldValue, Line, LineError};
use crate::db::WriteLimits;
use crate::error::{LimitError, QueryError};
use crate::model::schema::{FieldType, TableDef};

/// The type a field value gives its column.
pub fn field_type(v: &FieldValue<'_>) -> FieldType {
    match v {
        FieldValue::Float(_) => FieldType::Float,
        FieldValue::Integer(_) => FieldType::Integer,
        FieldValue::UInteger(_) => FieldType::UInteger,
        FieldValue::Boolean(_) => FieldType::Boolean,
        FieldValue::String(_) => FieldType::String,
    }
}

#[derive(Debug, Default)]
struct TableShape {
    /// Tag -> the first line that gave it.
    tags: BTreeMap<String, usize>,
    /// Field -> its type and the first line that gave it.
    fields: BTreeMap<String, (FieldType, usize)>,
    /// The oldest time of its lines (ns) and the line that has it.
    oldest: Option<(i64, usize)>,
    /// The tag keys and typed field keys of the last line added, encoded: a line with the same
    /// ones adds nothing (most lines of a request share their table's keys).
    last: Vec<u8>,
}

/// Tag keys and typed fields of each table a request writes.
#[derive(Debug, Default)]
pub struct Shape {
    tables: HashMap<String, TableShape>,
    /// A buffer for the keys of the line being added.
    scratch: Vec<u8>,
}

impl Shape {
    /// Adds line `no`, of time `time_ns` (`None`: out of range, a shard refuses it), to the
    /// shape; an error if it conflicts with an earlier line.
    pub fn add(
        &mut self,
        no: usize,
        line: &Line<'_>,
        time_ns: Option<i64>,
    ) -> Result<(), QueryError> {
        if !self.tables.contains_key(line.measurement.as_ref()) {
            self.tables.insert(line.measurement.to_string(), TableShape::default());
        }
        let Some(t) = self.tables.get_mut(line.measurement.as_ref()) else {
            return Ok(());
        };
        if let Some(time) = time_ns {
            if t.oldest.is_none_or(|(oldest, _)| time < oldest) {
                t.oldest = Some((time, no));
            }
        }
        let mut keys = std::mem::take(&mut self.scratch);
        keys.clear();
        for (k, _) in &line.tags {
            keys.extend_from_slice(&(k.len() as u32).to_le_bytes());
            keys.extend_from_slice(k.as_bytes());
        }
        keys.push(0xff);
        for (k, v) in &line.fields {
            keys.extend_from_slice(&(k.len() as u32).to_le_bytes());
            keys.extend_from_slice(k.as_bytes());
            keys.push(field_type(v) as u8);
        }
        if keys == t.last {
            self.scratch = keys;
            return Ok(());
        }
        let checked = Self::check(t, no, line);
        if checked.is_ok() {
            self.scratch = std::mem::replace(&mut t.last, keys);
        }
        checked
    }

    fn check(t: &mut TableShape, no: usize, line: &Line<'_>) -> Result<(), QueryError> {
        for (k, _) in &line.tags {
            if t.fields.contains_key(k.as_ref()) {
                let reason = format!("{k:?} is a field of {} in an earlier line", line.measurement);
                return Err(LineError { line: no, reason }.into());
            }
            if !t.tags.contains_key(k.as_ref()) {
                t.tags.insert(k.to_string(), no);
            }
        }
        for (k, v) in &line.fields {
            let ty = field_type(v);
            if t.tags.contains_key(k.as_ref()) {
                let reason = format!("{k:?} is a tag of {} in an earlier line", line.measurement);
                return Err(LineError { line: no, reason }.into());
            }
            match t.fields.get(k.as_ref()) {
                Some((existing, _)) if *existing != ty => {
                    return Err(QueryError::TypeConflict {
                        table: line.measurement.to_string(),
                        field: k.to_string(),
                        existing: existing.name(),
                        given: ty.name(),
                        line: Some(no),
                    })
                }
                Some(_) => {}
                None => {
                    t.fields.insert(k.to_string(), (ty, no));
                }
            }
        }
        Ok(())
    }

    /// True if `def` has every tag and field the request gives table `def.name` (by name).
    pub fn covered_by(&self, def: &TableDef) -> bool {
        self.tables.get(&def.name).is_none_or(|t| {
            t.tags.keys().all(|k| def.tags.contains(k))
                && t.fields.keys().all(|k| def.fields.iter().any(|(f, _)| f == k))
        })
    }

    /// Checks the shape of table `def.name` against `def` (a shard's definition of it) as
    /// that shard's write would: a tag that is a field there or the other way round, a field of
    /// another type, more columns than `limits` allow, a line older than its retention, a
    /// rollup written to. Nothing if the request does not write the table.
    pub fn check_against(
        &self,
        def: &TableDef,
        now_ns: i64,
        limits: &WriteLimits,
    ) -> Result<(), QueryError> {
        let Some(t) = self.tables.get(&def.name) else {
            return Ok(());
        };
        let first = t.tags.values().chain(t.fields.values().map(|(_, no)| no)).min().copied();
        if let Some(rollup) = &def.rollup {
            let (name, source) = (&def.name, &rollup.source);
            let reason = format!("{name} is a rollup of {source}, kept from it; write to {source}");
            return Err(LineError { line: first.unwrap_or(1), reason }.into());
        }
        if let (Some(r), Some((time, no))) = (def.retention_ns, t.oldest) {
            let horizon = now_ns.saturating_sub(r.min(i64::MAX as u64) as i64);
            if time < horizon {
                return Err(QueryError::BeyondRetention(format!(
                    "line {no}: time {time} is older than the retention horizon {horizon} of table {}",
                    def.name
                )));
            }
        }
        let mut added = 0;
        for (k, no) in &t.tags {
            if def.fields.iter().any(|(f, _)| f == k) {
                let reason = format!("{k:?} is a field of {}, not a tag", def.name);
                return Err(LineError { line: *no, reason }.into());
            }
            added += usize::from(!def.tags.contains(k));
        }
        for (k, (ty, no)) in &t.fields {
            if def.tags.contains(k) {
                let reason = format!("{k:?} is a tag of {}, not a field", def.name);
                return Err(LineError { line: *no, reason }.into());
            }
            match def.fields.iter().find(|(f, _)| f == k) {
                Some((_, existing)) if existing != ty => {
                    return Err(QueryError::TypeConflict {
                        table: def.name.clone(),
                        field: k.clone(),
                        existing: existing.name(),
                        given: ty.name(),
                        line: Some(*no),
                    })
                }
                Some(_) => {}
                None => added += 1,
            }
        }
        // `time` is one of the table's columns.
        if added > 0 && def.tags.len() + def.fields.len() + 1 + added > limits.max_columns_per_table
        {
            return Err(QueryError::Limit(LimitError {
                what: format!("line {}: table {:?}'s columns", first.unwrap_or(1), def.name),
                limit: limits.max_columns_per_table,
                setting: "max_columns_per_table",
            }));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lp::Lines;

    fn shape(body: &str) -> Result<Shape, QueryError> {
        let mut s = Shape::default();
        for item in Lines::new(body) {
            let (no, line) = item?;
            s.add(no, &line, line.timestamp)?;
        }
        Ok(s)
    }

    #[test]
    fn conflicts_between_lines_are_found_whatever_shard_they_go_to() {
        assert!(shape("cpu,host=a v=1 1\ncpu,host=b v=2,w=1i 2\nmem,host=a v=1i 3\n").is_ok());
        let e = shape("cpu,host=a v=1 1\ncpu,host=b v=2i 2\n").unwrap_err();
        assert!(matches!(e, QueryError::TypeConflict { line: Some(2), .. }), "{e}");
        // Lines with the keys of the line before add nothing; a change is still checked.
        let e = shape("cpu,host=a v=1 1\ncpu,host=b v=2 2\ncpu,host=c v=3i 3\n").unwrap_err();
        assert!(matches!(e, QueryError::TypeConflict { line: Some(3), .. }), "{e}");
        let e = shape("cpu,host=a v=1 1\nmem v=1 2\ncpu,host=a v=1 3\ncpu,v=x w=1 4\n");
        assert!(e.unwrap_err().to_string().contains("line 4"));
        let e = shape("cpu,host=a v=1 1\ncpu,v=b x=2 2\n").unwrap_err();
        assert!(e.to_string().contains("line 2") && e.to_string().contains("field"), "{e}");
        let e = shape("cpu,host=a v=1 1\ncpu host=2 2\n").unwrap_err();
        assert!(e.to_string().contains("tag"), "{e}");
    }

    fn def(tags: &[&str], fields: &[(&str, FieldType)], retention_ns: Option<u64>) -> TableDef {
        TableDef {
            id: 1,
            database: "db".into(),
            name: "cpu".into(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            fields: fields.iter().map(|(f, ty)| (f.to_string(), *ty)).collect(),
            retention_ns,
            rollup: None,
        }
    }

    #[test]
    fn shapes_are_checked_against_a_shards_table_as_its_write_would() {
        let limits = WriteLimits::default();
        let s = shape("cpu,host=a v=1 100\ncpu,host=b v=2,w=1i 50\nmem v=1 1\n").unwrap();
        let fine = def(&["host"], &[("v", FieldType::Float)], None);
        s.check_against(&fine, 1_000, &limits).unwrap();
        let e = s.check_against(&def(&[], &[("v", FieldType::String)], None), 0, &limits);
        assert!(matches!(e, Err(QueryError::TypeConflict { line: Some(1), .. })), "{e:?}");
        let e = s.check_against(&def(&["w"], &[], None), 0, &limits).unwrap_err();
        assert!(e.to_string().contains("line 2") && e.to_string().contains("tag of"), "{e}");
        let e = s.check_against(&def(&[], &[("host", FieldType::Float)], None), 0, &limits);
        assert!(e.unwrap_err().to_string().contains("field of cpu, not a tag"));
        // The oldest line (line 2, time 50) against a retention of 900 at time 1000.
        let e = s.check_against(&def(&[], &[], Some(900)), 1_000, &limits).unwrap_err();
        assert!(matches!(e, QueryError::BeyondRetention(ref m) if m.starts_with("line 2:")), "{e}");
        s.check_against(&def(&[], &[], Some(950)), 1_000, &limits).unwrap();
        // host, v, w and time: four columns.
        let four = WriteLimits { max_columns_per_table: 4, ..limits };
        s.check_against(&def(&[], &[], None), 0, &four).unwrap();
        let three = WriteLimits { max_columns_per_table: 3, ..limits };
        let e = s.check_against(&def(&[], &[], None), 0, &three).unwrap_err();
        assert!(matches!(e, QueryError::Limit(_)), "{e}");
        assert!(s.covered_by(&def(
            &["host"],
            &[("v", FieldType::Float), ("w", FieldType::Float)],
            None
        )));
        assert!(!s.covered_by(&fine), "no field w");
        // A table the request does not write.
        let other = TableDef { name: "disk".into(), ..def(&[], &[("v", FieldType::String)], None) };
        s.check_against(&other, 0, &limits).unwrap();
    }
}
