//! `SELECT DISTINCT ON (tags) ... ORDER BY tags, time DESC` (the newest row of each group of
//! series, TSBS's `lastpoint`) reads one row per series.
//!
//! The newest row of a group of series is the newest of its series' newest rows, so the
//! `DISTINCT ON` needs only those: [`NewestPerSeries`] makes the table scan under such a
//! statement produce each series' newest row alone (one look-up per series where the newest
//! time of the series is known, else one pass over the series' keys that decodes only its last
//! row), instead of every row sorted; over a cluster, each shard sends its series' newest rows.

use std::sync::Arc;

use datafusion::common::tree_node::Transformed;
use datafusion::datasource::{provider_as_source, source_as_provider};
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{Distinct, DistinctOn, Expr, LogicalPlan, TableScan};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

use super::table::ShardTable;
use crate::model::TIME_COLUMN;

/// The optimizer rule: runs before `DISTINCT ON` is turned into an aggregate.
#[derive(Debug, Default)]
pub struct NewestPerSeries;

impl OptimizerRule for NewestPerSeries {
    fn name(&self) -> &str {
        "ebb_newest_per_series"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::TopDown)
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> DfResult<Transformed<LogicalPlan>> {
        let LogicalPlan::Distinct(Distinct::On(on)) = &plan else {
            return Ok(Transformed::no(plan));
        };
        let Some(input) = newest_input(on) else {
            return Ok(Transformed::no(plan));
        };
        let on = DistinctOn::try_new(
            on.on_expr.clone(),
            on.select_expr.clone(),
            on.sort_expr.clone(),
            Arc::new(input),
        )?;
        Ok(Transformed::yes(LogicalPlan::Distinct(Distinct::On(on))))
    }
}

/// The scan `on` reads, made to read each series' newest row only, if `on` is a `DISTINCT ON`
/// of tag columns ordered by them and then by time descending, straight over an unfiltered
/// scan of an EbbDB table.
fn newest_input(on: &DistinctOn) -> Option<LogicalPlan> {
    let LogicalPlan::TableScan(scan) = on.input.as_ref() else { return None };
    if !scan.filters.is_empty() || scan.fetch.is_some() {
        return None;
    }
    let provider = source_as_provider(&scan.source).ok()?;
    let table = provider.downcast_ref::<ShardTable>()?;
    if table.newest_only() {
        return None;
    }
    let def = table.def();
    let is_tag = |e: &Expr| matches!(e, Expr::Column(c) if def.tags.contains(&c.name));
    if !on.on_expr.iter().all(is_tag) {
        return None;
    }
    let sort = on.sort_expr.as_ref()?;
    let (last, leading) = sort.split_last()?;
    if leading.len() != on.on_expr.len()
        || leading.iter().zip(&on.on_expr).any(|(s, e)| s.expr != *e)
    {
        return None;
    }
    if last.asc || !matches!(&last.expr, Expr::Column(c) if c.name == TIME_COLUMN) {
        return None;
    }
    let source = provider_as_source(Arc::new(table.newest_per_series()));
    Some(LogicalPlan::TableScan(TableScan { source, ..scan.clone() }))
}
