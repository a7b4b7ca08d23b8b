//! Filter pushdown: which predicates a scan (or a `DELETE`) applies itself.
//!
//! - `time` compared with a timestamp (`=`, `<`, `<=`, `>`, `>=`, `BETWEEN`) becomes key ranges
//!   (one series) or a time window with page pruning (all series).
//! - A tag compared with a string (`=`, `!=`, `IN`, `NOT IN`, `IS [NOT] NULL`), and `AND`/`OR`
//!   of those, becomes a set of series ids from the series index.
//!
//! Such predicates are applied exactly, so they are reported `Exact`; DataFusion applies every
//! other one itself.

use std::collections::BTreeSet;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{BinaryExpr, Expr, Operator};

use crate::model::hashspace::{hash_of_series, HashFilter};
use crate::model::schema::{Column, TableDef};
use crate::model::series::{SeriesIndex, TagValues};

/// Time bounds `[lo, hi)` in nanoseconds (`None`: unbounded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct TimeBounds {
    /// Inclusive lower bound.
    pub lo: Option<i64>,
    /// Exclusive upper bound.
    pub hi: Option<i64>,
}

impl TimeBounds {
    /// Narrows to the intersection with `other`.
    pub fn intersect(&mut self, other: TimeBounds) {
        self.lo = match (self.lo, other.lo) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        self.hi = match (self.hi, other.hi) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// True if no time can satisfy it.
    pub fn is_empty(&self) -> bool {
        matches!((self.lo, self.hi), (Some(lo), Some(hi)) if lo >= hi)
    }

    /// True if it does not restrict time.
    pub fn is_unbounded(&self) -> bool {
        self.lo.is_none() && self.hi.is_none()
    }
}

/// A predicate on tags: the series it keeps.
#[derive(Debug, Clone)]
pub enum TagPredicate {
    /// `tag = value` (also one arm of `IN`).
    Eq(usize, String),
    /// `tag != value`: series that have the tag with another value.
    NotEq(usize, String),
    /// `tag IS NULL` (`true`) or `IS NOT NULL` (`false`).
    Null(usize, bool),
    /// Both.
    And(Box<TagPredicate>, Box<TagPredicate>),
    /// Either.
    Or(Box<TagPredicate>, Box<TagPredicate>),
    /// Every series (`true`) or none: a predicate on a tag the table does not have.
    All(bool),
}

impl TagPredicate {
    fn matches(&self, tags: &TagValues) -> bool {
        let tag = |i: &usize| tags.get(*i);
        match self {
            TagPredicate::Eq(i, v) => tag(i) == Some(v.as_str()),
            TagPredicate::NotEq(i, v) => tag(i).is_some_and(|t| t != v),
            TagPredicate::Null(i, null) => tag(i).is_none() == *null,
            TagPredicate::And(a, b) => a.matches(tags) && b.matches(tags),
            TagPredicate::Or(a, b) => a.matches(tags) || b.matches(tags),
            TagPredicate::All(keep) => *keep,
        }
    }

    /// Series ids of `index` it keeps, ascending: `tag = value` from the index's postings,
    /// `AND` and `OR` by merging their sides, the rest by a pass over every series.
    pub fn series(&self, index: &SeriesIndex) -> Vec<u64> {
        match self {
            TagPredicate::Eq(i, v) => index.with_tag(*i, v),
            TagPredicate::And(a, b) => {
                let keep: BTreeSet<u64> = b.series(index).into_iter().collect();
                a.series(index).into_iter().filter(|id| keep.contains(id)).collect()
            }
            TagPredicate::Or(a, b) => {
                let set: BTreeSet<u64> =
                    a.series(index).into_iter().chain(b.series(index)).collect();
                set.into_iter().collect()
            }
            TagPredicate::All(false) => Vec::new(),
            _ => self.scan(index),
        }
    }

