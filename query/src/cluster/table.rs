//! `information_schema` over the cluster: the cluster's catalog lists no tables yet, so a
//! table of `information_schema` is the union of each shard's, read through SQL (one scan
//! partition per shard; DataFusion applies every filter here). Every other table is a
//! [`crate::sql::ShardTable`], read by typed scans.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{new_null_array, ArrayRef};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::catalog::{Session, TableProvider};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Expr, TableType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::ExecutionPlan;
use futures::StreamExt;

use super::{ShardClient, ShardError};
use crate::model::hashspace::HashFilter;

/// A table of `information_schema`, gathered from every shard.
#[derive(Debug, Clone)]
pub struct ClusterTable {
    client: Arc<dyn ShardClient>,
    database: String,
    name: String,
    schema: SchemaRef,
    /// The series hashes each shard answering is limited to.
    shards: BTreeMap<u64, Option<HashFilter>>,
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
        let sql = format!("SELECT * FROM {} LIMIT 0", crate::sql::quote_ident(name));
        let mut shards = BTreeMap::new();
        let mut fields: Vec<Field> = Vec::new();
        for (shard, hashes) in client.routing() {
            match client.query(shard, database, &sql, None, hashes).await {
                Ok((schema, _)) => {
                    for f in schema.fields() {
                        if !fields.iter().any(|g| g.name() == f.name()) {
                            fields.push(f.as_ref().clone().with_nullable(true));
                        }
                    }
                    shards.insert(shard, hashes);
                }
                Err(ShardError::NotFound(_)) => {}
                Err(e) => return Err(external(e)),
            }
        }
        if shards.is_empty() {
            return Ok(None);
        }
        Ok(Some(ClusterTable {
            client,
            database: database.to_string(),
            name: name.to_string(),
            schema: Arc::new(Schema::new(fields)),
            shards,
        }))
    }
}

#[async_trait]
impl TableProvider for ClusterTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let schema = match projection {
            Some(p) => Arc::new(self.schema.project(p)?),
            None => self.schema.clone(),
        };
        let sql = format!("SELECT * FROM {}", crate::sql::quote_ident(&self.name));
        let partitions: Vec<Arc<dyn PartitionStream>> = self
            .shards
            .iter()
            .map(|(shard, hashes)| {
                Arc::new(ShardPartition {
                    client: self.client.clone(),
                    shard: *shard,
                    hashes: *hashes,
                    database: self.database.clone(),
                    sql: sql.clone(),
                    schema: schema.clone(),
                }) as Arc<dyn PartitionStream>
            })
            .collect();
        Ok(Arc::new(StreamingTableExec::try_new(schema, partitions, None, [], false, None)?))
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
                cols.push(match c.data_type() == f.data_type() {
                    true => c.clone(),
                    false => cast(c, f.data_type())?,
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
