//! Aggregates computed in the scan: DataFusion's partial aggregation of `min`, `max`, `sum`,
//! `count` and `avg` over a table's fields (and `min` and `max` of time), grouped by tags and a
//! fixed-width `date_bin` of time, replaced by a scan that aggregates as it reads.
//!
//! Rows arrive in key order (series, then time), so the scan folds each (series, bucket) run
//! into one partial row without a hash table, and tags (a function of the series) are looked up
//! once per run. A page whose rows all fall into one (series, bucket) is not read at all when
//! the engine can answer it from its summary ([`crate::model::summary`], kept per page by the
//! storage engine; see [`ebb_storage::Engine::scan_summarized`] for when it can). DataFusion's
//! final aggregation above merges the partial rows as it merges its own, so the answer is the
//! same (float sums aside, whose order of addition differs).
//!
//! The rule applies when the partial aggregate reads the table scan directly (every filter
//! pushed into the scan exactly), no aggregate is `DISTINCT`, filtered or ordered, and each
//! argument is a field column (or `count(*)`, or time for `min` and `max`); `avg` over integers
//! (a cast) is left as is.

mod exec;

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::common::ScalarValue;
use datafusion::config::ConfigOptions;
use datafusion::error::Result as DfResult;
use datafusion::physical_expr::expressions::{Column as ColumnExpr, Literal};
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, ExecutionPlan, Partitioning, ReplaceChildrenOptions,
};

use super::scan_exec::ScanExec;
use crate::error::QueryError;
use crate::model::schema::{Column, FieldType};

pub(crate) use exec::PartialAggregateExec;

/// The physical optimizer rule.
#[derive(Debug, Default)]
pub(crate) struct PartialAggregates;

