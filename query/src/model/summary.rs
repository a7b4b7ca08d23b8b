//! Page summaries of row values: per field, how many rows have it and, for numbers, the
//! minimum, maximum and sum. The storage engine keeps one per page of one series
//! ([`RowSummarizer`]); aggregate scans ([`crate::sql`]'s partial aggregates) use the same
//! [`FieldStats`] to accumulate rows, so a page's summary and its rows add up alike.
//!
//! ```text
//! summary := fields varint | field*
//! field   := number varint | kind u8 | count varint | stats
//! stats   := float: min f64 | max f64 | sum f64 (LE)   integer: min | max | sum (zigzag varints)
//!            unsigned: min | max | sum (varints)       other (bool, string): nothing
//! ```
//!
//! Minimum and maximum order floats as `f64::total_cmp` does (as DataFusion's `min` and `max`
//! do); sums of integers wrap (as DataFusion's `sum` does), so adding up summaries in any order
//! gives the rows' sums exactly. Float sums may differ from a row-by-row sum in the last bits.

use ebb_storage::{PageSummarizer, RunKey};

use super::keys::{parse_row_key, CATALOG_TABLE};
use super::row::{decode_row, Value};
use super::varint;

/// What is known of one field over some rows (that have it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FieldStats {
    /// Rows with a value of the field.
    pub count: u64,
    /// Their minimum, maximum and sum (meaningless while `count` is 0).
    pub stats: Stats,
}

/// Minimum, maximum and sum of a field's values, by type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stats {
    /// Floats.
    Float {
        /// Smallest value.
        min: f64,
        /// Largest value.
        max: f64,
        /// Sum of the values.
        sum: f64,
    },
    /// Signed integers (the sum wraps).
    Integer {
        /// Smallest value.
        min: i64,
        /// Largest value.
        max: i64,
        /// Sum of the values.
        sum: i64,
    },
    /// Unsigned integers (the sum wraps).
    UInteger {
        /// Smallest value.
        min: u64,
        /// Largest value.
        max: u64,
        /// Sum of the values.
        sum: u64,
    },
    /// Booleans and strings: counted only.
    Other,
}

const K_FLOAT: u8 = 1;
const K_INT: u8 = 2;
const K_UINT: u8 = 3;
const K_OTHER: u8 = 4;

impl FieldStats {
    /// The stats of one value.
    pub fn of(v: &Value) -> FieldStats {
        let stats = match *v {
            Value::Float(x) => Stats::Float { min: x, max: x, sum: x },
            Value::Integer(x) => Stats::Integer { min: x, max: x, sum: x },
            Value::UInteger(x) => Stats::UInteger { min: x, max: x, sum: x },
            Value::Boolean(_) | Value::String(_) => Stats::Other,
        };
        FieldStats { count: 1, stats }
    }

    /// Adds `other` in; `false` (and `self` unchanged) if their types differ.
    pub fn merge(&mut self, other: &FieldStats) -> bool {
        if other.count == 0 {
            return true;
        }
        if self.count == 0 {
            *self = *other;
            return true;
        }
        let merged = match (self.stats, other.stats) {
            (Stats::Float { min, max, sum }, Stats::Float { min: a, max: b, sum: s }) => {
                Stats::Float {
                    min: if a.total_cmp(&min).is_lt() { a } else { min },
                    max: if b.total_cmp(&max).is_gt() { b } else { max },
                    sum: sum + s,
                }
            }
            (Stats::Integer { min, max, sum }, Stats::Integer { min: a, max: b, sum: s }) => {
                Stats::Integer { min: min.min(a), max: max.max(b), sum: sum.wrapping_add(s) }
            }
            (Stats::UInteger { min, max, sum }, Stats::UInteger { min: a, max: b, sum: s }) => {
                Stats::UInteger { min: min.min(a), max: max.max(b), sum: sum.wrapping_add(s) }
            }
            (Stats::Other, Stats::Other) => Stats::Other,
            _ => return false,
        };
        self.count += other.count;
        self.stats = merged;
        true
    }

