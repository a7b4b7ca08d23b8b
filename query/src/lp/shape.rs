//! The shape of a line-protocol request: per table, its tag keys and its fields with their
//! types. A node that splits a request between shards checks the shape whole before any shard
//! writes its part: a field given two types, or a name used as both tag and field, rejects the
//! request even when the conflicting lines go to different shards (each shard alone would
//! accept its part).

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};

use super::{FieldValue, Line, LineError};
use crate::error::QueryError;
use crate::model::schema::FieldType;

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
    tags: BTreeSet<String>,
    /// Field -> its type and the first line that gave it.
    fields: BTreeMap<String, (FieldType, usize)>,
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
    /// Adds line `no` to the shape; an error if it conflicts with an earlier line.
    pub fn add(&mut self, no: usize, line: &Line<'_>) -> Result<(), QueryError> {
        if !self.tables.contains_key(line.measurement.as_ref()) {
            self.tables.insert(line.measurement.to_string(), TableShape::default());
        }
        let Some(t) = self.tables.get_mut(line.measurement.as_ref()) else {
            return Ok(());
        };
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
            if !t.tags.contains(k.as_ref()) {
                t.tags.insert(k.to_string());
            }
        }
        for (k, v) in &line.fields {
            let ty = field_type(v);
            if t.tags.contains(k.as_ref()) {
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

    /// A fingerprint of each table's shape in database `db` (equal shapes, equal prints).
    pub fn fingerprints(&self, db: &str) -> Vec<u64> {
        self.tables.keys().filter_map(|name| self.fingerprint(db, name)).collect()
    }

    /// The fingerprint of table `name`'s shape in database `db`, if the request writes it.
    pub fn fingerprint(&self, db: &str, name: &str) -> Option<u64> {
        let t = self.tables.get(name)?;
        let mut h = DefaultHasher::new();
        (db, name, &t.tags).hash(&mut h);
        for (f, (ty, _)) in &t.fields {
            (f, ty.name()).hash(&mut h);
        }
        Some(h.finish())
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
            s.add(no, &line)?;
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

    #[test]
    fn fingerprints_follow_the_shape_not_the_values() {
        let a = shape("cpu,host=a v=1 1\ncpu,host=b v=7 2\n").unwrap().fingerprints("db");
        let b = shape("cpu,host=z v=3 9\n").unwrap().fingerprints("db");
        let c = shape("cpu,host=z v=3i 9\n").unwrap().fingerprints("db");
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, shape("cpu,host=z v=3 9\n").unwrap().fingerprints("other"));
    }
}