impl PhysicalOptimizerRule for PartialAggregates {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let plan = plan
            .transform_down(|p| {
                Ok(match rewrite(&p) {
                    Some(new) => Transformed::yes(new),
                    None => Transformed::no(p),
                })
            })
            .data()?;
        plan.transform_down(|p| {
            Ok(match newest_buckets(&p) {
                Some(new) => Transformed::yes(new),
                None => Transformed::no(p),
            })
        })
        .data()
    }

    fn name(&self) -> &str {
        "ebb_partial_aggregates"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

fn rewrite(plan: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
    let agg = plan.downcast_ref::<AggregateExec>()?;
    if *agg.mode() != AggregateMode::Partial {
        return None;
    }
    let scan = scan_under(agg.input())?;
    let first = scan.parts().first()?;
    if first.newest_only || first.limit.is_some() {
        return None;
    }
    let spec = Spec::of(agg, scan)?;
    Some(Arc::new(PartialAggregateExec::new(agg.schema(), Arc::new(spec), scan.parts().to_vec())))
}

/// `ORDER BY <bucket> DESC LIMIT k` over the final aggregate of a partial aggregate scan
/// grouped by that bucket: the first `k` rows hold only the `k` newest buckets with rows (each
/// such bucket has at least one group), so each partition reports only its `k` newest
/// buckets (the `k` newest overall are among them). Between the sort and the final aggregate
/// only projections may stand (a `HAVING` filter could empty a bucket).
fn newest_buckets(plan: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
    let sort = plan.downcast_ref::<SortExec>()?;
    let k = sort.fetch()?;
    let first = sort.expr().first();
    if !first.options.descending {
        return None;
    }
    let col = first.expr.downcast_ref::<ColumnExpr>()?.index();
    let input = with_newest(sort.input(), col, k, false)?;
    replace_child(plan, input)
}

/// `plan` with the partial aggregate scan under it reporting only its `k` newest buckets,
/// where output column `col` of `plan` is that scan's bucket; `None` if it is not.
fn with_newest(
    plan: &Arc<dyn ExecutionPlan>,
    col: usize,
    k: usize,
    below_final: bool,
) -> Option<Arc<dyn ExecutionPlan>> {
    if let Some(p) = plan.downcast_ref::<PartialAggregateExec>() {
        let is_bucket = matches!(p.spec().groups.get(col), Some(GroupCol::Bucket { .. }));
        return (below_final && is_bucket).then(|| Arc::new(p.with_latest(k)) as _);
    }
    let (child, col, below_final) = if let Some(p) = plan.downcast_ref::<ProjectionExec>() {
        if below_final {
            return None;
        }
        let e = &p.expr().get(col)?.expr;
        (p.input(), e.downcast_ref::<ColumnExpr>()?.index(), false)
    } else if let Some(a) = plan.downcast_ref::<AggregateExec>() {
        let final_mode = matches!(a.mode(), AggregateMode::Final | AggregateMode::FinalPartitioned);
        if below_final || !final_mode || !a.group_expr().is_single() {
            return None;
        }
        let (e, _) = a.group_expr().expr().get(col)?;
        (a.input(), e.downcast_ref::<ColumnExpr>()?.index(), true)
    } else if let Some(r) = plan.downcast_ref::<RepartitionExec>() {
        (r.input(), col, below_final)
    } else if let Some(c) = plan.downcast_ref::<CoalescePartitionsExec>() {
        (c.input(), col, below_final)
    } else {
        return None;
    };
    let new = with_newest(child, col, k, below_final)?;
    replace_child(plan, new)
}

/// `plan` with its one child replaced.
fn replace_child(
    plan: &Arc<dyn ExecutionPlan>,
    child: Arc<dyn ExecutionPlan>,
) -> Option<Arc<dyn ExecutionPlan>> {
    let opts = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
    plan.clone().replace_children(vec![child], opts).ok()
}

/// The table scan `plan` is, seen through round-robin repartitioning (which only spreads
/// batches over partitions).
fn scan_under(plan: &Arc<dyn ExecutionPlan>) -> Option<&ScanExec> {
    if let Some(s) = plan.downcast_ref::<ScanExec>() {
        return Some(s);
    }
    let r = plan.downcast_ref::<RepartitionExec>()?;
    match r.partitioning() {
        Partitioning::RoundRobinBatch(_) => scan_under(r.input()),
        _ => None,
    }
}

/// One group column of the partial aggregate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum GroupCol {
    /// `date_bin(stride, time, origin)`, in nanoseconds.
    Bucket { stride: i64, origin: i64 },
    /// Tag column `i` of the table.
    Tag(usize),
}

/// One state column of a partial aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Min,
    Max,
    Sum,
    /// Rows with the field (`count(field)`), or all rows (`count(*)`).
    Count,
    /// The earliest time (`min(time)`).
    MinTime,
    /// The latest time (`max(time)`).
    MaxTime,
}

/// One state column: its role and the aggregated field (`None`: `count(*)`), as an index into
/// [`Spec::fields`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct State {
    pub role: Role,
    pub field: Option<usize>,
    pub ty: DataType,
}

/// What the partial aggregate computes.
#[derive(Debug)]
pub(crate) struct Spec {
    pub groups: Vec<GroupCol>,
    /// The state columns, in output order after the group columns.
    pub states: Vec<State>,
    /// The table's fields read (field numbers), and their types.
    pub fields: Vec<(usize, FieldType)>,
    /// `fields` as a mask over the table's fields.
    pub wanted: Vec<bool>,
}

