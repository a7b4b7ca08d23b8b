//! SQL sessions over the whole cluster. Queries plan here over [`ShardTable`]s, the table
//! provider of a single node too (one scan partition per shard); `INSERT` rows are routed to
//! their series' shards like line-protocol writes; statements that change data or schema (DELETE, ERASE, CREATE/ALTER/DROP TABLE) run
//! on every shard's leader, each becoming that shard's own log entry.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema as ArrowSchema};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::catalog::{CatalogProvider, SchemaProvider, TableProvider};
use datafusion::error::Result as DfResult;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::prelude::SessionContext;
use datafusion::sql::parser::{DFParser, Statement as DfStatement};
use datafusion::sql::sqlparser::ast::Statement as SqlStatement;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use futures::TryStreamExt;

use super::intent::{self, Intent, ShardOutcome};
use super::table::ClusterTable;
use super::{ShardClient, ShardRequest};
use crate::access::{access_table, AccessStore, ACCESS_TABLES};
use crate::db::new_request_id;
use crate::error::{QueryError, Result};
use crate::front::limits::Limits;
use crate::sql::alter_cluster::{is_alter_cluster, parse_alter_cluster, ClusterStatement};
use crate::sql::ddl::CreateSpec;
use crate::sql::erase::{is_erase, parse_erase};
use crate::sql::shard::op::delete_op;
use crate::sql::shard::{ShardOp, Shards};
use crate::sql::ShardTable;
use crate::sql::CATALOG;
use crate::{QueryOutput, StatementKind};
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::logical_expr::LogicalPlan;

/// A SQL session over the cluster, with `database` as its default database.
pub struct ClusterSql {
    client: Arc<dyn ShardClient>,
    /// The server's runtime and the limits of each statement (none: DataFusion's defaults).
    limits: Option<(Arc<RuntimeEnv>, Limits)>,
    database: String,
    ctx: SessionContext,
}

#[derive(Debug)]
struct Catalog {
    client: Arc<dyn ShardClient>,
    access: Arc<dyn AccessStore>,
}

impl CatalogProvider for Catalog {
    fn schema_names(&self) -> Vec<String> {
        Vec::new()
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        if name == "system" {
            return Some(Arc::new(System {
                client: self.client.clone(),
                access: self.access.clone(),
            }));
        }
        Some(Arc::new(Schema { client: self.client.clone(), database: name.to_string() }))
    }
}

#[derive(Debug)]
struct Schema {
    client: Arc<dyn ShardClient>,
    database: String,
}

#[async_trait]
impl SchemaProvider for Schema {
    fn table_names(&self) -> Vec<String> {
        Vec::new()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        // The cluster's catalog lists no tables yet: `information_schema` (and Flight SQL's
        // `GetTables`) is each shard's, read through SQL.
        if self.database == INFORMATION_SCHEMA {
            let table = ClusterTable::load(self.client.clone(), &self.database, name).await?;
            return Ok(table.map(|t| Arc::new(t) as Arc<dyn TableProvider>));
        }
        let shards = self.client.clone() as Arc<dyn Shards>;
        let loaded = ShardTable::load(shards, &self.database, name).await;
        let Some(table) = loaded.map_err(crate::sql::table::df_err)? else { return Ok(None) };
        match table.def().rollup.clone() {
            Some(r) => crate::sql::rollup::rollup_view(name, &r, Arc::new(table)).map(Some),
            None => Ok(Some(Arc::new(table))),
        }
    }

    fn table_exist(&self, _name: &str) -> bool {
        true
    }
}

/// The catalog a `DELETE` is planned in: tables as the shards that answer now define them
/// ([`ShardTable::load_now`]), rollups as their raw tables (a delete of one is refused).
#[derive(Debug)]
struct ChangeCatalog {
    client: Arc<dyn ShardClient>,
}

impl CatalogProvider for ChangeCatalog {
    fn schema_names(&self) -> Vec<String> {
        Vec::new()
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        Some(Arc::new(ChangeSchema { client: self.client.clone(), database: name.to_string() }))
    }
}

#[derive(Debug)]
struct ChangeSchema {
    client: Arc<dyn ShardClient>,
    database: String,
}

