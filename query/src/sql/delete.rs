//! `DELETE FROM t WHERE ...`: which predicates EbbDB can execute as deletes, and how.
//!
//! The predicate is split into disjuncts (`OR`), each a conjunction (`AND`) of tag predicates
//! and time bounds. A disjunct with tag predicates becomes per-series key ranges (GLORAN range
//! deletes, `[(t, s, lo), (t, s, hi)) x [0, seq)`); one with only a time range becomes one
//! time-window delete for the table (KiWi page drops). Anything else is refused: field
//! predicates, subqueries, functions of `time`, and a missing `WHERE` (which would delete every
//! row: `DROP TABLE` says that explicitly).

use datafusion::common::tree_node::TreeNode;
use datafusion::logical_expr::Expr;

use super::pushdown::{classify, conjuncts, disjuncts, Conjunct, ScanFilter, TimeBounds};
use super::shard::TagFilter;
use crate::db::{Database, DeleteTarget};
use crate::error::{QueryError, Result};
use crate::model::schema::{Column, TableDef};

/// One disjunct of a `DELETE` predicate: a time window and tag predicates by tag name, all of
/// which a deleted row meets. It travels to every shard, each resolving the tag names against
/// its own definition of the table.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeletePart {
    /// The time window.
    pub time: TimeBounds,
    /// Tag predicates (none: every series).
    pub tags: Vec<TagFilter>,
}

/// The parts of the deletes `predicate` asks for on table `def` (empty: it selects nothing).
/// Refused: no predicate, one that would remove every row, and predicates a delete cannot
/// execute (fields, functions of `time`, subqueries).
pub fn delete_parts(def: &TableDef, predicate: Option<&Expr>) -> Result<Vec<DeletePart>> {
    let Some(predicate) = predicate else {
        return Err(QueryError::invalid(format!(
            "DELETE without WHERE would remove every row of {}; use DROP TABLE, or give a time \
             range (for example WHERE time < now())",
            def.name
        )));
    };
    let mut parts = Vec::new();
    for d in disjuncts(predicate) {
        let mut filter = ScanFilter::default();
        for c in conjuncts(d) {
            match classify(def, c) {
                Some(Conjunct::Time(t)) => filter.time.intersect(t),
                Some(Conjunct::Tags(p)) => filter.tags.push(p),
                None => return Err(refusal(def, c)),
            }
        }
        if filter.time.is_empty() {
            continue; // selects nothing
        }
        if filter.tags.is_empty() && filter.time.is_unbounded() {
            return Err(QueryError::invalid(
                "this DELETE would remove every row; use DROP TABLE, or give a time range",
            ));
        }
        let tags = filter.tags.iter().map(|p| TagFilter::named(p, def)).collect();
        parts.push(DeletePart { time: filter.time, tags });
    }
    Ok(parts)
}

/// What `parts` delete of table `def` in `db`: a time window across the table for a part
/// without tag predicates, else the ranges of the series it selects (tags resolved against
/// this database's definition of the table).
pub fn delete_targets(db: &Database, def: &TableDef, parts: &[DeletePart]) -> Vec<DeleteTarget> {
    let mut targets = Vec::new();
    for part in parts {
        if part.tags.is_empty() {
            targets.push(DeleteTarget::TimeWindow { t_lo: part.time.lo, t_hi: part.time.hi });
            continue;
        }
        let filter = ScanFilter {
            time: part.time,
            tags: part.tags.iter().map(|t| t.resolve(def)).collect(),
            ..ScanFilter::default()
        };
        let series = db.catalog().with_series(def.id, |idx| filter.series(idx)).unwrap_or_default();
        if !series.is_empty() {
            targets.push(DeleteTarget::Series { series, t_lo: part.time.lo, t_hi: part.time.hi });
        }
    }
    targets
}

/// Why `e` cannot be part of a `DELETE` predicate.
fn refusal(def: &TableDef, e: &Expr) -> QueryError {
    let mut fields = Vec::new();
    let mut time_inside = false;
    let _ = e.apply(|x| {
        if let Expr::Column(c) = x {
            match def.column(&c.name) {
                Some(Column::Field(_)) => fields.push(c.name.clone()),
                Some(Column::Time) => time_inside = true,
                _ => {}
            }
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    });
    let why = if !fields.is_empty() {
        format!(
            "it filters on field {}; DELETE can filter on tags and time only",
            fields.join(", ")
        )
    } else if matches!(e, Expr::ScalarSubquery(_) | Expr::InSubquery(_) | Expr::Exists(_)) {
        "subqueries are not supported in DELETE".to_string()
    } else if time_inside {
        "time must be compared directly with a constant (=, <, <=, >, >=, BETWEEN), not through \
         a function or in an OR with other conditions"
            .to_string()
    } else {
        "DELETE supports tag predicates (=, !=, IN, IS NULL) and time ranges joined by AND/OR"
            .to_string()
    };
    QueryError::Unsupported(format!("cannot delete WHERE {}: {why}", as_sql(e)))
}

/// `e` as SQL text, columns unqualified (`"usage" > 5.0`, not `cpu.usage > Float64(5)`).
fn as_sql(e: &Expr) -> String {
    use datafusion::common::tree_node::{Transformed, TreeNode};
    let plain = e.clone().transform(|x| {
        Ok(match x {
            Expr::Column(c) => Transformed::yes(Expr::Column(c.name.into())),
            other => Transformed::no(other),
        })
    });
    plain
        .ok()
        .and_then(|p| {
            datafusion::sql::unparser::Unparser::default()
                .with_pretty(true)
                .expr_to_sql(&p.data)
                .ok()
        })
        .map_or_else(|| e.to_string(), |sql| sql.to_string())
}