    /// [`TagPredicate::series`] by a pass over every series.
    fn scan(&self, index: &SeriesIndex) -> Vec<u64> {
        let set: BTreeSet<u64> =
            index.iter().filter(|(_, tags)| self.matches(tags)).map(|(id, _)| id).collect();
        set.into_iter().collect()
    }
}

/// What one conjunct of a filter is.
#[derive(Debug, Clone)]
pub enum Conjunct {
    /// A bound on `time`.
    Time(TimeBounds),
    /// A predicate on tags.
    Tags(TagPredicate),
}

fn column_of(def: &TableDef, e: &Expr) -> Option<Column> {
    match e {
        Expr::Column(c) => def.column(&c.name),
        _ => None,
    }
}

/// What may stand on the value side of a pushed-down comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operands {
    /// Literals only: what a scan applies.
    Literals,
    /// Literals, and placeholders of the literal's type: what a scan will apply once a
    /// prepared statement's values are bound (a placeholder stands for some non-null value;
    /// [`crate::front`] checks each run that the bound filters are taken over just the same).
    Placeholders,
}

/// A placeholder of `data_type`, if `operands` admits placeholders.
fn placeholder_of(e: &Expr, operands: Operands, is_type: impl Fn(&DataType) -> bool) -> bool {
    match e {
        Expr::Placeholder(p) if operands == Operands::Placeholders => {
            p.field.as_ref().is_some_and(|f| is_type(f.data_type()))
        }
        _ => false,
    }
}

/// A timestamp literal in nanoseconds (a timestamp placeholder reads as the epoch).
fn time_literal(e: &Expr, operands: Operands) -> Option<i64> {
    if placeholder_of(e, operands, |t| matches!(t, DataType::Timestamp(_, _))) {
        return Some(0);
    }
    let Expr::Literal(v, _) = e else { return None };
    match v {
        ScalarValue::TimestampNanosecond(Some(n), _) => Some(*n),
        ScalarValue::TimestampMicrosecond(Some(n), _) => n.checked_mul(1_000),
        ScalarValue::TimestampMillisecond(Some(n), _) => n.checked_mul(1_000_000),
        ScalarValue::TimestampSecond(Some(n), _) => n.checked_mul(1_000_000_000),
        _ => None,
    }
}

/// A string literal (a string placeholder reads as the empty string).
fn string_literal(e: &Expr, operands: Operands) -> Option<String> {
    let strings =
        |t: &DataType| matches!(t, DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8);
    if placeholder_of(e, operands, strings) {
        return Some(String::new());
    }
    let Expr::Literal(v, _) = e else { return None };
    match v {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::Utf8View(Some(s))
        | ScalarValue::LargeUtf8(Some(s)) => Some(s.clone()),
        _ => None,
    }
}

fn flip(op: Operator) -> Option<Operator> {
    Some(match op {
        Operator::Eq => Operator::Eq,
        Operator::NotEq => Operator::NotEq,
        Operator::Lt => Operator::Gt,
        Operator::LtEq => Operator::GtEq,
        Operator::Gt => Operator::Lt,
        Operator::GtEq => Operator::LtEq,
        _ => return None,
    })
}

fn time_bound(op: Operator, t: i64) -> Option<TimeBounds> {
    Some(match op {
        Operator::Eq => TimeBounds { lo: Some(t), hi: Some(t.checked_add(1)?) },
        Operator::Lt => TimeBounds { lo: None, hi: Some(t) },
        Operator::LtEq => TimeBounds { lo: None, hi: Some(t.checked_add(1)?) },
        Operator::Gt => TimeBounds { lo: Some(t.checked_add(1)?), hi: None },
        Operator::GtEq => TimeBounds { lo: Some(t), hi: None },
        _ => return None,
    })
}

/// Classifies `e` as a time bound or tag predicate of `def`, or `None` if the scan cannot
/// apply it exactly.
pub fn classify(def: &TableDef, e: &Expr) -> Option<Conjunct> {
    classify_with(def, e, Operands::Literals)
}