#[async_trait]
impl SchemaProvider for ChangeSchema {
    fn table_names(&self) -> Vec<String> {
        Vec::new()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let shards = self.client.clone() as Arc<dyn Shards>;
        let loaded = ShardTable::load_now(shards, &self.database, name).await;
        let table = loaded.map_err(crate::sql::table::df_err)?;
        Ok(table.map(|t| Arc::new(t) as Arc<dyn TableProvider>))
    }

    fn table_exist(&self, _name: &str) -> bool {
        true
    }
}

/// `system.nodes`, `system.shards`, `system.deletions` and the access tables.
#[derive(Debug)]
struct System {
    client: Arc<dyn ShardClient>,
    access: Arc<dyn AccessStore>,
}

#[async_trait]
impl SchemaProvider for System {
    fn table_names(&self) -> Vec<String> {
        let mut names = super::system::names(self.client.as_ref());
        names.extend(ACCESS_TABLES.iter().map(|s| s.to_string()));
        names.sort();
        names
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        if ACCESS_TABLES.contains(&name) {
            return access_table(&self.access.access(), name);
        }
        super::system::table(self.client.as_ref(), name).await
    }

    fn table_exist(&self, name: &str) -> bool {
        ACCESS_TABLES.contains(&name)
            || super::system::names(self.client.as_ref()).iter().any(|n| n == name)
    }
}

impl ClusterSql {
    /// A session over the cluster `client` reaches, whose users `access` keeps.
    pub fn new(
        client: Arc<dyn ShardClient>,
        access: Arc<dyn AccessStore>,
        database: &str,
    ) -> ClusterSql {
        let ctx = crate::sql::new_context(database, false);
        let catalog = Catalog { client: client.clone(), access: access.clone() };
        ctx.register_catalog(CATALOG, Arc::new(catalog));
        ClusterSql { client, limits: None, database: database.to_string(), ctx }
    }

    /// The DataFusion context statements plan in.
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// The session with its statements drawing memory from `server`'s pool, within `limits`.
    pub fn limited(mut self, server: Arc<RuntimeEnv>, limits: Limits) -> ClusterSql {
        crate::sql::sized::register(&self.ctx, limits.query_memory_bytes);
        self.limits = Some((server, limits));
        self
    }

    /// The session's default database.
    pub fn database(&self) -> &str {
        &self.database
    }

    /// Runs one statement and collects its rows.
    pub async fn query(&self, sql: &str) -> Result<Vec<RecordBatch>> {
        let out = self.execute(sql).await?;
        Ok(out.stream.try_collect::<Vec<_>>().await?)
    }

    /// Runs every statement of `sql` in order; returns the output of each.
    pub async fn execute_all(&self, sql: &str) -> Result<Vec<QueryOutput>> {
        if is_erase(sql) {
            return Ok(vec![self.execute(sql).await?]);
        }
        let stmts = DFParser::parse_sql_with_dialect(sql, &PostgreSqlDialect {})
            .map_err(|e| QueryError::invalid(format!("SQL syntax: {e}")))?;
        let mut out = Vec::with_capacity(stmts.len());
        for s in stmts {
            out.push(self.execute_statement(s).await?);
        }
        Ok(out)
    }

    /// Runs one statement. Queries plan here over the shards; `INSERT` rows go through the
    /// client to their series' shards; other statements run on every shard, answered per shard
    /// with a leading `shard` column.
    pub async fn execute(&self, sql: &str) -> Result<QueryOutput> {
        self.execute_by(sql, "").await
    }

    /// [`ClusterSql::execute`], its deletes recorded as issued by `issuer`.
    pub async fn execute_by(&self, sql: &str, issuer: &str) -> Result<QueryOutput> {
        if is_alter_cluster(sql) {
            return self.alter_cluster(parse_alter_cluster(sql)?).await;
        }
        if is_erase(sql) {
            // One request id, deadline and issuer for every shard.
            let stmt = parse_erase(sql)?;
            let now_ms = crate::now_ms();
            let deadline_ms = stmt.deadline.map(|d| now_ms.saturating_add(d.as_millis() as u64));
            let request =
                ShardRequest { id: new_request_id(), deadline_ms, issued_by: issuer.to_string() };
            return self.on_every_shard(&ShardOp::erase(&stmt, &self.database), &request).await;
        }
        let mut stmts = DFParser::parse_sql_with_dialect(sql, &PostgreSqlDialect {})
            .map_err(|e| QueryError::invalid(format!("SQL syntax: {e}")))?;
        match (stmts.pop_front(), stmts.is_empty()) {
            (Some(s), true) => self.execute_statement_by(s, issuer).await,
            (None, _) => Err(QueryError::invalid("empty query")),
            (Some(_), false) => Err(QueryError::invalid("give exactly one statement")),
        }
    }

