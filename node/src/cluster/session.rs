//! SQL sessions over the whole cluster. Queries plan here over [`ClusterTable`]s (one scan
//! partition per shard); `INSERT` rows are routed to their series' shards like line-protocol
//! writes; statements that change data or schema (DELETE, CREATE/ALTER/DROP TABLE) run on
//! every shard's leader, each becoming that shard's own log entry.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema as ArrowSchema};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::catalog::{CatalogProvider, SchemaProvider, TableProvider};
use datafusion::error::Result as DfResult;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::parser::{DFParser, Statement as DfStatement};
use datafusion::sql::sqlparser::ast::Statement as SqlStatement;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use ebb_query::db::new_request_id;
use ebb_query::sql::erase::{is_erase, parse_erase};
use ebb_query::{QueryOutput, StatementKind};
use futures::TryStreamExt;

use super::remote::{query_shard_as, ShardQueryError};
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
        super::system::table(&self.router, name).await
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

    /// The DataFusion context statements plan in.
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// Runs one statement and collects its rows.
    pub async fn query(&self, sql: &str) -> Result<Vec<RecordBatch>, ClusterSqlError> {
        let out = self.execute(sql).await?;
        Ok(out.stream.try_collect::<Vec<_>>().await?)
    }

    /// Runs one statement. Queries plan here over the shards; `INSERT` rows go through the
    /// router to their series' shards; other statements run on every shard, answered per shard
    /// with a leading `shard` column.
    pub async fn execute(&self, sql: &str) -> Result<QueryOutput, ClusterSqlError> {
        if is_erase(sql) {
            // One request id and one deadline for every shard.
            let stmt = parse_erase(sql).map_err(|e| ClusterSqlError::Invalid(e.to_string()))?;
            let now_ms = ebb_query::now_ms();
            let deadline = stmt.deadline.map(|d| now_ms.saturating_add(d.as_millis() as u64));
            let request = Some((new_request_id(), deadline));
            return self.on_every_shard(sql, StatementKind::Erase, request).await;
        }
        let mut stmts = DFParser::parse_sql_with_dialect(sql, &PostgreSqlDialect {})
            .map_err(|e| ClusterSqlError::Invalid(format!("SQL syntax: {e}")))?;
        if stmts.len() != 1 {
            return Err(ClusterSqlError::Invalid("give exactly one statement".into()));
        }
        let kind = match stmts.pop_front() {
            Some(DfStatement::Statement(s)) => match *s {
                SqlStatement::Query(_) | SqlStatement::Explain { .. } => StatementKind::Query,
                SqlStatement::Insert(_) => StatementKind::Insert,
                SqlStatement::Delete(_) => {
                    let request = Some((new_request_id(), None));
                    return self.on_every_shard(sql, StatementKind::Delete, request).await;
                }
                other => {
                    let kind = StatementKind::Command(tag(&other));
                    return self.on_every_shard(sql, kind, None).await;
                }
            },
            _ => StatementKind::Query,
        };
        let df = self.ctx.sql(sql).await?;
        let schema = Arc::new(df.schema().as_arrow().clone());
        let stream = df.execute_stream().await?;
        Ok(QueryOutput { schema, stream, kind })
    }

    /// Runs a statement on every shard's leader. Each shard's answer comes back with a
    /// leading `shard` column (a DELETE's row count and ledger id are per shard).
    async fn on_every_shard(
        &self,
        sql: &str,
        kind: StatementKind,
        request: Option<(u64, Option<u64>)>,
    ) -> Result<QueryOutput, ClusterSqlError> {
        let mut out = Vec::new();
        let mut reached = false;
        for shard in self.router.shard_ids() {
            let res = query_shard_as(&self.router, shard, &self.database, sql, request).await;
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
            let what = if kind == StatementKind::Erase { "database" } else { "table" };
            return Err(ClusterSqlError::Invalid(format!("no shard has that {what}")));
        }
        let schema = match out.first() {
            Some(b) => b.schema(),
            None => Arc::new(ArrowSchema::empty()),
        };
        let stream = futures::stream::iter(out.into_iter().map(Ok));
        Ok(QueryOutput {
            schema: schema.clone(),
            stream: Box::pin(RecordBatchStreamAdapter::new(schema, stream)),
            kind,
        })
    }
}

/// The command tag of a statement run on every shard.
fn tag(s: &SqlStatement) -> String {
    match s {
        SqlStatement::CreateTable(_) => "CREATE TABLE".into(),
        SqlStatement::AlterTable(_) => "ALTER TABLE".into(),
        SqlStatement::Drop { .. } => "DROP TABLE".into(),
        SqlStatement::CreateDatabase { .. } | SqlStatement::CreateSchema { .. } => {
            "CREATE DATABASE".into()
        }
        other => {
            let text = other.to_string();
            text.split_whitespace().next().unwrap_or_default().to_ascii_uppercase()
        }
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
