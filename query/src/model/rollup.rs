//! Rollups (`CREATE MATERIALIZED VIEW r AS SELECT date_bin(...), tags, agg(field) FROM t GROUP
//! BY ...`): what a rollup computes, and the partial aggregates it stores.
//!
//! A rollup is stored as a table of the source's database whose series are the source's series
//! (the same tags, in the same order, so the same canonical keys and cluster hashes) and whose
//! rows are one per series and bucket, holding mergeable partial aggregates: a count, a sum, a
//! minimum, a maximum, or for `avg` a sum and a count. Grouping by the rollup's tags happens
//! when it is read, by merging the partials (see `crate::sql::rollup`). Keeping partials per
//! source series is what lets deletes and erasure reach a rollup as they reach its source: an
//! `ERASE` of a tag value removes the rollup's series carrying it, so no aggregate keeps a
//! contribution of the erased series, whatever the rollup groups by.
//!
//! Buckets are recomputed from the source when it changes: a write, a `DELETE` or a late point
//! leaves a dirty mark ([`Mark`]) in the same engine batch as the change, so marks survive
//! restarts and travel through the Raft log with the rows; the maintainer
//! (`Database::maintain_rollups`) recomputes each marked bucket and removes its marks.

use serde::{Deserialize, Serialize};

use super::row::Value;
use super::schema::{FieldType, TableDef};
use crate::error::QueryError;

/// The stored partial column holding the newest source time a bucket's partials include: a
/// later change whose points are all newer is merged into them instead of recomputed.
pub const UPTO_COLUMN: &str = ".upto";

/// An aggregate a rollup keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Agg {
    /// `count(*)` (no field) or `count(field)`.
    Count,
    /// `sum(field)`.
    Sum,
    /// `min(field)`.
    Min,
    /// `max(field)`.
    Max,
    /// `avg(field)`.
    Avg,
}

impl Agg {
    /// The aggregate of SQL function `name`, if a rollup can keep it.
    pub fn from_name(name: &str) -> Option<Agg> {
        Some(match name.to_ascii_lowercase().as_str() {
            "count" => Agg::Count,
            "sum" => Agg::Sum,
            "min" => Agg::Min,
            "max" => Agg::Max,
            "avg" | "mean" => Agg::Avg,
            _ => return None,
        })
    }

    /// Its SQL name.
    pub fn name(self) -> &'static str {
        match self {
            Agg::Count => "count",
            Agg::Sum => "sum",
            Agg::Min => "min",
            Agg::Max => "max",
            Agg::Avg => "avg",
        }
    }
}

/// One output column of a rollup: `agg(field) AS name`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RollupOutput {
    /// The column's name.
    pub name: String,
    /// The aggregate.
    pub agg: Agg,
    /// The source field (`None`: `count(*)`).
    pub field: Option<String>,
}

impl RollupOutput {
    /// The stored partial columns of this output.
    pub fn partial_names(&self) -> Vec<String> {
        match self.agg {
            Agg::Avg => vec![format!("{}.sum", self.name), format!("{}.count", self.name)],
            _ => vec![self.name.clone()],
        }
    }
}

/// What a rollup computes: buckets of its source's rows, grouped by tags, aggregated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RollupDef {
    /// The source table (of the rollup's own database).
    pub source: String,
    /// Bucket width (ns, > 0).
    pub bucket_ns: i64,
    /// Where buckets are measured from (ns since the epoch).
    pub origin_ns: i64,
    /// Name of the bucket column as the rollup is read.
    pub time_name: String,
    /// Tags it groups by, in output order.
    pub group: Vec<String>,
    /// Aggregates, in output order.
    pub outputs: Vec<RollupOutput>,
    /// Columns in the order they are read.
    pub order: Vec<OutputColumn>,
    /// The defining `SELECT`, as written.
    pub definition: String,
}

/// A column of a rollup as it is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OutputColumn {
    /// The bucket start.
    Bucket,
    /// Group tag number `i`.
    Tag(usize),
    /// Aggregate number `i`.
    Output(usize),
}

