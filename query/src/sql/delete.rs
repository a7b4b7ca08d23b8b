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

use super::pushdown::{classify, conjuncts, disjuncts, Conjunct, ScanFilter};
use crate::db::{Database, DeleteTarget};
use crate::error::{QueryError, Result};
use crate::model::schema::{Column, TableDef};

/// The deletes `predicate` asks for on table `def`.
pub fn delete_targets(
    db: &Database,
    def: &TableDef,
    predicate: Option<&Expr>,
) -> Result<Vec<DeleteTarget>> {
    let Some(predicate) = predicate else {
        return Err(QueryError::invalid(format!(
            "DELETE without WHERE would remove every row of {}; use DROP TABLE, or give a time \
             range (for example WHERE time < now())",
            def.name
        )));
    };
    let mut targets = Vec::new();
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
        if filter.tags.is_empty() {
            if filter.time.is_unbounded() {
                return Err(QueryError::invalid(
                    "this DELETE would remove every row; use DROP TABLE, or give a time range",
                ));
            }
            targets.push(DeleteTarget::TimeWindow { t_lo: filter.time.lo, t_hi: filter.time.hi });
        } else {
            let series =
                db.catalog().with_series(def.id, |idx| filter.series(idx)).unwrap_or_default();
            if !series.is_empty() {
                targets.push(DeleteTarget::Series {
                    series,
                    t_lo: filter.time.lo,
                    t_hi: filter.time.hi,
                });
            }
        }
    }
    Ok(targets)
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
    QueryError::Unsupported(format!("cannot delete WHERE {e}: {why}"))
}
