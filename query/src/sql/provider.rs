//! The DataFusion table provider of an EbbDB table: scans with projection, limit and filter
//! pushdown, `INSERT` and `DELETE`.

use std::fmt;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use datafusion::arrow::array::{RecordBatch, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::Session;
use datafusion::catalog::TableProvider;
use datafusion::datasource::sink::{DataSink, DataSinkExec};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan};
use futures::StreamExt;

use super::delete::delete_targets;
use super::pushdown::{classify_with, Operands, ScanFilter};
use super::rows::batch_lines;
use super::scan::{SeriesSpan, TableScan};
use crate::db::Database;
use crate::lp::{Line, Precision};
use crate::model::hashspace::HashFilter;
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

/// An EbbDB table as DataFusion sees it.
#[derive(Debug)]
pub struct EbbTable {
    db: Arc<Database>,
    def: Arc<TableDef>,
    /// `def`'s Arrow schema, built once (planning asks for it many times).
    schema: SchemaRef,
    time_default: Expr,
    /// Scans produce each series' newest row only (see [`super::newest`]).
    newest_only: bool,
}

impl EbbTable {
    /// The provider of `def`.
    pub fn new(db: Arc<Database>, def: Arc<TableDef>) -> Self {
        let time_default = datafusion::functions::datetime::expr_fn::now();
        let schema = def.schema();
        EbbTable { db, def, schema, time_default, newest_only: false }
    }

    /// The table's definition.
    pub fn def(&self) -> &Arc<TableDef> {
        &self.def
    }

    /// True if its scans produce each series' newest row only.
    pub fn newest_only(&self) -> bool {
        self.newest_only
    }

    /// The same table, whose scans produce each series' newest row only.
    pub fn newest_per_series(&self) -> EbbTable {
        EbbTable {
            db: self.db.clone(),
            def: self.def.clone(),
            schema: self.schema.clone(),
            time_default: self.time_default.clone(),
            newest_only: true,
        }
    }

    /// True if `other` is the same table with the same columns (a plan made over one reads the
    /// other correctly; a table dropped and made again is another).
    pub(crate) fn same_as(&self, other: &EbbTable) -> bool {
        self.def == other.def
    }

    fn df_err(e: crate::QueryError) -> DataFusionError {
        match e {
            crate::QueryError::DataFusion(e) => e,
            e if e.is_client_error() => DataFusionError::Plan(e.to_string()),
            e => DataFusionError::External(Box::new(e)),
        }
    }
}

#[async_trait]
impl TableProvider for EbbTable {
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
        let all = self.def.columns();
        let columns: Vec<_> = match projection {
            Some(p) => p.iter().map(|&i| all[i]).collect(),
            None => all,
        };
        let full = self.schema.clone();
        let schema = match projection {
            Some(p) => Arc::new(full.project(p)?),
            None => full,
        };
        // A placeholder no value was bound to (the provider takes typed ones over, for plans
        // made before values are bound).
        if let Some(p) = filters.iter().find_map(placeholder_in) {
            return Err(DataFusionError::Plan(format!(
                "Placeholder '{p}' was not provided a value"
            )));
        }
        let mut filter = ScanFilter::from_filters(&self.def, filters);
        if let Some(hashes) = state.config().get_extension::<HashFilter>() {
            self.db.catalog().with_series(self.def.id, |idx| {
                filter.limit_to_hashes(&self.def, idx, &hashes);
            });
        }
        let spans =
            SeriesSpan::split(&self.db, self.def.id, &filter, state.config().target_partitions());
        let snapshot = Arc::new(OnceLock::new());
        // DataFusion passes a limit only when every filter was pushed down exactly.
        let partitions: Vec<Arc<TableScan>> = spans
            .into_iter()
            .map(|span| {
                Arc::new(TableScan {
                    db: self.db.clone(),
                    def: self.def.clone(),
                    columns: columns.clone(),
                    schema: schema.clone(),
                    filter: filter.clone(),
                    limit,
                    span,
                    snapshot: snapshot.clone(),
                    newest_only: self.newest_only,
                })
            })
            .collect();
        Ok(Arc::new(super::scan_exec::ScanExec::new(schema, partitions)))
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
        let sink =
            InsertSink { db: self.db.clone(), def: self.def.clone(), schema: self.schema.clone() };
        Ok(Arc::new(DataSinkExec::new(input, Arc::new(sink), None)))
    }

    async fn delete_from(
        &self,
        _state: &dyn Session,
        filters: Vec<Expr>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let predicate = filters.into_iter().reduce(Expr::and);
        let targets =
            delete_targets(&self.db, &self.def, predicate.as_ref()).map_err(Self::df_err)?;
        let text = match &predicate {
            Some(p) => format!("DELETE FROM {}.{} WHERE {p}", self.def.database, self.def.name),
            None => format!("DELETE FROM {}.{}", self.def.database, self.def.name),
        };
        let spec = crate::db::RequestSpec::new("delete", text);
        let out = self.db.delete(&self.def, &targets, &spec).map_err(Self::df_err)?;
        let schema = Arc::new(Schema::new(vec![Field::new("count", DataType::UInt64, false)]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(UInt64Array::from(vec![out.rows]))],
        )?;
        let mem = datafusion::datasource::memory::MemorySourceConfig::try_new_exec(
            &[vec![batch]],
            schema,
            None,
        )?;
        Ok(mem)
    }
}

/// Writes `INSERT` rows as points of the table.
#[derive(Debug)]
struct InsertSink {
    db: Arc<Database>,
    def: Arc<TableDef>,
    schema: SchemaRef,
}

impl DisplayAs for InsertSink {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EbbInsert: {}.{}", self.def.database, self.def.name)
    }
}

#[async_trait]
impl DataSink for InsertSink {
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
        let db = self.db.clone();
        let def = self.def.clone();
        tokio::task::spawn_blocking(move || insert_batches(&db, &def, &batches))
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))?
            .map_err(EbbTable::df_err)
    }
}

/// Converts batches in the table's schema to lines and writes them in one request.
fn insert_batches(db: &Database, def: &TableDef, batches: &[RecordBatch]) -> crate::Result<u64> {
    let mut lines: Vec<(usize, Line<'_>)> = Vec::new();
    let mut row_no = 0usize;
    for b in batches {
        batch_lines(&def.name, b, |c| def.tags.iter().any(|t| t == c), &mut row_no, &mut lines)?;
    }
    let now = crate::now_ns();
    let s = db.write_parsed(&def.database, &lines, Precision::Nanoseconds, now)?;
    Ok(s.lines as u64)
}
