//! Every operator that can produce more rows than it reads yields to the runtime between its
//! batches, so a statement stops within a batch's time of its deadline or of its client going
//! away.
//!
//! DataFusion makes leaves cooperative (`EnsureCooperative`: a leaf's stream spends the task's
//! budget and returns `Pending` when it is spent). An operator above them that multiplies its
//! input (a cross or nested-loop join, a hash join on a repeated key, `unnest`) reads its inputs
//! once and then computes batch after batch without reading them again: an aggregate above it
//! polls it in a loop that never returns, no timer runs and no drop takes effect. This rule,
//! run after DataFusion's, wraps every such operator in `CooperativeExec` too.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::error::Result;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::execution_plan::{CardinalityEffect, SchedulingType};
use datafusion::physical_plan::ExecutionPlan;

/// Wraps operators that may multiply their input in `CooperativeExec`.
#[derive(Debug, Default)]
pub struct YieldingAmplifiers;

/// True if `plan` may produce more rows than its inputs hold and does not yield by itself.
fn amplifies(plan: &Arc<dyn ExecutionPlan>) -> bool {
    !plan.children().is_empty()
        && plan.properties().scheduling_type != SchedulingType::Cooperative
        && !matches!(
            plan.cardinality_effect(),
            CardinalityEffect::Equal | CardinalityEffect::LowerEqual
        )
        && plan.name() != "CooperativeExec"
}

impl PhysicalOptimizerRule for YieldingAmplifiers {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            Ok(match amplifies(&node) {
                true => Transformed::yes(Arc::new(CooperativeExec::new(node)) as _),
                false => Transformed::no(node),
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "YieldingAmplifiers"
    }

    fn schema_check(&self) -> bool {
        true
    }
}
