//! The DataFusion table provider of an EbbDB table, over the shards that hold it (one on a
//! single node): scans with projection, limit and filter pushdown, and `INSERT`.
//!
//! The table's schema is the union of the shards' definitions (a shard that never saw a column
//! reads it as NULL). A scan sends each shard a typed [`ScanRequest`]: the columns by name, the
//! time window and tag predicates the scan applies exactly (reported `Exact`; DataFusion
//! applies every other filter itself), the limit and whether only each series' newest row is
//! wanted.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::datasource::sink::{DataSink, DataSinkExec};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_plan::union::UnionExec;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan};
use futures::StreamExt;

use super::pushdown::{classify_with, Conjunct, Operands, TimeBounds};
use super::rows::batch_lines;
use super::shard::{Points, ScanRequest, Shards, TablePart, TagFilter, WriteRequest};
use crate::error::QueryError;
use crate::lp::{Line, Precision};
use crate::model::schema::TableDef;

/// The id of a placeholder in `e`, if it has one.
fn placeholder_in(e: &Expr) -> Option<String> {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    let mut found = None;
    let _ = e.apply(|x| {
        if let Expr::Placeholder(p) = x {
            found = Some(p.id.clone());
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// `e` as DataFusion reports it from a table provider.
pub(crate) fn df_err(e: QueryError) -> DataFusionError {
    match e {
        QueryError::DataFusion(e) => e,
        e if e.is_client_error() => DataFusionError::Plan(e.to_string()),
        e => DataFusionError::External(Box::new(e)),
    }
}

/// An EbbDB table as DataFusion sees it.
#[derive(Debug, Clone)]
pub struct ShardTable {
    shards: Arc<dyn Shards>,
    /// The table as the union of the shards' definitions.
    def: Arc<TableDef>,
    /// `def`'s Arrow schema, built once (planning asks for it many times).
    schema: SchemaRef,
    /// The shards holding it.
    parts: Vec<TablePart>,
    time_default: Expr,
    /// Scans produce each series' newest row only (see [`super::newest`]).
    newest_only: bool,
}

/// The union of `parts`' definitions of one table: every tag and field any has, in the order
/// first met (a column's type is the first shard's).
fn union_def(parts: &[TablePart]) -> Option<Arc<TableDef>> {
    let (first, rest) = parts.split_first()?;
    if rest.iter().all(|p| p.def.tags == first.def.tags && p.def.fields == first.def.fields) {
        return Some(first.def.clone());
    }
    let mut def = (*first.def).clone();
    for p in rest {
        for t in &p.def.tags {
            if !def.tags.contains(t) {
                def.tags.push(t.clone());
            }
        }
        for (f, ty) in &p.def.fields {
            if !def.fields.iter().any(|(g, _)| g == f) && !def.tags.contains(f) {
                def.fields.push((f.clone(), *ty));
            }
        }
    }
    Some(Arc::new(def))
}

impl ShardTable {
    /// Table `name` of `database` over `shards`; `None` if no shard holds it.
    pub async fn load(
        shards: Arc<dyn Shards>,
        database: &str,
        name: &str,
    ) -> crate::Result<Option<ShardTable>> {
        let parts = shards.table(database, name).await?;
        Ok(Self::from_parts(shards, parts))
    }

    /// Table `name` of `database` as the shards that answer now define it (see
    /// [`Shards::table_now`]); `None` if none of them holds it.
    pub async fn load_now(
        shards: Arc<dyn Shards>,
        database: &str,
        name: &str,
    ) -> crate::Result<Option<ShardTable>> {
        let parts = shards.table_now(database, name).await?;
        Ok(Self::from_parts(shards, parts))
    }

    /// The table `parts` of `shards` hold; `None` if there are none.
    fn from_parts(shards: Arc<dyn Shards>, parts: Vec<TablePart>) -> Option<ShardTable> {
        let def = union_def(&parts)?;
        let schema = def.schema();
        let time_default = datafusion::functions::datetime::expr_fn::now();
        Some(ShardTable { shards, def, schema, parts, time_default, newest_only: false })
    }

    /// The table's definition (the union of the shards').
    pub fn def(&self) -> &Arc<TableDef> {
        &self.def
    }

    /// True if its scans produce each series' newest row only.
    pub fn newest_only(&self) -> bool {
        self.newest_only
    }

    /// The same table, whose scans produce each series' newest row only.
    pub fn newest_per_series(&self) -> ShardTable {
        ShardTable { newest_only: true, ..self.clone() }
    }

    /// True if `other` is the same table with the same columns on the same shards (a plan made
    /// over one reads the other correctly; a table dropped and made again is another).
    pub(crate) fn same_as(&self, other: &ShardTable) -> bool {
        self.parts == other.parts
    }
}

#[async_trait]
impl TableProvider for ShardTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn get_column_default(&self, column: &str) -> Option<&Expr> {
        (column == crate::model::TIME_COLUMN).then_some(&self.time_default)
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|e| match classify_with(&self.def, e, Operands::Placeholders) {
                Some(_) => TableProviderFilterPushDown::Exact,
                None => TableProviderFilterPushDown::Unsupported,
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let schema = match projection {
            Some(p) => Arc::new(self.schema.project(p)?),
            None => self.schema.clone(),
        };
        // A placeholder no value was bound to (the provider takes typed ones over, for plans
        // made before values are bound).
        if let Some(p) = filters.iter().find_map(placeholder_in) {
            return Err(DataFusionError::Plan(format!(
                "Placeholder '{p}' was not provided a value"
            )));
        }
        let (mut time, mut tags) = (TimeBounds::default(), Vec::new());
        for e in filters {
            match classify_with(&self.def, e, Operands::Literals) {
                Some(Conjunct::Time(t)) => time.intersect(t),
                Some(Conjunct::Tags(p)) => tags.push(TagFilter::named(&p, &self.def)),
                None => {}
            }
        }
        let request = ScanRequest {
            database: self.def.database.clone(),
            table: self.def.name.clone(),
            columns: schema.fields().iter().map(|f| f.name().clone()).collect(),
            time,
            tags,
            // DataFusion passes a limit only when every filter was pushed down exactly.
            limit,
            newest_only: self.newest_only,
        };
        let partitions = state.config().target_partitions();
        let mut plans = Vec::with_capacity(self.parts.len());
        for part in &self.parts {
            // A shard is asked for the columns it has; the others read as NULL.
            let mut request = request.clone();
            request.columns.retain(|c| part.def.column(c).is_some());
            let plan = self.shards.clone().scan(part, &request, partitions).map_err(df_err)?;
            plans.push(conform(plan, &schema)?);
        }
        match plans.len() {
            1 => Ok(plans.remove(0)),
            _ => UnionExec::try_new(plans),
        }
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if insert_op != InsertOp::Append {
            return Err(DataFusionError::NotImplemented(format!(
                "{insert_op} is not supported; use INSERT INTO"
            )));
        }
        let sink = ShardInsert {
            shards: self.shards.clone(),
            def: self.def.clone(),
            schema: self.schema.clone(),
        };
        Ok(Arc::new(DataSinkExec::new(input, Arc::new(sink), None)))
    }
}

/// `plan`, which produces some of `schema`'s columns (by name), producing `schema`: columns
/// it lacks as NULL, columns of another type cast.
fn conform(plan: Arc<dyn ExecutionPlan>, schema: &SchemaRef) -> DfResult<Arc<dyn ExecutionPlan>> {
    use datafusion::common::ScalarValue;
    use datafusion::physical_expr::expressions::{CastExpr, Column, Literal};
    use datafusion::physical_expr::PhysicalExpr;
    use datafusion::physical_plan::projection::ProjectionExec;
    let from = plan.schema();
    if from.fields() == schema.fields() {
        return Ok(plan);
    }
    let mut exprs: Vec<(Arc<dyn PhysicalExpr>, String)> = Vec::new();
    for f in schema.fields() {
        let e: Arc<dyn PhysicalExpr> = match from.index_of(f.name()) {
            Ok(i) => {
                let col = Arc::new(Column::new(f.name(), i));
                match from.field(i).data_type() == f.data_type() {
                    true => col,
                    false => Arc::new(CastExpr::new(col, f.data_type().clone(), None)),
                }
            }
            Err(_) => Arc::new(Literal::new(ScalarValue::try_from(f.data_type())?)),
        };
        exprs.push((e, f.name().clone()));
    }
    Ok(Arc::new(ProjectionExec::try_new(exprs, plan)?))
}

/// Writes `INSERT` rows as points of the table, each to its series' shard.
#[derive(Debug)]
struct ShardInsert {
    shards: Arc<dyn Shards>,
    def: Arc<TableDef>,
    schema: SchemaRef,
}

impl DisplayAs for ShardInsert {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EbbInsert: {}.{}", self.def.database, self.def.name)
    }
}

/// The points of `batches`, rows in the table's schema, numbered from 1.
fn points(def: &TableDef, batches: &[RecordBatch]) -> crate::Result<Vec<(usize, Line<'static>)>> {
    let mut lines: Vec<(usize, Line<'_>)> = Vec::new();
    let mut row_no = 0usize;
    for b in batches {
        batch_lines(&def.name, b, |c| def.tags.iter().any(|t| t == c), &mut row_no, &mut lines)?;
    }
    Ok(lines.into_iter().map(|(n, l)| (n, l.into_owned())).collect())
}

#[async_trait]
impl DataSink for ShardInsert {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    async fn write_all(
        &self,
        mut data: SendableRecordBatchStream,
        _context: &Arc<TaskContext>,
    ) -> DfResult<u64> {
        let mut batches = Vec::new();
        while let Some(b) = data.next().await {
            batches.push(b?);
        }
        // Converting every row is work in proportion to the statement: off the async workers.
        let def = self.def.clone();
        let lines = tokio::task::spawn_blocking(move || points(&def, &batches))
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))?
            .map_err(df_err)?;
        let write = WriteRequest {
            database: self.def.database.clone(),
            points: Points::Parsed(lines),
            precision: Precision::Nanoseconds,
            now_ns: crate::now_ns(),
        };
        let written = self.shards.write(write).await.map_err(df_err)?;
        Ok(written.lines as u64)
    }
}