    fn encode(&self, field: usize, out: &mut Vec<u8>) {
        varint::put(out, field as u64);
        let kind = match self.stats {
            Stats::Float { .. } => K_FLOAT,
            Stats::Integer { .. } => K_INT,
            Stats::UInteger { .. } => K_UINT,
            Stats::Other => K_OTHER,
        };
        out.push(kind);
        varint::put(out, self.count);
        match self.stats {
            Stats::Float { min, max, sum } => {
                for x in [min, max, sum] {
                    out.extend_from_slice(&x.to_le_bytes());
                }
            }
            Stats::Integer { min, max, sum } => {
                for x in [min, max, sum] {
                    varint::put(out, ((x << 1) ^ (x >> 63)) as u64);
                }
            }
            Stats::UInteger { min, max, sum } => {
                for x in [min, max, sum] {
                    varint::put(out, x);
                }
            }
            Stats::Other => {}
        }
    }

    fn decode(b: &[u8], pos: &mut usize) -> Option<(usize, FieldStats)> {
        let field = usize::try_from(varint::get(b, pos)?).ok()?;
        let kind = *b.get(*pos)?;
        *pos += 1;
        let count = varint::get(b, pos)?;
        let mut float = || -> Option<f64> {
            let x = f64::from_le_bytes(b.get(*pos..*pos + 8)?.try_into().ok()?);
            *pos += 8;
            Some(x)
        };
        let stats = match kind {
            K_FLOAT => Stats::Float { min: float()?, max: float()?, sum: float()? },
            K_INT => {
                let mut int = || varint::get(b, pos).map(|z| ((z >> 1) as i64) ^ -((z & 1) as i64));
                Stats::Integer { min: int()?, max: int()?, sum: int()? }
            }
            K_UINT => Stats::UInteger {
                min: varint::get(b, pos)?,
                max: varint::get(b, pos)?,
                sum: varint::get(b, pos)?,
            },
            K_OTHER => Stats::Other,
            _ => return None,
        };
        Some((field, FieldStats { count, stats }))
    }
}

/// The fields of a page's rows: `(field number, stats)`, field numbers ascending; a field no
/// row has is absent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RowsSummary {
    /// Per field.
    pub fields: Vec<(usize, FieldStats)>,
}

impl RowsSummary {
    /// The stats of field `i` (count 0 if no row has it).
    pub fn field(&self, i: usize) -> FieldStats {
        match self.fields.binary_search_by_key(&i, |(f, _)| *f) {
            Ok(at) => self.fields[at].1,
            Err(_) => FieldStats { count: 0, stats: Stats::Other },
        }
    }

    /// Adds the fields of one row; `false` if a field's type differs from earlier rows.
    pub fn add_row(&mut self, row: &[(usize, Value)]) -> bool {
        for (i, v) in row {
            let s = FieldStats::of(v);
            match self.fields.binary_search_by_key(i, |(f, _)| *f) {
                Ok(at) => {
                    if !self.fields[at].1.merge(&s) {
                        return false;
                    }
                }
                Err(at) => self.fields.insert(at, (*i, s)),
            }
        }
        true
    }

    /// Encodes it.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + self.fields.len() * 28);
        varint::put(&mut out, self.fields.len() as u64);
        for (i, s) in &self.fields {
            s.encode(*i, &mut out);
        }
        out
    }

    /// Decodes a summary; `None` if the bytes are not one.
    pub fn decode(b: &[u8]) -> Option<RowsSummary> {
        let mut pos = 0;
        let n = usize::try_from(varint::get(b, &mut pos)?).ok()?;
        let mut fields = Vec::with_capacity(n.min(b.len()));
        for _ in 0..n {
            let f = FieldStats::decode(b, &mut pos)?;
            if fields.last().is_some_and(|(last, _)| *last >= f.0) {
                return None;
            }
            fields.push(f);
        }
        (pos == b.len()).then_some(RowsSummary { fields })
    }
}

/// The span of time of a memtable run: rows of one series within one ten-minute slot (from
/// the epoch) are summarized together (once, and again after new rows arrive in it), so
/// aggregates by minutes of ten or more, by hour or over everything answer fresh rows from the
/// runs' summaries.
pub const RUN_SPAN_NS: i64 = 600 * 1_000_000_000;

/// Bytes of a row key before its time: the table and the series.
const SERIES_PREFIX: usize = 12;

/// Summarizes pages whose rows all belong to one series of one table; other pages (catalog
/// entries, pages across series) get no summary. Memtables keep summaries of runs of one
/// series over [`RUN_SPAN_NS`].
#[derive(Debug, Default)]
pub struct RowSummarizer;

impl PageSummarizer for RowSummarizer {
    fn run_of(&self, key: &[u8]) -> Option<RunKey> {
        let (table, _, time) = parse_row_key(key)?;
        if table == CATALOG_TABLE {
            return None;
        }
        Some(RunKey { prefix_len: SERIES_PREFIX, slot: time.div_euclid(RUN_SPAN_NS) })
    }