    /// Runs an `ALTER CLUSTER` statement: one row naming the shard split and the new shard.
    pub async fn alter_cluster(&self, stmt: ClusterStatement) -> Result<QueryOutput> {
        match stmt {
            ClusterStatement::SplitShard(shard) => {
                let child = self.client.split_shard(shard).await?;
                let schema = Arc::new(ArrowSchema::new(vec![
                    Field::new("shard", DataType::UInt64, false),
                    Field::new("new_shard", DataType::UInt64, false),
                ]));
                let batch = RecordBatch::try_new(
                    schema.clone(),
                    vec![
                        Arc::new(UInt64Array::from(vec![shard])),
                        Arc::new(UInt64Array::from(vec![child])),
                    ],
                )
                .map_err(|e| QueryError::Internal(e.to_string()))?;
                Ok(crate::sql::rows_output(schema, batch, StatementKind::Query))
            }
        }
    }

    /// Runs one parsed statement.
    pub async fn execute_statement(&self, stmt: DfStatement) -> Result<QueryOutput> {
        self.execute_statement_by(stmt, "").await
    }

    /// Runs one parsed statement, its deletes recorded as issued by `issuer`. A `DELETE`, or a
    /// `DROP TABLE`, is one request with one id on every shard.
    pub async fn execute_statement_by(
        &self,
        stmt: DfStatement,
        issuer: &str,
    ) -> Result<QueryOutput> {
        let request =
            ShardRequest { id: new_request_id(), deadline_ms: None, issued_by: issuer.to_string() };
        let kind = match &stmt {
            DfStatement::Statement(s) => match &**s {
                SqlStatement::Query(_) | SqlStatement::Explain { .. } => StatementKind::Query,
                SqlStatement::Insert(_) => StatementKind::Insert,
                SqlStatement::Delete(_) => {
                    let text = s.to_string();
                    // Planned over the table as the shards that answer now define it: a shard
                    // without a leader must not keep the DELETE from being recorded and run
                    // everywhere once it has one. (A column only such a shard has is unknown
                    // until it answers again.)
                    let ctx = crate::sql::new_context(&self.database, false);
                    let changes = ChangeCatalog { client: self.client.clone() };
                    ctx.register_catalog(CATALOG, Arc::new(changes));
                    let state = ctx.state();
                    // Optimized first, as on a single node: types coerced, constants folded.
                    let plan = state.optimize(&state.statement_to_plan(stmt).await?)?;
                    let LogicalPlan::Dml(d) = &plan else {
                        return Err(QueryError::Internal("DELETE plan lost its DML node".into()));
                    };
                    let shards = self.client.clone() as Arc<dyn Shards>;
                    let op = delete_op(shards, d, &self.database, text).await?;
                    return self.on_every_shard(&op, &request).await;
                }
                SqlStatement::CreateView(cv) if cv.materialized => {
                    // The rollup is kept on every shard its source is on, which is every shard
                    // once the source is created where writes have not reached yet.
                    let spec = crate::sql::rollup::rollup_spec(cv, &self.database)?;
                    let shards = self.client.clone() as Arc<dyn Shards>;
                    let source = ShardTable::load(shards, &spec.database, &spec.def.source)
                        .await?
                        .ok_or_else(|| {
                            QueryError::UnknownTable(format!(
                                "{}.{}",
                                spec.database, spec.def.source
                            ))
                        })?;
                    let def = source.def();
                    let create = ShardOp::CreateTable(CreateSpec {
                        database: def.database.clone(),
                        name: def.name.clone(),
                        tags: def.tags.clone(),
                        fields: def.fields.clone(),
                        retention: Some(def.retention_ns.map(Duration::from_nanos)),
                        if_not_exists: true,
                    });
                    let prepare = ShardRequest { id: new_request_id(), ..request.clone() };
                    self.on_every_shard(&create, &prepare).await?;
                    return self.on_every_shard(&ShardOp::CreateRollup(spec), &request).await;
                }
                other => match ShardOp::from_ddl(other, &self.database)? {
                    Some(op) => return self.on_every_shard(&op, &request).await,
                    None => StatementKind::Query,
                },
            },
            _ => StatementKind::Query,
        };
        let plan = self.ctx.state().statement_to_plan(stmt).await?;
        let (schema, stream) = match (&self.limits, &plan) {
            (_, LogicalPlan::Statement(_) | LogicalPlan::Ddl(_)) | (None, _) => {
                let df = self.ctx.execute_logical_plan(plan).await?;
                (Arc::new(df.schema().as_arrow().clone()), df.execute_stream().await?)
            }
            (Some((server, limits)), _) => {
                crate::sql::limited_stream(&self.ctx, server, limits, plan).await?
            }
        };
        Ok(QueryOutput { schema, stream, kind })
    }

