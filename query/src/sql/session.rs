//! SQL sessions: statement dispatch between EbbDB's own statements (DDL, `DELETE`) and
//! DataFusion (everything else).

use std::sync::Arc;

use std::time::Duration;

use datafusion::arrow::array::{RecordBatch, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::execution::context::SessionContext;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::prelude::SessionConfig;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::Statement as SqlStatement;

use super::alter_cluster::ClusterStatement;
use super::bounds::SqlBounds;
use super::catalog::{ChangeCatalog, EbbCatalog};
use super::ddl::CreateSpec;
use super::erase::EraseStatement;
use super::shard::everywhere::run_everywhere;
use super::shard::op::{delete_op, ShardOp};
use super::shard::{LocalShards, ShardRequest, Shards};
use super::statement::{Class, Classified, Request};
use super::{ShardTable, CATALOG};
use crate::access::AccessStore;
use crate::db::{new_request_id, Database};
use crate::error::{QueryError, Result};
use crate::sql::limits::Limits;
use datafusion::execution::runtime_env::RuntimeEnv;

/// The result of one statement: its rows (as a stream) and a command tag such as `SELECT 3`,
/// `INSERT 0 2`, `DELETE 10` or `CREATE TABLE` (PostgreSQL's convention).
pub struct QueryOutput {
    /// Output schema.
    pub schema: SchemaRef,
    /// The rows.
    pub stream: SendableRecordBatchStream,
    /// What kind of statement it was (`SELECT`, `INSERT`, `DELETE`, or a DDL name).
    pub kind: StatementKind,
}

/// Kind of statement, for command tags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatementKind {
    /// Returns rows (`SELECT`, `SHOW`, `EXPLAIN`, `DESCRIBE`...).
    Query,
    /// `INSERT` (one row with the count).
    Insert,
    /// `DELETE` (one row: rows deleted and the delete id).
    Delete,
    /// `ERASE` (one row: rows erased, the erasure id, series and tables).
    Erase,
    /// Anything without rows, with its tag (`CREATE TABLE`, `DROP TABLE`...).
    Command(String),
}

/// A SQL session over the shards, single node and cluster alike: the default database for
/// unqualified table names. Queries plan here over [`super::ShardTable`]s (one scan partition
/// per shard part); `INSERT` rows go to their series' shards; `DELETE`, `ERASE` and DDL become
/// one [`ShardOp`] every shard applies ([`run_everywhere`]).
pub struct SqlSession {
    shards: Arc<dyn Shards>,
    ctx: SessionContext,
    /// The catalog registered in `ctx` (kept to register a changed one).
    catalog: EbbCatalog,
    database: String,
    /// The server's runtime and the limits of each statement (none: DataFusion's defaults).
    limits: Option<(Arc<RuntimeEnv>, Limits)>,
}

impl SqlSession {
    /// A session on the single node `db`, whose unqualified names resolve in `database`.
    pub fn new(db: Arc<Database>, database: &str) -> SqlSession {
        SqlSession::on(Arc::new(LocalShards::new(db.clone())), db, database)
    }

    /// A session over `shards`, whose users `access` keeps, with `database` as its default.
    pub fn on(shards: Arc<dyn Shards>, access: Arc<dyn AccessStore>, database: &str) -> SqlSession {
        let ctx = new_context(database, true);
        super::pg_catalog::register_session(&ctx, access.clone(), database, None);
        let catalog = EbbCatalog::new(shards.clone(), access).for_session(database, None);
        ctx.register_catalog(CATALOG, Arc::new(catalog.clone()));
        SqlSession { shards, ctx, catalog, database: database.to_string(), limits: None }
    }

    /// The session with its statements drawing memory from `server`'s pool, within `limits`.
    pub fn limited(mut self, server: Arc<RuntimeEnv>, limits: Limits) -> SqlSession {
        super::sized::register(&self.ctx, limits.query_memory_bytes);
        self.limits = Some((server, limits));
        self
    }

