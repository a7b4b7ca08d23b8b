//! The execution plan of a table scan: one partition per [`TableScan`] (series span).
//!
//! Its own plan node (rather than DataFusion's streaming table) so that optimizer rules can
//! see the scan's table, filter and spans (see [`super::partial`]).

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::streaming::PartitionStream;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};

use super::scan::TableScan;

/// Scans one table: partition `i` reads `parts[i]`.
#[derive(Debug)]
pub struct ScanExec {
    parts: Vec<Arc<TableScan>>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
}

impl ScanExec {
    /// The scan of `parts` (at least one), producing `schema`.
    pub(crate) fn new(schema: SchemaRef, parts: Vec<Arc<TableScan>>) -> Self {
        let properties = PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(parts.len()),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        ScanExec { parts, schema, properties: Arc::new(properties) }
    }

    /// Its partitions.
    pub(crate) fn parts(&self) -> &[Arc<TableScan>] {
        &self.parts
    }
}

impl DisplayAs for ScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let first = self.parts.first();
        let table = first.map_or("?", |p| p.def.name.as_str());
        let columns: Vec<&str> = self.schema.fields().iter().map(|f| f.name().as_str()).collect();
        write!(
            f,
            "EbbScan: table={table}, partitions={}, columns=[{}]",
            self.parts.len(),
            columns.join(", ")
        )?;
        if first.is_some_and(|p| p.newest_only) {
            write!(f, ", newest_per_series")?;
        }
        if let Some(l) = first.and_then(|p| p.limit) {
            write!(f, ", limit={l}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for ScanExec {
    fn name(&self) -> &str {
        "EbbScan"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if children.is_empty() {
            Ok(self)
        } else {
            Err(DataFusionError::Internal("a table scan has no inputs".into()))
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let part = self.parts.get(partition).ok_or_else(|| {
            DataFusionError::Internal(format!("scan partition {partition} out of range"))
        })?;
        Ok(part.execute(context))
    }
}
