//! SQL over the cluster: a table is the union of its rows on every shard. Its schema is the
//! union of the shards' schemas (a shard that never saw a column reads it as NULL), and a scan
//! runs one partition per shard: the projection and the filters that can be written back as
//! SQL go to each shard's leader, which applies them with its own pushdown and streams Arrow
//! batches back. Filters are re-applied here (`Inexact`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{new_null_array, ArrayRef, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::catalog::{Session, TableProvider};
use datafusion::datasource::sink::DataSinkExec;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::ExecutionPlan;
use futures::StreamExt;

use super::insert::ClusterInsert;
use super::{ShardClient, ShardError};
use crate::model::hashspace::HashFilter;
use crate::model::schema::ROLLUP_METADATA;

/// A table of the cluster.
#[derive(Debug, Clone)]
pub struct ClusterTable {
    client: Arc<dyn ShardClient>,
    database: String,
    name: String,
    schema: SchemaRef,
    /// The schema each shard holding the table has, and the series hashes a scan limits it to.
    shards: BTreeMap<u64, (SchemaRef, Option<HashFilter>)>,
    /// Scans ask each shard for the first row per group only (see [`ClusterTable::newest`]).
    newest: Option<NewestOn>,
    /// What it keeps, if it is a rollup's stored partials.
    rollup: Option<crate::model::rollup::RollupDef>,
}

/// `DISTINCT ON (on) ... ORDER BY order` sent to every shard.
#[derive(Debug, Clone)]
struct NewestOn {
    on: Vec<String>,
    /// `(column, ascending, nulls first)`.
    order: Vec<(String, bool, bool)>,
}

fn quote(ident: &str) -> String {
    crate::sql::quote_ident(ident)
}

fn external(e: impl std::fmt::Display) -> DataFusionError {
    DataFusionError::External(e.to_string().into())
}

impl ClusterTable {
    /// Loads table `name` of `database` from every shard; `None` if no shard has it.
    pub async fn load(
        client: Arc<dyn ShardClient>,
        database: &str,
        name: &str,
    ) -> DfResult<Option<ClusterTable>> {
        let sql = format!("SELECT * FROM {} LIMIT 0", quote(name));
        let mut shards = BTreeMap::new();
        let mut fields: Vec<Field> = Vec::new();
        let mut rollup = None;
        for (shard, hashes) in client.routing() {
            match client.query(shard, database, &sql, None, hashes).await {
                Ok((schema, _)) => {
                    if let Some(json) = schema.metadata().get(ROLLUP_METADATA) {
                        rollup = Some(serde_json::from_str(json).map_err(external)?);
                    }
                    for f in schema.fields() {
                        if !fields.iter().any(|g| g.name() == f.name()) {
                            fields.push(f.as_ref().clone().with_nullable(true));
                        }
                    }
                    shards.insert(shard, (schema, hashes));
                }
                Err(ShardError::NotFound(_)) => {}
                Err(e) => return Err(external(e)),
            }
        }
        if shards.is_empty() {
            return Ok(None);
        }
        // `time` first and never null, as on a single node.
        if let Some(i) = fields.iter().position(|f| f.name() == "time") {
            let t = fields.remove(i).with_nullable(false);
            fields.insert(0, t);
        }
        Ok(Some(ClusterTable {
            client,
            database: database.to_string(),
            name: name.to_string(),
            schema: Arc::new(Schema::new(fields)),
            shards,
            newest: None,
            rollup,
        }))
    }

    /// What it keeps, if it is a rollup's stored partials.
    pub fn rollup(&self) -> Option<&crate::model::rollup::RollupDef> {
        self.rollup.as_ref()
    }

    /// True if its scans ask each shard for the first row per group only.
    pub fn newest_only(&self) -> bool {
        self.newest.is_some()
    }

    /// The same table, whose scans ask each shard for `SELECT DISTINCT ON (on) ... ORDER BY
    /// order` (`(column, ascending, nulls first)`): under a `DISTINCT ON` of the same columns
    /// and order, the first row of a group over the cluster is the first of the shards' first
    /// rows, so each shard sends those alone (and answers them its own way: a shard reads each
    /// series' newest row where `on` are tags and the order ends with `time` descending).
    pub fn newest(&self, on: Vec<String>, order: Vec<(String, bool, bool)>) -> ClusterTable {
        ClusterTable { newest: Some(NewestOn { on, order }), ..self.clone() }
    }