/// [`classify`], with `operands` on the value side of comparisons. The values of placeholders
/// are made up: the result only says whether the scan would apply `e`.
pub fn classify_with(def: &TableDef, e: &Expr, operands: Operands) -> Option<Conjunct> {
    let classify = |e: &Expr| classify_with(def, e, operands);
    let time_literal = |e: &Expr| time_literal(e, operands);
    let string_literal = |e: &Expr| string_literal(e, operands);
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
            Operator::And => match (classify(left)?, classify(right)?) {
                (Conjunct::Time(mut a), Conjunct::Time(b)) => {
                    a.intersect(b);
                    Some(Conjunct::Time(a))
                }
                (Conjunct::Tags(a), Conjunct::Tags(b)) => {
                    Some(Conjunct::Tags(TagPredicate::And(Box::new(a), Box::new(b))))
                }
                _ => None, // mixed: the caller splits conjunctions first
            },
            Operator::Or => match (classify(left)?, classify(right)?) {
                (Conjunct::Tags(a), Conjunct::Tags(b)) => {
                    Some(Conjunct::Tags(TagPredicate::Or(Box::new(a), Box::new(b))))
                }
                _ => None,
            },
            _ => {
                let (col, lit, op) = match (column_of(def, left), column_of(def, right)) {
                    (Some(c), None) => (c, right.as_ref(), *op),
                    (None, Some(c)) => (c, left.as_ref(), flip(*op)?),
                    _ => return None,
                };
                match col {
                    Column::Time => time_bound(op, time_literal(lit)?).map(Conjunct::Time),
                    Column::Tag(i) => {
                        let v = string_literal(lit)?;
                        match op {
                            Operator::Eq => Some(Conjunct::Tags(TagPredicate::Eq(i, v))),
                            Operator::NotEq => Some(Conjunct::Tags(TagPredicate::NotEq(i, v))),
                            _ => None,
                        }
                    }
                    Column::Field(_) => None,
                }
            }
        },
        Expr::Between(b) => {
            let Column::Time = column_of(def, &b.expr)? else { return None };
            let (lo, hi) = (time_literal(&b.low)?, time_literal(&b.high)?);
            if b.negated {
                return None;
            }
            Some(Conjunct::Time(TimeBounds { lo: Some(lo), hi: Some(hi.checked_add(1)?) }))
        }
        Expr::InList(l) => {
            let Column::Tag(i) = column_of(def, &l.expr)? else { return None };
            let values: Vec<String> = l.list.iter().map(string_literal).collect::<Option<_>>()?;
            let mut arms = values.into_iter().map(|v| {
                if l.negated {
                    TagPredicate::NotEq(i, v)
                } else {
                    TagPredicate::Eq(i, v)
                }
            });
            let first = arms.next()?;
            Some(Conjunct::Tags(arms.fold(first, |acc, p| {
                if l.negated {
                    TagPredicate::And(Box::new(acc), Box::new(p))
                } else {
                    TagPredicate::Or(Box::new(acc), Box::new(p))
                }
            })))
        }
        Expr::IsNull(inner) => match column_of(def, inner)? {
            Column::Tag(i) => Some(Conjunct::Tags(TagPredicate::Null(i, true))),
            _ => None,
        },
        Expr::IsNotNull(inner) => match column_of(def, inner)? {
            Column::Tag(i) => Some(Conjunct::Tags(TagPredicate::Null(i, false))),
            _ => None,
        },
        _ => None,
    }
}

/// The rows a scan reads: a time window and, if tags are constrained, a series set.
#[derive(Debug, Clone, Default)]
pub struct ScanFilter {
    /// Time window.
    pub time: TimeBounds,
    /// Tag predicates (all must hold).
    pub tags: Vec<TagPredicate>,
    /// The only series the scan may read, ascending, if it is limited to some (a cluster shard
    /// answering for part of the hashes it holds).
    pub only: Option<std::sync::Arc<Vec<u64>>>,
}

impl ScanFilter {
    /// Builds the filter from the conjuncts DataFusion pushed down, skipping those it cannot
    /// apply (DataFusion applies those).
    pub fn from_filters(def: &TableDef, filters: &[Expr]) -> ScanFilter {
        let mut f = ScanFilter::default();
        for e in filters {
            match classify(def, e) {
                Some(Conjunct::Time(t)) => f.time.intersect(t),
                Some(Conjunct::Tags(p)) => f.tags.push(p),
                None => {}
            }
        }
        f
    }