impl RollupDef {
    /// The start of the bucket holding time `t`.
    pub fn bucket_of(&self, t: i64) -> i64 {
        let diff = i128::from(t) - i128::from(self.origin_ns);
        let w = i128::from(self.bucket_ns);
        let start = i128::from(self.origin_ns) + diff.div_euclid(w) * w;
        start.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }

    /// The end (exclusive) of the bucket starting at `b`; `None` past the largest time.
    pub fn bucket_end(&self, b: i64) -> Option<i64> {
        b.checked_add(self.bucket_ns)
    }

    /// The stored partial columns, with their types, for a source whose fields are `source`'s.
    pub fn partial_columns(
        &self,
        source: &TableDef,
    ) -> Result<Vec<(String, FieldType)>, QueryError> {
        let mut out = Vec::new();
        for o in &self.outputs {
            let ty = match &o.field {
                None => None,
                Some(f) => {
                    Some(source.fields.iter().find(|(n, _)| n == f).map(|(_, t)| *t).ok_or_else(
                        || QueryError::invalid(format!("{} has no field {f:?}", source.name)),
                    )?)
                }
            };
            let numeric =
                matches!(ty, Some(FieldType::Float | FieldType::Integer | FieldType::UInteger));
            let names = o.partial_names();
            match (o.agg, ty) {
                (Agg::Count, _) => out.push((names[0].clone(), FieldType::Integer)),
                (Agg::Sum | Agg::Min | Agg::Max, Some(t)) if numeric => {
                    out.push((names[0].clone(), t))
                }
                (Agg::Avg, Some(_)) if numeric => {
                    out.push((names[0].clone(), FieldType::Float));
                    out.push((names[1].clone(), FieldType::Integer));
                }
                (agg, t) => {
                    return Err(QueryError::invalid(format!(
                        "a rollup cannot keep {}({}) of a {} field; sum, min, max and avg take \
                         numeric fields",
                        agg.name(),
                        o.field.as_deref().unwrap_or("*"),
                        t.map_or("missing", FieldType::name)
                    )))
                }
            }
        }
        out.push((UPTO_COLUMN.to_string(), FieldType::Integer));
        Ok(out)
    }

    /// Accumulators for one bucket of one series of `source`.
    pub fn accumulators(&self, source: &TableDef) -> Vec<Acc> {
        self.outputs
            .iter()
            .map(|o| Acc {
                agg: o.agg,
                field: o
                    .field
                    .as_ref()
                    .and_then(|f| source.fields.iter().position(|(n, _)| n == f)),
                count: 0,
                value: None,
            })
            .collect()
    }
}

/// The partial aggregate of one output over one bucket of one series.
#[derive(Debug, Clone)]
pub struct Acc {
    agg: Agg,
    /// The source field number (`None`: every row counts).
    field: Option<usize>,
    count: i64,
    /// Sum, minimum or maximum so far (sums of integers are kept wide, then saturated).
    value: Option<Wide>,
}

#[derive(Debug, Clone, Copy)]
enum Wide {
    F(f64),
    I(i128),
}

impl Acc {
    /// Takes one source row's fields.
    pub fn add(&mut self, row: &[(usize, Value)]) {
        let Some(f) = self.field else {
            self.count += 1;
            return;
        };
        let Some((_, v)) = row.iter().find(|(i, _)| *i == f) else { return };
        let wide = match (self.agg, v) {
            (Agg::Avg, Value::Integer(n)) => Wide::F(*n as f64),
            (Agg::Avg, Value::UInteger(n)) => Wide::F(*n as f64),
            (_, Value::Float(x)) if x.is_nan() => return,
            (_, Value::Float(x)) => Wide::F(*x),
            (_, Value::Integer(n)) => Wide::I(i128::from(*n)),
            (_, Value::UInteger(n)) => Wide::I(i128::from(*n)),
            _ => {
                self.count += 1;
                return;
            }
        };
        self.count += 1;
        self.value = Some(match (self.value, wide, self.agg) {
            (None, w, _) => w,
            (Some(Wide::F(a)), Wide::F(b), Agg::Sum | Agg::Avg) => Wide::F(a + b),
            (Some(Wide::I(a)), Wide::I(b), Agg::Sum) => Wide::I(a.saturating_add(b)),
            (Some(Wide::F(a)), Wide::F(b), Agg::Min) => Wide::F(a.min(b)),
            (Some(Wide::F(a)), Wide::F(b), Agg::Max) => Wide::F(a.max(b)),
            (Some(Wide::I(a)), Wide::I(b), Agg::Min) => Wide::I(a.min(b)),
            (Some(Wide::I(a)), Wide::I(b), Agg::Max) => Wide::I(a.max(b)),
            (Some(a), _, _) => a,
        });
    }