impl Spec {
    fn of(agg: &AggregateExec, scan: &ScanExec) -> Option<Spec> {
        let part = scan.parts().first()?;
        let columns = &part.columns;
        let column = |e: &Arc<dyn PhysicalExpr>| -> Option<Column> {
            let c = e.downcast_ref::<ColumnExpr>()?;
            columns.get(c.index()).copied()
        };
        let group = agg.group_expr();
        if !group.is_single() {
            return None;
        }
        let mut groups = Vec::new();
        for (e, _) in group.expr() {
            groups.push(match column(e) {
                Some(Column::Tag(i)) => GroupCol::Tag(i),
                Some(_) => return None,
                None => bucket(e, &column)?,
            });
        }
        let mut spec = Spec {
            groups,
            states: Vec::new(),
            fields: Vec::new(),
            wanted: vec![false; part.def.fields.len()],
        };
        for (i, a) in agg.aggr_expr().iter().enumerate() {
            if agg.filter_expr().get(i).is_some_and(Option::is_some)
                || a.is_distinct()
                || !a.order_bys().is_empty()
            {
                return None;
            }
            let [arg] = a.expressions().try_into().ok()?;
            let name = a.fun().name().to_ascii_lowercase();
            if column(&arg) == Some(Column::Time) {
                // `min(time)`, `max(time)`: from the keys (and a page's first and last key).
                let role = match name.as_str() {
                    "min" => Role::MinTime,
                    "max" => Role::MaxTime,
                    _ => return None,
                };
                let [s] = a.state_fields().ok()?.try_into().ok()?;
                let ty = s.data_type().clone();
                if !matches!(ty, DataType::Timestamp(TimeUnit::Nanosecond, _)) {
                    return None;
                }
                spec.states.push(State { role, field: None, ty });
                continue;
            }
            let field = match column(&arg) {
                Some(Column::Field(f)) => Some((f, part.def.fields.get(f)?.1)),
                Some(_) => return None,
                None => {
                    let lit = arg.downcast_ref::<Literal>()?;
                    if name != "count" || lit.value().is_null() {
                        return None;
                    }
                    None
                }
            };
            let numeric = field.is_some_and(|(_, t)| {
                matches!(t, FieldType::Float | FieldType::Integer | FieldType::UInteger)
            });
            let slot = field.map(|(f, t)| spec.field_slot(f, t));
            let states = a.state_fields().ok()?;
            for s in &states {
                let role = match (name.as_str(), s.name()) {
                    ("min", _) if numeric => Role::Min,
                    ("max", _) if numeric => Role::Max,
                    ("sum", _) if numeric => Role::Sum,
                    ("count", _) => Role::Count,
                    ("avg", n) if field.is_some_and(|(_, t)| t == FieldType::Float) => {
                        if n.ends_with("[count]") {
                            Role::Count
                        } else if n.ends_with("[sum]") {
                            Role::Sum
                        } else {
                            return None;
                        }
                    }
                    _ => return None,
                };
                let ty = s.data_type().clone();
                let fits = match (role, field.map(|(_, t)| t)) {
                    (Role::Count, _) => matches!(ty, DataType::Int64 | DataType::UInt64),
                    (_, Some(FieldType::Float)) => ty == DataType::Float64,
                    (_, Some(FieldType::Integer)) => ty == DataType::Int64,
                    (_, Some(FieldType::UInteger)) => ty == DataType::UInt64,
                    _ => false,
                };
                if !fits {
                    return None;
                }
                spec.states.push(State { role, field: slot, ty });
            }
        }
        let schema = agg.schema();
        if schema.fields().len() != spec.groups.len() + spec.states.len() {
            return None;
        }
        for (g, f) in spec.groups.iter().zip(schema.fields()) {
            let fits = match g {
                GroupCol::Bucket { .. } => {
                    matches!(f.data_type(), DataType::Timestamp(TimeUnit::Nanosecond, _))
                }
                GroupCol::Tag(_) => f.data_type() == &DataType::Utf8,
            };
            if !fits {
                return None;
            }
        }
        Some(spec)
    }

    /// The index of field `f` in `fields`, added if new.
    fn field_slot(&mut self, f: usize, t: FieldType) -> usize {
        if let Some(at) = self.fields.iter().position(|(g, _)| *g == f) {
            return at;
        }
        self.fields.push((f, t));
        if let Some(w) = self.wanted.get_mut(f) {
            *w = true;
        }
        self.fields.len() - 1
    }

