//! Row values: the fields present in a row, each tagged with its field number and type.
//!
//! ```text
//! count varint | (field number varint | type u8 | payload)*
//! payload: f64 8 bytes LE | i64 zigzag varint | u64 varint | bool u8 | len varint + UTF-8
//! ```
//!
//! Field numbers index [`crate::model::TableDef::fields`], which only grows, so old rows stay
//! readable as columns are added.

use super::schema::FieldType;
use super::varint;
use crate::error::QueryError;

/// A typed field value owned by a row.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Float.
    Float(f64),
    /// Signed integer.
    Integer(i64),
    /// Unsigned integer.
    UInteger(u64),
    /// Boolean.
    Boolean(bool),
    /// String.
    String(String),
}

impl Value {
    /// Its type.
    pub fn field_type(&self) -> FieldType {
        match self {
            Value::Float(_) => FieldType::Float,
            Value::Integer(_) => FieldType::Integer,
            Value::UInteger(_) => FieldType::UInteger,
            Value::Boolean(_) => FieldType::Boolean,
            Value::String(_) => FieldType::String,
        }
    }
}

const T_FLOAT: u8 = 1;
const T_INT: u8 = 2;
const T_UINT: u8 = 3;
const T_BOOL: u8 = 4;
const T_STR: u8 = 5;

/// Encodes `(field number, value)` pairs (field numbers ascending, no duplicates).
pub fn encode_row<'a>(
    fields: impl ExactSizeIterator<Item = (usize, &'a Value)>,
    out: &mut Vec<u8>,
) {
    varint::put(out, fields.len() as u64);
    for (i, v) in fields {
        varint::put(out, i as u64);
        match v {
            Value::Float(f) => {
                out.push(T_FLOAT);
                out.extend_from_slice(&f.to_le_bytes());
            }
            Value::Integer(n) => {
                out.push(T_INT);
                varint::put(out, ((n << 1) ^ (n >> 63)) as u64);
            }
            Value::UInteger(n) => {
                out.push(T_UINT);
                varint::put(out, *n);
            }
            Value::Boolean(b) => {
                out.push(T_BOOL);
                out.push(u8::from(*b));
            }
            Value::String(s) => {
                out.push(T_STR);
                varint::put(out, s.len() as u64);
                out.extend_from_slice(s.as_bytes());
            }
        }
    }
}

/// Decodes a row into `(field number, value)` pairs.
pub fn decode_row(b: &[u8]) -> Result<Vec<(usize, Value)>, QueryError> {
    let mut pos = 0;
    let n = varint::get(b, &mut pos).ok_or_else(corrupt)? as usize;
    let mut out = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        let (i, v) = next_field(b, &mut pos, true)?;
        out.extend(v.map(|v| (i, v)));
    }
    Ok(out)
}

/// Decodes the fields of a row that `wanted` marks into `out` (indexed by field number, so
/// `out` must be as long as `wanted`), leaving the others `None`; unwanted values are skipped
/// without being materialized, and decoding stops after the last wanted field (field numbers
/// ascend within a row).
pub fn decode_fields(
    b: &[u8],
    wanted: &[bool],
    out: &mut [Option<Value>],
) -> Result<(), QueryError> {
    out.iter_mut().for_each(|f| *f = None);
    let Some(last) = wanted.iter().rposition(|w| *w) else { return Ok(()) };
    let mut pos = 0;
    let n = varint::get(b, &mut pos).ok_or_else(corrupt)? as usize;
    for _ in 0..n {
        let i = varint::get(b, &mut pos).ok_or_else(corrupt)? as usize;
        if i > last {
            break;
        }
        let want = wanted.get(i).copied().unwrap_or(false);
        let v = value(b, &mut pos, want)?;
        if let (Some(v), Some(slot)) = (v, out.get_mut(i)) {
            *slot = Some(v);
        }
    }
    Ok(())
}