    /// True if `other` is the same table with the same columns on the same shards (a plan made
    /// over one reads the other correctly).
    pub(crate) fn same_as(&self, other: &ClusterTable) -> bool {
        self.database == other.database
            && self.name == other.name
            && self.schema == other.schema
            && self.shards == other.shards
    }
}

impl ClusterTable {
    /// The table as shard `shard` describes it in `system.tables`: its tags (in order) and its
    /// retention (`None` if it has none, or the shard does not hold it).
    async fn described(&self, shard: u64) -> DfResult<(Vec<String>, Option<String>)> {
        let lit = crate::sql::quote_literal;
        let sql = format!(
            "SELECT tags, retention FROM system.tables WHERE database = {} AND name = {}",
            lit(&self.database),
            lit(&self.name)
        );
        let (_, mut batches) =
            self.client.query(shard, &self.database, &sql, None, None).await.map_err(external)?;
        let (mut tags, mut retention) = (Vec::new(), None);
        while let Some(b) = batches.next().await {
            let b = b.map_err(external)?;
            let text = |i: usize| b.column(i).as_string_opt::<i32>().cloned();
            let (Some(t), Some(r)) = (text(0), text(1)) else {
                return Err(DataFusionError::Internal("system.tables is not text".into()));
            };
            if let Some(v) = t.iter().flatten().next() {
                tags = v.split(',').filter(|t| !t.is_empty()).map(String::from).collect();
            }
            retention = r.iter().flatten().next().map(String::from);
        }
        Ok((tags, retention))
    }

    /// The table's tag columns, as the shards holding it know them.
    async fn tags(&self) -> DfResult<BTreeSet<String>> {
        let mut tags = BTreeSet::new();
        for shard in self.shards.keys() {
            tags.extend(self.described(*shard).await?.0);
        }
        Ok(tags)
    }

    /// `CREATE TABLE IF NOT EXISTS` of this table as the shards holding it define it (its
    /// tags, fields and retention), for the shards that do not hold it yet.
    pub(crate) async fn create_if_missing_sql(&self) -> DfResult<String> {
        use crate::model::schema::{FieldType, TIME_COLUMN};
        let lit = crate::sql::quote_literal;
        let (tags, retention) = match self.shards.keys().next() {
            Some(shard) => self.described(*shard).await?,
            None => (Vec::new(), None),
        };
        let mut cols: Vec<String> = tags.iter().map(|t| format!("{} TAG", quote(t))).collect();
        for f in self.schema.fields() {
            if f.name() == TIME_COLUMN || tags.contains(f.name()) {
                continue;
            }
            let ty = match FieldType::from_data_type(f.data_type()) {
                Some(FieldType::Float) => "DOUBLE",
                Some(FieldType::Integer) => "BIGINT",
                Some(FieldType::UInteger) => "BIGINT UNSIGNED",
                Some(FieldType::Boolean) => "BOOLEAN",
                Some(FieldType::String) | None => "TEXT",
            };
            cols.push(format!("{} {ty}", quote(f.name())));
        }
        Ok(format!(
            "CREATE TABLE IF NOT EXISTS {}.{} ({}) WITH (retention = {})",
            quote(&self.database),
            quote(&self.name),
            cols.join(", "),
            lit(retention.as_deref().unwrap_or("none"))
        ))
    }
}