    /// The `date_bin` stride, if a group is a bucket.
    pub fn stride(&self) -> Option<i64> {
        self.groups.iter().find_map(|g| match g {
            GroupCol::Bucket { stride, .. } => Some(*stride),
            GroupCol::Tag(_) => None,
        })
    }

    /// The start of the bucket of `time` (0 without a `date_bin` group), as DataFusion's
    /// `date_bin` computes it (an overflow is its error too).
    pub fn bucket(&self, time: i64) -> Result<i64, QueryError> {
        match self.groups.iter().find_map(|g| match g {
            GroupCol::Bucket { stride, origin } => Some((*stride, *origin)),
            GroupCol::Tag(_) => None,
        }) {
            Some((stride, origin)) => date_bin(stride, time, origin).ok_or_else(|| {
                QueryError::Invalid(format!(
                    "date_bin of {time} with stride {stride} and origin {origin} overflows"
                ))
            }),
            None => Ok(0),
        }
    }
}

/// `date_bin` of nanoseconds, exactly as DataFusion computes it.
fn date_bin(stride: i64, source: i64, origin: i64) -> Option<i64> {
    let diff = source.checked_sub(origin)?;
    let delta = diff.checked_sub(diff.checked_rem(stride)?)?;
    let delta =
        if diff < 0 && stride > 1 && delta != diff { delta.checked_sub(stride)? } else { delta };
    origin.checked_add(delta)
}

/// `date_bin(<fixed interval>, time[, <timestamp>])` as a group column.
fn bucket(
    e: &Arc<dyn PhysicalExpr>,
    column: &dyn Fn(&Arc<dyn PhysicalExpr>) -> Option<Column>,
) -> Option<GroupCol> {
    let f = e.downcast_ref::<ScalarFunctionExpr>()?;
    if f.name() != "date_bin" {
        return None;
    }
    let args = f.args();
    if !(2..=3).contains(&args.len()) || column(&args[1]) != Some(Column::Time) {
        return None;
    }
    let literal =
        |i: usize| args.get(i).and_then(|a| a.downcast_ref::<Literal>()).map(|l| l.value());
    let stride = match literal(0)? {
        ScalarValue::IntervalMonthDayNano(Some(v)) if v.months == 0 => {
            i64::from(v.days).checked_mul(86_400_000_000_000)?.checked_add(v.nanoseconds)?
        }
        ScalarValue::IntervalDayTime(Some(v)) => i64::from(v.days)
            .checked_mul(86_400_000)?
            .checked_add(i64::from(v.milliseconds))?
            .checked_mul(1_000_000)?,
        _ => return None,
    };
    if stride <= 0 {
        return None;
    }
    let origin = match args.len() {
        2 => 0,
        _ => match literal(2)? {
            ScalarValue::TimestampNanosecond(Some(o), _) => *o,
            ScalarValue::TimestampMicrosecond(Some(o), _) => o.checked_mul(1_000)?,
            ScalarValue::TimestampMillisecond(Some(o), _) => o.checked_mul(1_000_000)?,
            ScalarValue::TimestampSecond(Some(o), _) => o.checked_mul(1_000_000_000)?,
            _ => return None,
        },
    };
    Some(GroupCol::Bucket { stride, origin })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        /// Buckets are floors: the bucket holds the time, is on the origin's grid, and the
        /// next one starts past the time.
        #[test]
        fn buckets_are_floors(stride in 1i64..10_000_000_000, t in -1_000_000_000_000i64..1_000_000_000_000, origin in -1_000_000_000i64..1_000_000_000) {
            let b = super::date_bin(stride, t, origin).unwrap();
            prop_assert!(b <= t && t < b + stride);
            prop_assert_eq!((b - origin).rem_euclid(stride), 0);
        }
    }
}