    /// Starts from the stored partial values `stored` of this output (its partial columns).
    pub fn resume(&mut self, stored: &[Option<Value>]) {
        let wide = |v: &Option<Value>| match v {
            Some(Value::Float(x)) => Some(Wide::F(*x)),
            Some(Value::Integer(n)) => Some(Wide::I(i128::from(*n))),
            Some(Value::UInteger(n)) => Some(Wide::I(i128::from(*n))),
            _ => None,
        };
        let count = |v: Option<&Option<Value>>| match v {
            Some(Some(Value::Integer(n))) => *n,
            _ => 0,
        };
        match self.agg {
            Agg::Count => self.count = count(stored.first()),
            Agg::Avg => {
                self.value = stored.first().and_then(wide);
                self.count = count(stored.get(1));
            }
            _ => self.value = stored.first().and_then(wide),
        }
    }

    /// The stored partial values, typed as `types` (this output's partial columns) say.
    pub fn finish(&self, types: &[FieldType]) -> Vec<Option<Value>> {
        let typed = |w: Wide, t: FieldType| match (w, t) {
            (Wide::F(x), _) => Value::Float(x),
            (Wide::I(n), FieldType::UInteger) => {
                Value::UInteger(n.clamp(0, i128::from(u64::MAX)) as u64)
            }
            (Wide::I(n), FieldType::Float) => Value::Float(n as f64),
            (Wide::I(n), _) => {
                Value::Integer(n.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64)
            }
        };
        match self.agg {
            Agg::Count => vec![Some(Value::Integer(self.count))],
            Agg::Avg => vec![
                self.value.map(|w| typed(w, FieldType::Float)),
                Some(Value::Integer(self.count)),
            ],
            _ => vec![self
                .value
                .map(|w| typed(w, types.first().copied().unwrap_or(FieldType::Float)))],
        }
    }
}

/// A dirty mark: a bucket of a rollup some change touched. Each change leaves its own marks (a
/// key with its own nonce), so the maintainer removes exactly the marks it read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mark {
    /// The bucket starting at `bucket` of the source series the mark's value lists
    /// ([`encode_touched`]).
    Series {
        /// The rollup's table id.
        rollup: u32,
        /// The bucket start.
        bucket: i64,
    },
    /// The bucket starting at `bucket` of every source series (after a time-window delete).
    Window {
        /// The rollup's table id.
        rollup: u32,
        /// The bucket start.
        bucket: i64,
    },
}

/// How a change touched one series in a bucket: it wrote points from time `since` on
/// (`Some`), or removed rows (`None`), after which the bucket is recomputed whole.
pub type Touched = (u64, Option<i64>);

/// The value of a [`Mark::Series`]: `(series u64, flag u8, since i64)` per series, big-endian;
/// flag 1 if `since` is given.
pub fn encode_touched(touched: &[Touched]) -> Vec<u8> {
    let mut out = Vec::with_capacity(touched.len() * 17);
    for &(series, since) in touched {
        out.extend_from_slice(&series.to_be_bytes());
        out.push(u8::from(since.is_some()));
        out.extend_from_slice(&since.unwrap_or_default().to_be_bytes());
    }
    out
}

/// The inverse of [`encode_touched`]; `None` if `b` is not such a value.
pub fn decode_touched(b: &[u8]) -> Option<Vec<Touched>> {
    if !b.len().is_multiple_of(17) {
        return None;
    }
    b.chunks_exact(17)
        .map(|c| {
            let series = u64::from_be_bytes(c[..8].try_into().ok()?);
            let since = i64::from_be_bytes(c[9..].try_into().ok()?);
            Some((series, (c[8] == 1).then_some(since)))
        })
        .collect()
}