#[async_trait]
impl TableProvider for ClusterTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
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
        let sink = ClusterInsert {
            client: self.client.clone(),
            database: self.database.clone(),
            name: self.name.clone(),
            schema: self.schema.clone(),
            tags: self.tags().await?,
        };
        Ok(Arc::new(DataSinkExec::new(input, Arc::new(sink), None)))
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let schema = match projection {
            Some(p) => Arc::new(self.schema.project(p)?),
            None => self.schema.clone(),
        };
        // Each filter as SQL, if it can be written back (the others apply only here).
        let conditions: Vec<Option<String>> = filters
            .iter()
            .map(|f| datafusion::sql::unparser::expr_to_sql(f).ok().map(|e| format!("({e})")))
            .collect();
        let mut partitions: Vec<Arc<dyn PartitionStream>> = Vec::new();
        for (shard, (shard_schema, hashes)) in &self.shards {
            // Only filters on columns the shard has can be sent to it.
            let usable: Vec<&str> = conditions
                .iter()
                .zip(filters)
                .filter(|(_, f)| {
                    f.column_refs().iter().all(|c| shard_schema.field_with_name(&c.name).is_ok())
                })
                .filter_map(|(c, _)| c.as_deref())
                .collect();
            let cols: Vec<String> = schema
                .fields()
                .iter()
                .filter(|f| shard_schema.field_with_name(f.name()).is_ok())
                .map(|f| quote(f.name()))
                .collect();
            let select =
                if cols.is_empty() { "1 AS \"_row\"".to_string() } else { cols.join(", ") };
            let has = |c: &String| shard_schema.field_with_name(c).is_ok();
            let newest = self
                .newest
                .as_ref()
                .filter(|n| n.on.iter().all(has) && n.order.iter().all(|(c, _, _)| has(c)));
            let distinct = match newest {
                Some(n) => {
                    let on: Vec<String> = n.on.iter().map(|c| quote(c)).collect();
                    format!("DISTINCT ON ({}) ", on.join(", "))
                }
                None => String::new(),
            };
            let mut sql = format!("SELECT {distinct}{select} FROM {}", quote(&self.name));
            if !usable.is_empty() {
                sql.push_str(" WHERE ");
                sql.push_str(&usable.join(" AND "));
            }
            if let Some(n) = newest {
                let order: Vec<String> = n
                    .order
                    .iter()
                    .map(|(c, asc, nulls_first)| {
                        let dir = if *asc { "ASC" } else { "DESC" };
                        let nulls = if *nulls_first { "FIRST" } else { "LAST" };
                        format!("{} {dir} NULLS {nulls}", quote(c))
                    })
                    .collect();
                sql.push_str(&format!(" ORDER BY {}", order.join(", ")));
            }
            if let (Some(n), true) = (limit, usable.len() == filters.len()) {
                sql.push_str(&format!(" LIMIT {n}"));
            }
            partitions.push(Arc::new(ShardPartition {
                client: self.client.clone(),
                shard: *shard,
                hashes: *hashes,
                database: self.database.clone(),
                sql,
                schema: schema.clone(),
            }));
        }
        Ok(Arc::new(StreamingTableExec::try_new(
            schema,
            partitions,
            None,
            Vec::new(),
            false,
            None,
        )?))
    }
}

/// One shard's part of a scan.
#[derive(Debug)]
struct ShardPartition {
    client: Arc<dyn ShardClient>,
    shard: u64,
    /// The series hashes the shard answers for.
    hashes: Option<HashFilter>,
    database: String,
    sql: String,
    schema: SchemaRef,
}

/// Reshapes a shard's batch to `schema`: columns by name, cast where types differ, NULL for
/// columns the shard does not have.
fn conform(batch: &RecordBatch, schema: &SchemaRef) -> DfResult<RecordBatch> {
    let rows = batch.num_rows();
    let mut cols: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for f in schema.fields() {
        match batch.schema().index_of(f.name()) {
            Ok(i) => {
                let c = batch.column(i);
                cols.push(if c.data_type() == f.data_type() {
                    c.clone()
                } else {
                    cast(c, f.data_type())?
                });
            }
            Err(_) => cols.push(new_null_array(f.data_type(), rows)),
        }
    }
    let opts = RecordBatchOptions::new().with_row_count(Some(rows));
    Ok(RecordBatch::try_new_with_options(schema.clone(), cols, &opts)?)
}

impl PartitionStream for ShardPartition {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let (client, shard, hashes, db, sql, schema) = (
            self.client.clone(),
            self.shard,
            self.hashes,
            self.database.clone(),
            self.sql.clone(),
            self.schema.clone(),
        );
        let target = schema.clone();
        let stream = futures::stream::once(async move {
            match client.query(shard, &db, &sql, None, hashes).await {
                Ok((_, batches)) => {
                    batches.map(move |b| conform(&b.map_err(external)?, &target)).boxed()
                }
                Err(ShardError::NotFound(_)) => futures::stream::empty().boxed(),
                Err(e) => futures::stream::once(async move { Err(external(e)) }).boxed(),
            }
        })
        .flatten();
        Box::pin(RecordBatchStreamAdapter::new(schema, stream))
    }
}