    /// The session listing only the databases `visible` admits (in `information_schema`).
    pub fn visible_to(mut self, visible: super::catalog::Visible) -> SqlSession {
        self.catalog = self.catalog.clone().visible_to(visible);
        self.ctx.register_catalog(CATALOG, Arc::new(self.catalog.clone()));
        self
    }

    /// The session as `user`'s (`None`: a server without users): what `current_user`
    /// answers and which users `pg_roles` lists.
    pub fn as_user(mut self, user: Option<&str>) -> SqlSession {
        let access = self.catalog.access().clone();
        super::pg_catalog::register_session(&self.ctx, access, &self.database, user);
        self.catalog = self.catalog.clone().for_session(&self.database, user);
        self.ctx.register_catalog(CATALOG, Arc::new(self.catalog.clone()));
        self
    }

    /// The shards the session reads and changes.
    pub fn shards(&self) -> &Arc<dyn Shards> {
        &self.shards
    }

    /// The session's default database.
    pub fn database(&self) -> &str {
        &self.database
    }

    /// The DataFusion context (for registering functions, or running DataFrames).
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// Runs every statement of `sql` in order (within the default [`SqlBounds`]); returns the
    /// output of each.
    pub async fn execute_all(&self, sql: &str) -> Result<Vec<QueryOutput>> {
        match Request::read(sql, &SqlBounds::default(), &self.database)? {
            Request::Erase(stmt) => Ok(vec![self.erase(stmt).await?]),
            Request::AlterCluster(stmt) => Ok(vec![self.alter_cluster(stmt, "").await?]),
            Request::Backup(request) => Ok(vec![self.backup(request, "").await?]),
            Request::Statements(statements) => {
                let mut out = Vec::with_capacity(statements.len());
                for s in statements {
                    out.push(self.run(s, "").await?);
                }
                Ok(out)
            }
        }
    }

    /// Runs `sql`, which must hold exactly one statement.
    pub async fn execute(&self, sql: &str) -> Result<QueryOutput> {
        let mut all = self.execute_all(sql).await?;
        match all.len() {
            1 => Ok(all.remove(0)),
            0 => Err(QueryError::invalid("empty query")),
            n => Err(QueryError::invalid(format!("expected one statement, got {n}"))),
        }
    }

    /// Runs `sql` and collects every row (of the last statement).
    pub async fn query(&self, sql: &str) -> Result<Vec<RecordBatch>> {
        let mut last = Vec::new();
        for o in self.execute_all(sql).await? {
            last = datafusion::physical_plan::common::collect(o.stream).await?;
        }
        Ok(last)
    }

    /// Runs one parsed statement.
    pub async fn execute_statement(&self, stmt: DfStatement) -> Result<QueryOutput> {
        self.execute_statement_by(stmt, "").await
    }

    /// Plans `stmt` in the session's context, the listing of tables taken from the shards
    /// first if the statement reads it (`information_schema`, `SHOW TABLES`).
    pub async fn plan(&self, stmt: DfStatement) -> Result<LogicalPlan> {
        let state = self.ctx.state();
        let lists = state.resolve_table_references(&stmt).map_or(true, |refs| {
            refs.iter().any(|r| {
                r.schema()
                    .is_some_and(|s| s == INFORMATION_SCHEMA || s == super::pg_catalog::PG_CATALOG)
            })
        });
        if lists {
            self.catalog.refresh().await?;
        }
        Ok(state.statement_to_plan(stmt).await?)
    }