fn corrupt() -> QueryError {
    QueryError::Corrupt("undecodable row value".into())
}

/// Decodes one `(field number, value)` at `pos`.
fn next_field(
    b: &[u8],
    pos: &mut usize,
    materialize: bool,
) -> Result<(usize, Option<Value>), QueryError> {
    let i = varint::get(b, pos).ok_or_else(corrupt)? as usize;
    Ok((i, value(b, pos, materialize)?))
}

/// Decodes (or, unless `materialize`, skips) one typed value at `pos`.
fn value(b: &[u8], pos: &mut usize, materialize: bool) -> Result<Option<Value>, QueryError> {
    let ty = *b.get(*pos).ok_or_else(corrupt)?;
    *pos += 1;
    let v = match ty {
        T_FLOAT => {
            let bytes = b.get(*pos..*pos + 8).ok_or_else(corrupt)?;
            *pos += 8;
            Value::Float(f64::from_le_bytes(bytes.try_into().map_err(|_| corrupt())?))
        }
        T_INT => {
            let z = varint::get(b, pos).ok_or_else(corrupt)?;
            Value::Integer(((z >> 1) as i64) ^ -((z & 1) as i64))
        }
        T_UINT => Value::UInteger(varint::get(b, pos).ok_or_else(corrupt)?),
        T_BOOL => {
            let v = *b.get(*pos).ok_or_else(corrupt)?;
            *pos += 1;
            Value::Boolean(v != 0)
        }
        T_STR => {
            let len = varint::get(b, pos).ok_or_else(corrupt)? as usize;
            let end = pos.checked_add(len).ok_or_else(corrupt)?;
            let raw = b.get(*pos..end).ok_or_else(corrupt)?;
            *pos = end;
            if !materialize {
                return Ok(None);
            }
            Value::String(std::str::from_utf8(raw).map_err(|_| corrupt())?.to_string())
        }
        _ => return Err(corrupt()),
    };
    Ok(materialize.then_some(v))
}

/// Merges `newer` into `older` (field numbers ascending in both): fields of `newer` win.
pub fn merge_rows(older: Vec<(usize, Value)>, newer: Vec<(usize, Value)>) -> Vec<(usize, Value)> {
    let mut out = Vec::with_capacity(older.len() + newer.len());
    let (mut a, mut b) = (older.into_iter().peekable(), newer.into_iter().peekable());
    loop {
        match (a.peek(), b.peek()) {
            (Some(x), Some(y)) if x.0 < y.0 => out.extend(a.next()),
            (Some(x), Some(y)) if x.0 == y.0 => {
                a.next();
                out.extend(b.next());
            }
            (_, Some(_)) => out.extend(b.next()),
            (Some(_), None) => out.extend(a.next()),
            (None, None) => return out,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::Float),
            any::<i64>().prop_map(Value::Integer),
            any::<u64>().prop_map(Value::UInteger),
            any::<bool>().prop_map(Value::Boolean),
            ".{0,40}".prop_map(Value::String),
        ]
    }

    proptest! {
        #[test]
        fn rows_round_trip(fields in prop::collection::btree_map(0usize..300, value(), 0..20)) {
            let mut buf = Vec::new();
            encode_row(fields.iter().map(|(i, v)| (*i, v)), &mut buf);
            let back = decode_row(&buf).unwrap();
            prop_assert_eq!(back, fields.into_iter().collect::<Vec<_>>());
        }

        #[test]
        fn garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode_row(&bytes);
        }
    }

    #[test]
    fn merge_prefers_newer() {
        let older = vec![(0, Value::Integer(1)), (2, Value::Boolean(true))];
        let newer = vec![(1, Value::Float(2.0)), (2, Value::Boolean(false))];
        assert_eq!(
            merge_rows(older, newer),
            vec![(0, Value::Integer(1)), (1, Value::Float(2.0)), (2, Value::Boolean(false))]
        );
    }
}