    /// Runs a statement on every shard's leader as one intent (see [`super::intent`]).
    /// Each shard's answer comes back with a leading `shard` column (a DELETE's row count and
    /// ledger id are per shard).
    async fn on_every_shard(&self, op: &ShardOp, request: &ShardRequest) -> Result<QueryOutput> {
        let kind = op.kind();
        let intent = Intent::new(&self.database, op, request);
        if let Err(e) = self.client.open_intent(&intent).await {
            // The record may have been made although its answer was lost: then the metadata
            // leader runs the statement.
            return Err(QueryError::Unavailable(format!(
                "request {} could not be confirmed as recorded ({e}); it may still run on every \
                 shard (see system.deletions)",
                intent.id
            )));
        }
        let answers =
            match intent::drive(self.client.as_ref(), &intent, self.client.intent_patience()).await
            {
                Ok(a) => a,
                Err(open) => {
                    let shards: Vec<String> =
                        open.iter().map(|(s, why)| format!("shard {s}: {why}")).collect();
                    return Err(QueryError::Unavailable(format!(
                        "request {} is recorded and runs on every shard until done (see \
                     system.deletions); not answered yet: {}",
                        intent.id,
                        shards.join("; ")
                    )));
                }
            };
        if let Err(e) = self.client.close_intent(intent.id).await {
            // The metadata leader closes it when it next drives open intents.
            tracing::warn!(request = intent.id, %e, "closing a completed intent");
        }
        let mut out = Vec::new();
        let mut refused = None;
        let mut reached = false;
        for (shard, answer) in answers {
            match answer {
                ShardOutcome::Done(batches) => {
                    reached = true;
                    for b in batches {
                        out.push(with_shard(shard, &b)?);
                    }
                }
                ShardOutcome::Absent => {} // the table never reached it
                ShardOutcome::Refused(why) => refused = refused.or(Some(why)),
            }
        }
        if let Some(why) = refused {
            return Err(QueryError::Invalid(why));
        }
        if !reached {
            let what = if kind == StatementKind::Erase { "database" } else { "table" };
            return Err(QueryError::invalid(format!("no shard has that {what}: {}", intent.sql)));
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

/// `b` with a leading `shard` column.
fn with_shard(shard: u64, b: &RecordBatch) -> Result<RecordBatch> {
    let mut fields = vec![Arc::new(Field::new("shard", DataType::UInt64, false))];
    fields.extend(b.schema().fields().iter().cloned());
    let mut cols: Vec<ArrayRef> = vec![Arc::new(UInt64Array::from(vec![shard; b.num_rows()]))];
    cols.extend(b.columns().iter().cloned());
    let opts = RecordBatchOptions::new().with_row_count(Some(b.num_rows()));
    RecordBatch::try_new_with_options(Arc::new(ArrowSchema::new(fields)), cols, &opts)
        .map_err(|e| QueryError::Internal(e.to_string()))
}

/// The name of the schema of table and column listings.
const INFORMATION_SCHEMA: &str = "information_schema";