    /// The series to read, ascending; `None` for all of them.
    pub fn series(&self, index: &SeriesIndex) -> Option<Vec<u64>> {
        let Some((first, rest)) = self.tags.split_first() else {
            return self.only.as_ref().map(|only| only.to_vec());
        };
        let mut ids = first.series(index);
        for p in rest {
            let keep: BTreeSet<u64> = p.series(index).into_iter().collect();
            ids.retain(|id| keep.contains(id));
        }
        if let Some(only) = &self.only {
            ids.retain(|id| only.binary_search(id).is_ok());
        }
        Some(ids)
    }

    /// Limits the scan of table `def` to the series whose hash `hashes` holds.
    pub fn limit_to_hashes(&mut self, def: &TableDef, index: &SeriesIndex, hashes: &HashFilter) {
        let hash = |id: u64, tags: &_| index.hash(id).unwrap_or_else(|| hash_of_series(def, tags));
        let mut ids: Vec<u64> = index
            .iter()
            .filter(|(id, tags)| hashes.holds(hash(*id, tags)))
            .map(|(id, _)| id)
            .collect();
        ids.sort_unstable();
        self.only = Some(std::sync::Arc::new(ids));
    }
}

/// Splits `e` into its top-level conjuncts.
pub fn conjuncts(e: &Expr) -> Vec<&Expr> {
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::And, right }) => {
            let mut v = conjuncts(left);
            v.extend(conjuncts(right));
            v
        }
        other => vec![other],
    }
}

/// Splits `e` into its top-level disjuncts.
pub fn disjuncts(e: &Expr) -> Vec<&Expr> {
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::Or, right }) => {
            let mut v = disjuncts(left);
            v.extend(disjuncts(right));
            v
        }
        other => vec![other],
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::TagPredicate;
    use crate::model::series::{encode_series_key, SeriesIndex};

    fn predicate() -> impl Strategy<Value = TagPredicate> {
        let value = || prop_oneof![Just("a".to_string()), Just("b".into()), Just("c".into())];
        let leaf = prop_oneof![
            (0usize..3, value()).prop_map(|(i, v)| TagPredicate::Eq(i, v)),
            (0usize..3, value()).prop_map(|(i, v)| TagPredicate::NotEq(i, v)),
            (0usize..3, any::<bool>()).prop_map(|(i, n)| TagPredicate::Null(i, n)),
        ];
        leaf.prop_recursive(3, 12, 2, |inner| {
            prop_oneof![
                (inner.clone(), inner.clone())
                    .prop_map(|(a, b)| TagPredicate::And(Box::new(a), Box::new(b))),
                (inner.clone(), inner)
                    .prop_map(|(a, b)| TagPredicate::Or(Box::new(a), Box::new(b))),
            ]
        })
    }

    proptest! {
        /// Postings answer exactly what a pass over every series answers, through inserts,
        /// re-inserts with other values and removals.
        #[test]
        fn postings_match_a_full_pass(
            series in prop::collection::vec(
                (0u64..40, prop::collection::vec(prop::option::of(0u8..3), 3)),
                0..60,
            ),
            removals in prop::collection::vec(0u64..40, 0..10),
            preds in prop::collection::vec(predicate(), 1..8),
        ) {
            let mut idx = SeriesIndex::default();
            let name = |v: u8| ["a", "b", "c"][usize::from(v)].to_string();
            for (id, vals) in &series {
                let tags: super::TagValues = vals.iter().map(|v| v.map(name)).collect();
                let mut key = Vec::new();
                encode_series_key(tags.iter(), &mut key);
                idx.remove_id(*id);
                idx.insert(key, *id, tags);
            }
            for id in &removals {
                idx.remove_id(*id);
            }
            for p in &preds {
                prop_assert_eq!(p.series(&idx), p.scan(&idx), "{:?}", p);
            }
        }
    }
}
