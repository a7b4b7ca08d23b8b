//! SQL sessions over the whole cluster. Queries plan here over [`ClusterTable`]s (one scan
//! partition per shard); statements that change data or schema (DELETE, CREATE/ALTER/DROP
//! TABLE) run on every shard's leader, each becoming that shard's own log entry.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema as ArrowSchema};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::catalog::{CatalogProvider, SchemaProvider, TableProvider};
use datafusion::error::Result as DfResult;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::{DFParser, Statement as DfStatement};
use datafusion::sql::sqlparser::ast::Statement as SqlStatement;
use futures::TryStreamExt;

use super::remote::{query_shard, ShardQueryError};
use super::router::Router;
use super::table::ClusterTable;

const CATALOG: &str = "ebb";

/// Errors of cluster SQL.
#[derive(Debug, thiserror::Error)]
pub enum ClusterSqlError {
    /// Bad SQL or a statement the shards refused.
    #[error("{0}")]
    Invalid(String),
    /// A shard could not answer.
    #[error("{0}")]
    Unavailable(String),
}

impl From<datafusion::error::DataFusionError> for ClusterSqlError {
    fn from(e: datafusion::error::DataFusionError) -> Self {
        ClusterSqlError::Invalid(e.to_string())
    }
}

/// A SQL session over the cluster, with `database` as its default database.
pub struct ClusterSql {
    router: Arc<Router>,
    database: String,
    ctx: SessionContext,
}

#[derive(Debug)]
struct Catalog {
    router: Arc<Router>,
}

impl CatalogProvider for Catalog {
    fn schema_names(&self) -> Vec<String> {
        Vec::new()
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        if name == "system" {
            return Some(Arc::new(System { router: self.router.clone() }));
        }
        Some(Arc::new(Schema { router: self.router.clone(), database: name.to_string() }))
    }
}

#[derive(Debug)]
struct Schema {
    router: Arc<Router>,
    database: String,
}

#[async_trait]
impl SchemaProvider for Schema {
    fn table_names(&self) -> Vec<String> {
        Vec::new()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        Ok(ClusterTable::load(self.router.clone(), &self.database, name)
            .await?
            .map(|t| Arc::new(t) as Arc<dyn TableProvider>))
    }

    fn table_exist(&self, _name: &str) -> bool {
        true
    }
}

/// `system.nodes`, `system.shards`.
#[derive(Debug)]
struct System {
    router: Arc<Router>,
}

#[async_trait]
impl SchemaProvider for System {
    fn table_names(&self) -> Vec<String> {
        super::system::NAMES.iter().map(|s| s.to_string()).collect()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        super::system::table(&self.router, name)
    }

    fn table_exist(&self, name: &str) -> bool {
        super::system::NAMES.contains(&name)
    }
}

impl ClusterSql {
    /// A session over the cluster `router` routes to.
    pub fn new(router: Arc<Router>, database: &str) -> ClusterSql {
        let config = SessionConfig::new()
            .with_default_catalog_and_schema(CATALOG, database)
            .with_create_default_catalog_and_schema(false);
        let ctx = SessionContext::new_with_config(config);
        ctx.register_catalog(CATALOG, Arc::new(Catalog { router: router.clone() }));
        ClusterSql { router, database: database.to_string(), ctx }
    }

    /// Runs one statement and collects its rows.
    pub async fn query(&self, sql: &str) -> Result<Vec<RecordBatch>, ClusterSqlError> {
        let mut stmts =
            DFParser::parse_sql(sql).map_err(|e| ClusterSqlError::Invalid(e.to_string()))?;
        if stmts.len() != 1 {
            return Err(ClusterSqlError::Invalid("give exactly one statement".into()));
        }
        let broadcast = match stmts.pop_front() {
            Some(DfStatement::Statement(s)) => {
                !matches!(*s, SqlStatement::Query(_) | SqlStatement::Explain { .. })
            }
            _ => false,
        };
        if broadcast {
            return self.on_every_shard(sql).await;
        }
        let df = self.ctx.sql(sql).await?;
        Ok(df.collect().await?)
    }

    /// Runs a statement on every shard's leader. Each shard's answer comes back with a
    /// leading `shard` column (a DELETE's row count and ledger id are per shard).
    async fn on_every_shard(&self, sql: &str) -> Result<Vec<RecordBatch>, ClusterSqlError> {
        let mut out = Vec::new();
        let mut reached = false;
        for shard in self.router.shard_ids() {
            let res = query_shard(&self.router, shard, &self.database, sql).await;
            let batches: Vec<RecordBatch> = match res {
                Ok((_, stream)) => {
                    stream.try_collect().await.map_err(ClusterSqlError::Unavailable)?
                }
                Err(ShardQueryError::NotFound(_)) => continue, // the table never reached it
                Err(ShardQueryError::Invalid(e)) => return Err(ClusterSqlError::Invalid(e)),
                Err(ShardQueryError::Unavailable(e)) => {
                    return Err(ClusterSqlError::Unavailable(e))
                }
            };
            reached = true;
            for b in batches {
                out.push(with_shard(shard, &b)?);
            }
        }
        if !reached {
            return Err(ClusterSqlError::Invalid("no shard has that table".into()));
        }
        Ok(out)
    }
}

/// `b` with a leading `shard` column.
fn with_shard(shard: u64, b: &RecordBatch) -> Result<RecordBatch, ClusterSqlError> {
    let mut fields = vec![Arc::new(Field::new("shard", DataType::UInt64, false))];
    fields.extend(b.schema().fields().iter().cloned());
    let mut cols: Vec<ArrayRef> = vec![Arc::new(UInt64Array::from(vec![shard; b.num_rows()]))];
    cols.extend(b.columns().iter().cloned());
    let opts = RecordBatchOptions::new().with_row_count(Some(b.num_rows()));
    RecordBatch::try_new_with_options(Arc::new(ArrowSchema::new(fields)), cols, &opts)
        .map_err(|e| ClusterSqlError::Invalid(e.to_string()))
}