    /// The tables of the session's database with their columns, sorted by name, from a
    /// listing taken now.
    pub async fn tables(&self) -> Result<Vec<(String, SchemaRef)>> {
        self.catalog.refresh().await?;
        let schema = self.ctx.catalog(CATALOG).and_then(|c| c.schema(&self.database));
        let Some(schema) = schema else { return Ok(Vec::new()) };
        let mut names = schema.table_names();
        names.sort();
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            if let Some(table) = schema.table(&name).await? {
                out.push((name, table.schema()));
            }
        }
        Ok(out)
    }

    /// The change `sql` (one `DELETE`, `ERASE` or DDL statement) makes on every shard, as this
    /// session plans it; `None` for any other statement.
    pub async fn shard_op(&self, sql: &str) -> Result<Option<ShardOp>> {
        let mut statements = match Request::read(sql, &SqlBounds::default(), &self.database)? {
            Request::Erase(stmt) => return Ok(Some(ShardOp::erase(&stmt, &self.database))),
            Request::AlterCluster(_) | Request::Backup(_) => return Ok(None),
            Request::Statements(s) => s,
        };
        let (Some(c), true) = (statements.pop_front(), statements.is_empty()) else {
            return Ok(None);
        };
        match c.class {
            Class::Delete => self.delete_op(c.statement).await.map(Some),
            Class::Change(op) => Ok(Some(*op)),
            _ => Ok(None),
        }
    }

    /// Runs one parsed statement; the changes it makes are recorded as issued by `issuer`.
    pub async fn execute_statement_by(
        &self,
        stmt: DfStatement,
        issuer: &str,
    ) -> Result<QueryOutput> {
        self.run(Classified::new(stmt, &self.database)?, issuer).await
    }

    /// Runs one classified statement; the changes it makes are recorded as issued by `issuer`.
    pub async fn run(&self, c: Classified, issuer: &str) -> Result<QueryOutput> {
        let request =
            ShardRequest { id: new_request_id(), deadline_ms: None, issued_by: issuer.to_string() };
        let kind = match c.class {
            Class::Delete => {
                let op = self.delete_op(c.statement).await?;
                return self.everywhere(&op, &request).await;
            }
            Class::Rollup => {
                let DfStatement::Statement(s) = &c.statement else {
                    return Err(QueryError::Internal("a rollup that is not a view".into()));
                };
                let SqlStatement::CreateView(cv) = &**s else {
                    return Err(QueryError::Internal("a rollup that is not a view".into()));
                };
                return self.create_rollup(cv, &request).await;
            }
            Class::Change(op) => return self.everywhere(&op, &request).await,
            Class::Insert => StatementKind::Insert,
            _ => StatementKind::Query,
        };
        let plan = self.plan(c.statement).await?;
        if let LogicalPlan::Ddl(_) = &plan {
            return Err(QueryError::Unsupported(
                "this DDL statement; EbbDB supports CREATE/ALTER/DROP TABLE and CREATE DATABASE"
                    .into(),
            ));
        }
        let (schema, stream) = match (&self.limits, &plan) {
            (_, LogicalPlan::Statement(_)) | (None, _) => {
                let df = self.ctx.execute_logical_plan(plan).await?;
                let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
                (schema, df.execute_stream().await?)
            }
            (Some((server, limits)), _) => limited_stream(&self.ctx, server, limits, plan).await?,
        };
        Ok(QueryOutput { schema, stream, kind })
    }

    /// The op of a `DELETE`, planned over the table as the shards that answer now define it: a
    /// shard without a leader must not keep the DELETE from being recorded and applied
    /// everywhere once it has one. (A column only such a shard has is unknown until it answers
    /// again.)
    async fn delete_op(&self, stmt: DfStatement) -> Result<ShardOp> {
        // The statement as the deletion ledger records it.
        let text = stmt.to_string();
        let ctx = new_context(&self.database, false);
        ctx.register_catalog(CATALOG, Arc::new(ChangeCatalog { shards: self.shards.clone() }));
        let state = ctx.state();
        // Optimized first: types coerced, constants (and now()) folded, and the filter split
        // between the scan (what pushdown takes) and a filter above it.
        let plan = state.optimize(&state.statement_to_plan(stmt).await?)?;
        let LogicalPlan::Dml(d) = &plan else {
            return Err(QueryError::Internal("DELETE plan lost its DML node".into()));
        };
        delete_op(self.shards.clone(), d, &self.database, text).await
    }

    /// `CREATE MATERIALIZED VIEW`: the rollup is kept on every shard its source is on, which
    /// is every shard once the source is created where writes have not reached yet.
    async fn create_rollup(
        &self,
        cv: &datafusion::sql::sqlparser::ast::CreateView,
        request: &ShardRequest,
    ) -> Result<QueryOutput> {
        let spec = super::rollup::rollup_spec(cv, &self.database)?;
        let (database, source) = (&spec.database, &spec.def.source);
        let source = ShardTable::load(self.shards.clone(), database, source)
            .await?
            .ok_or_else(|| QueryError::UnknownTable(format!("{database}.{source}")))?;
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
        self.everywhere(&create, &prepare).await?;
        self.everywhere(&ShardOp::CreateRollup(spec), request).await
    }

    /// Applies `op` on every shard as `request`.
    async fn everywhere(&self, op: &ShardOp, request: &ShardRequest) -> Result<QueryOutput> {
        run_everywhere(self.shards.as_ref(), &self.database, op, request).await
    }

    /// Runs an `ALTER CLUSTER` statement: one row naming the shard split and the new shard.
    pub async fn alter_cluster(&self, stmt: ClusterStatement, issuer: &str) -> Result<QueryOutput> {
        match stmt {
            ClusterStatement::JoinToken(change) => {
                let row = self.shards.join_token(change, issuer).await?;
                let batch = super::system::join_tokens_batch(&[row])?;
                Ok(rows_output(batch.schema(), batch, StatementKind::Query))
            }
            ClusterStatement::Upgrade(change) => {
                let (active, message) = self.shards.upgrade(change, issuer).await?;
                let schema = Arc::new(Schema::new(vec![
                    Field::new("active_version", DataType::UInt64, false),
                    Field::new("upgrade", DataType::Utf8, false),
                ]));
                let batch = RecordBatch::try_new(
                    schema.clone(),
                    vec![
                        Arc::new(UInt64Array::from(vec![u64::from(active)])),
                        Arc::new(datafusion::arrow::array::StringArray::from(vec![message])),
                    ],
                )
                .map_err(|e| QueryError::Internal(e.to_string()))?;
                Ok(rows_output(schema, batch, StatementKind::Query))
            }
            ClusterStatement::SplitShard(shard) => {
                let child = self.shards.split_shard(shard).await?;
                let schema = Arc::new(Schema::new(vec![
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
                Ok(rows_output(schema, batch, StatementKind::Query))
            }
        }
    }

    /// Runs `BACKUP TO`, issued by `issuer`: the set it wrote.
    pub async fn backup(
        &self,
        request: crate::backups::BackupRequest,
        issuer: &str,
    ) -> Result<QueryOutput> {
        let backups = self
            .shards
            .backups()
            .ok_or_else(|| QueryError::Unsupported("this server takes no backups".into()))?;
        let row = backups.backup(request, issuer).await?;
        let batch = crate::backups::batch(&[row])?;
        Ok(rows_output(batch.schema(), batch, StatementKind::Query))
    }

    /// Runs a parsed `ERASE`.
    pub async fn erase(&self, stmt: EraseStatement) -> Result<QueryOutput> {
        self.erase_by(stmt, "").await
    }

    /// Runs a parsed `ERASE`, recorded as issued by `issuer`: one request id, deadline and
    /// issuer on every shard.
    pub async fn erase_by(&self, stmt: EraseStatement, issuer: &str) -> Result<QueryOutput> {
        let now_ms = crate::now_ms();
        let deadline_ms = stmt.deadline.map(|d| now_ms.saturating_add(d.as_millis() as u64));
        let request =
            ShardRequest { id: new_request_id(), deadline_ms, issued_by: issuer.to_string() };
        self.everywhere(&ShardOp::erase(&stmt, &self.database), &request).await
    }
}

/// The name of the schema of table and column listings.
const INFORMATION_SCHEMA: &str = "information_schema";

/// A DataFusion context whose unqualified names resolve in schema `database` of the EbbDB
/// catalog (which the caller registers). Built from one state made once per process (the
/// functions, rules and planners), cloned: making a state registers every function anew.
pub(crate) fn new_context(database: &str, information_schema: bool) -> SessionContext {
    static BASE: std::sync::OnceLock<datafusion::execution::SessionState> =
        std::sync::OnceLock::new();
    let base = BASE.get_or_init(|| {
        let mut rules = datafusion::optimizer::Optimizer::new().rules;
        // Before `DISTINCT ON` becomes an aggregate.
        rules.insert(0, Arc::new(super::newest::NewestPerSeries));
        let state = datafusion::execution::SessionStateBuilder::new()
            .with_config(SessionConfig::new().with_create_default_catalog_and_schema(false))
            .with_default_features()
            .with_optimizer_rules(rules)
            .with_physical_optimizer_rule(Arc::new(super::partial::PartialAggregates))
            .with_physical_optimizer_rule(Arc::new(super::coop::YieldingAmplifiers))
            .build();
        super::pg_catalog::register_shared(state)
    });
    let mut state = base.clone();
    let options = state.config_mut().options_mut();
    options.catalog.default_catalog = CATALOG.to_string();
    options.catalog.default_schema = database.to_string();
    options.catalog.information_schema = information_schema;
    // The clone shares the base's catalog list: each context gets its own.
    state.register_catalog_list(Arc::new(datafusion::catalog::MemoryCatalogProviderList::new()));
    SessionContext::new_with_state(state)
}

/// Plans `plan` physically and runs it with a memory pool of its own within the server's.
pub(crate) async fn limited_stream(
    ctx: &SessionContext,
    server: &Arc<RuntimeEnv>,
    limits: &Limits,
    plan: LogicalPlan,
) -> Result<(SchemaRef, SendableRecordBatchStream)> {
    let state = ctx.state();
    let optimized = state.optimize(&plan)?;
    optimized_stream(&state, server, limits, &optimized).await
}

/// Plans `plan`, already optimized in `state`, physically and runs it with a memory pool of
/// its own within the server's.
pub(crate) async fn optimized_stream(
    state: &datafusion::execution::SessionState,
    server: &Arc<RuntimeEnv>,
    limits: &Limits,
    plan: &LogicalPlan,
) -> Result<(SchemaRef, SendableRecordBatchStream)> {
    let schema: SchemaRef = Arc::new(plan.schema().as_arrow().clone());
    let physical = state.query_planner().create_physical_plan(plan, state).await?;
    let task = datafusion::execution::TaskContext::from(state)
        .with_runtime(crate::sql::limits::statement_runtime(server, limits));
    let stream = datafusion::physical_plan::execute_stream(physical, Arc::new(task))?;
    Ok((schema, stream))
}

/// The `WHERE` predicate of a `DELETE`'s input plan: every filter above and inside its table
/// scan, joined by `AND` (`None` if there is none).
pub(crate) fn filter_of(plan: &LogicalPlan) -> Option<datafusion::logical_expr::Expr> {
    let mut parts = Vec::new();
    collect_filters(plan, &mut parts);
    parts.into_iter().reduce(datafusion::logical_expr::Expr::and)
}

fn collect_filters(plan: &LogicalPlan, out: &mut Vec<datafusion::logical_expr::Expr>) {
    match plan {
        LogicalPlan::Filter(f) => {
            out.push(f.predicate.clone());
            collect_filters(&f.input, out);
        }
        LogicalPlan::TableScan(s) => out.extend(s.filters.iter().cloned()),
        LogicalPlan::Projection(p) => collect_filters(&p.input, out),
        LogicalPlan::SubqueryAlias(a) => collect_filters(&a.input, out),
        _ => {}
    }
}

/// The output of a statement that answers one batch.
pub fn rows_output(schema: SchemaRef, batch: RecordBatch, kind: StatementKind) -> QueryOutput {
    QueryOutput { schema: schema.clone(), stream: once(schema, batch), kind }
}

/// The output of a statement without rows, with its command tag.
pub fn command_output(tag: &str) -> QueryOutput {
    command(tag)
}

fn once(schema: SchemaRef, batch: RecordBatch) -> SendableRecordBatchStream {
    Box::pin(RecordBatchStreamAdapter::new(schema, futures::stream::iter(vec![Ok(batch)])))
}

fn command(tag: &str) -> QueryOutput {
    let schema = Arc::new(Schema::empty());
    QueryOutput {
        schema: schema.clone(),
        stream: Box::pin(RecordBatchStreamAdapter::new(schema, futures::stream::empty())),
        kind: StatementKind::Command(tag.to_string()),
    }
}