    fn summarize(&self, entries: &mut dyn Iterator<Item = (&[u8], &[u8])>) -> Option<Vec<u8>> {
        let mut series = None;
        let mut summary = RowsSummary::default();
        for (k, v) in entries {
            let (table, sid, _) = parse_row_key(k)?;
            if table == CATALOG_TABLE || series.is_some_and(|s| s != (table, sid)) {
                return None;
            }
            series = Some((table, sid));
            if !summary.add_row(&decode_row(v).ok()?) {
                return None;
            }
        }
        series?;
        Some(summary.encode())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::keys::row_key;
    use crate::model::row::encode_row;
    use proptest::prelude::*;

    /// A row of fields 0..4, field `i` of type `i` (float, integer, unsigned, boolean).
    fn row() -> impl Strategy<Value = Vec<(usize, Value)>> {
        (
            prop::option::of(any::<f64>()),
            prop::option::of(any::<i64>()),
            prop::option::of(any::<u64>()),
            prop::option::of(any::<bool>()),
        )
            .prop_map(|(f, i, u, b)| {
                let values = [
                    f.map(Value::Float),
                    i.map(Value::Integer),
                    u.map(Value::UInteger),
                    b.map(Value::Boolean),
                ];
                values.into_iter().enumerate().filter_map(|(n, v)| Some((n, v?))).collect()
            })
    }

    proptest! {
        /// A summary decodes to what was added, and adding summaries of parts gives the
        /// summary of the whole (exactly, floats aside).
        #[test]
        fn summaries_round_trip_and_add_up(
            rows in prop::collection::vec(row(), 1..30),
            cut in 0usize..30,
        ) {
            let mut whole = RowsSummary::default();
            prop_assert!(rows.iter().all(|r| whole.add_row(r)));
            let back = RowsSummary::decode(&whole.encode()).map(|s| s.encode());
            prop_assert_eq!(back, Some(whole.encode()));
            let cut = cut.min(rows.len());
            let (mut a, mut b) = (RowsSummary::default(), RowsSummary::default());
            rows[..cut].iter().for_each(|r| { a.add_row(r); });
            rows[cut..].iter().for_each(|r| { b.add_row(r); });
            for i in 0..4 {
                let mut f = a.field(i);
                prop_assert!(f.merge(&b.field(i)));
                let w = whole.field(i);
                prop_assert_eq!(f.count, w.count);
                match (f.stats, w.stats) {
                    (Stats::Float { min, max, .. }, Stats::Float { min: m, max: x, .. }) => {
                        prop_assert_eq!(min.to_bits(), m.to_bits());
                        prop_assert_eq!(max.to_bits(), x.to_bits());
                    }
                    (s, t) => prop_assert_eq!(s, t),
                }
            }
        }

        #[test]
        fn garbage_decodes_stably_or_not_at_all(bytes in prop::collection::vec(any::<u8>(), 0..80)) {
            if let Some(s) = RowsSummary::decode(&bytes) {
                let again = RowsSummary::decode(&s.encode()).map(|t| t.encode());
                prop_assert_eq!(again, Some(s.encode()));
            }
        }
    }

    #[test]
    fn only_pages_of_one_series_are_summarized() {
        let row = |x: f64| {
            let mut v = Vec::new();
            encode_row([(0usize, &Value::Float(x))].into_iter(), &mut v);
            v
        };
        let (a, b, c) = (row_key(1, 7, 10), row_key(1, 7, 20), row_key(1, 8, 5));
        let (va, vb) = (row(1.5), row(-2.0));
        let one = RowSummarizer.summarize(&mut [(&a[..], &va[..]), (&b[..], &vb[..])].into_iter());
        let s = RowsSummary::decode(&one.unwrap()).unwrap();
        assert_eq!(
            s.field(0),
            FieldStats { count: 2, stats: Stats::Float { min: -2.0, max: 1.5, sum: -0.5 } }
        );
        assert_eq!(s.field(1).count, 0);
        let two = RowSummarizer.summarize(&mut [(&a[..], &va[..]), (&c[..], &vb[..])].into_iter());
        assert_eq!(two, None);
        let catalog = row_key(CATALOG_TABLE, 1, 1);
        assert_eq!(RowSummarizer.summarize(&mut [(&catalog[..], &va[..])].into_iter()), None);
    }
}
