//! SQL sessions: statement dispatch between EbbDB's own statements (DDL, `DELETE`) and
//! DataFusion (everything else).

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::execution::context::SessionContext;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::logical_expr::{LogicalPlan, WriteOp};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::prelude::SessionConfig;
use datafusion::sql::parser::{DFParser, Statement as DfStatement};
use datafusion::sql::sqlparser::ast::Statement as SqlStatement;
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;

use super::catalog::EbbCatalog;
use super::erase::{is_erase, parse_erase, EraseStatement};
use super::shard::op::{delete_op, ShardOp};
use super::shard::{LocalShards, Shards};
use super::CATALOG;
use crate::cluster::ShardRequest;
use crate::db::Database;
use crate::error::{QueryError, Result};
use crate::front::limits::Limits;
use crate::model::hashspace::HashFilter;
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

/// A SQL session on a database: the default database for unqualified table names.
pub struct SqlSession {
    db: Arc<Database>,
    ctx: SessionContext,
    /// The catalog registered in `ctx` (kept to register a changed one).
    catalog: EbbCatalog,
    database: String,
    /// Request id, deadline and issuer a coordinator chose for the `DELETE`, `ERASE` or
    /// `DROP TABLE` this session runs on one shard of a cluster.
    request: Option<ShardRequest>,
    /// The server's runtime and the limits of each statement (none: DataFusion's defaults).
    limits: Option<(Arc<RuntimeEnv>, Limits)>,
}

impl SqlSession {
    /// A session whose unqualified names resolve in `database`.
    pub fn new(db: Arc<Database>, database: &str) -> SqlSession {
        let ctx = new_context(database, true);
        let catalog = EbbCatalog::new(db.clone());
        ctx.register_catalog(CATALOG, Arc::new(catalog.clone()));
        SqlSession { db, ctx, catalog, database: database.to_string(), request: None, limits: None }
    }

    /// Registers `catalog` in place of the session's.
    fn with_catalog(mut self, catalog: EbbCatalog) -> SqlSession {
        self.ctx.register_catalog(CATALOG, Arc::new(catalog.clone()));
        self.catalog = catalog;
        self
    }

    /// A session whose statements draw memory from `server`'s pool, within `limits`.
    pub fn new_limited(
        db: Arc<Database>,
        database: &str,
        server: Arc<RuntimeEnv>,
        limits: Limits,
    ) -> SqlSession {
        let mut s = SqlSession::new(db, database);
        super::sized::register(&s.ctx, limits.query_memory_bytes);
        s.limits = Some((server, limits));
        s
    }

    /// The session listing only the databases `visible` admits (in `information_schema`).
    pub fn visible_to(self, visible: super::catalog::Visible) -> SqlSession {
        let catalog = self.catalog.clone().visible_to(visible);
        self.with_catalog(catalog)
    }

    /// The session with rollups read as their stored partials, as a shard answers a cluster
    /// coordinator (which merges them across shards).
    pub fn with_raw_rollups(self) -> SqlSession {
        let catalog = self.catalog.clone().with_raw_rollups();
        self.with_catalog(catalog)
    }

    /// Runs the session's `DELETE`, `ERASE` and `DROP TABLE` statements as `request` (when a
    /// coordinator issues one request on every shard).
    pub fn with_request(mut self, request: ShardRequest) -> SqlSession {
        self.request = Some(request);
        self
    }

    /// Limits the session's scans to the series whose hash `hashes` holds: what a coordinator
    /// asks of a shard it routes those hashes to (a shard being split holds both halves).
    pub fn with_hash_filter(self, hashes: HashFilter) -> SqlSession {
        let catalog = self.catalog.clone().with_hashes(hashes);
        self.with_catalog(catalog)
    }

    /// The id of the request the session runs its statements as, if a coordinator gave one.
    pub(super) fn request_id(&self) -> Option<u64> {
        self.request.as_ref().map(|r| r.id)
    }

    /// The session's database handle.
    pub(super) fn db(&self) -> &Arc<Database> {
        &self.db
    }

    /// Who the session's requests are issued by, if not told per statement.
    fn issuer(&self) -> &str {
        self.request.as_ref().map_or("", |r| r.issued_by.as_str())
    }

    /// The session's default database.
    pub fn database(&self) -> &str {
        &self.database
    }

    /// The DataFusion context (for registering functions, or running DataFrames).
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// Runs every statement of `sql` in order; returns the output of each.
    pub async fn execute_all(&self, sql: &str) -> Result<Vec<QueryOutput>> {
        if is_erase(sql) {
            return Ok(vec![self.erase_by(parse_erase(sql)?, self.issuer()).await?]);
        }
        let statements = DFParser::parse_sql_with_dialect(sql, &PostgreSqlDialect {})
            .map_err(|e| QueryError::invalid(format!("SQL syntax: {e}")))?;
        let mut out = Vec::with_capacity(statements.len());
        for s in statements {
            out.push(self.execute_statement(s).await?);
        }
        Ok(out)
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
        self.execute_statement_by(stmt, self.issuer()).await
    }

    /// Runs one parsed statement; the deletes it issues are recorded as issued by `issuer`.
    pub async fn execute_statement_by(
        &self,
        stmt: DfStatement,
        issuer: &str,
    ) -> Result<QueryOutput> {
        match super::requested::requested_kind(&stmt) {
            Some(kind) if self.request.is_some() => {
                self.as_request(kind, self.run_statement(stmt, issuer)).await
            }
            _ => self.run_statement(stmt, issuer).await,
        }
    }

    async fn run_statement(&self, stmt: DfStatement, issuer: &str) -> Result<QueryOutput> {
        if let DfStatement::Statement(s) = &stmt {
            if let Some(out) = self.ebb_statement(s, issuer).await? {
                return Ok(out);
            }
        }
        // The statement as the deletion ledger records it (only a DELETE needs it).
        let delete_text = match &stmt {
            DfStatement::Statement(s) if matches!(**s, SqlStatement::Delete(_)) => s.to_string(),
            _ => String::new(),
        };
        let kind = match &stmt {
            DfStatement::Statement(s) if matches!(**s, SqlStatement::Insert(_)) => {
                StatementKind::Insert
            }
            DfStatement::Statement(s) if matches!(**s, SqlStatement::Update(_)) => {
                return Err(QueryError::Unsupported(
                    "UPDATE; write the points again with new values (a later write of the same \
                     series and time replaces its fields)"
                        .into(),
                ))
            }
            DfStatement::CreateExternalTable(_) | DfStatement::CopyTo(_) => {
                return Err(QueryError::Unsupported("external tables and COPY".into()))
            }
            _ => StatementKind::Query,
        };
        let state = self.ctx.state();
        let plan = state.statement_to_plan(stmt).await?;
        if let LogicalPlan::Dml(d) = &plan {
            if d.op == WriteOp::Delete {
                // Optimized first: types coerced, constants (and now()) folded, and the filter
                // split between the scan (what pushdown takes) and a filter above it.
                let optimized = state.optimize(&plan)?;
                let LogicalPlan::Dml(d) = &optimized else {
                    return Err(QueryError::Internal("DELETE plan lost its DML node".into()));
                };
                let shards: Arc<dyn Shards> = Arc::new(LocalShards::new(self.db.clone()));
                let op = delete_op(shards, d, &self.database, delete_text).await?;
                return self.apply(op, issuer).await;
            }
        }
        if let LogicalPlan::Ddl(_) = &plan {
            return Err(QueryError::Unsupported(
                "this DDL statement; EbbDB supports CREATE/ALTER/DROP TABLE and CREATE DATABASE"
                    .into(),
            ));
        }
        let (schema, stream) = match (&self.limits, &plan) {
            (_, LogicalPlan::Statement(_) | LogicalPlan::Ddl(_)) | (None, _) => {
                let df = self.ctx.execute_logical_plan(plan).await?;
                let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
                (schema, df.execute_stream().await?)
            }
            (Some((server, limits)), _) => limited_stream(&self.ctx, server, limits, plan).await?,
        };
        Ok(QueryOutput { schema, stream, kind })
    }

    /// EbbDB's own statements; `None` for the rest.
    async fn ebb_statement(&self, s: &SqlStatement, issuer: &str) -> Result<Option<QueryOutput>> {
        match ShardOp::from_ddl(s, &self.database)? {
            Some(op) => self.apply(op, issuer).await.map(Some),
            None => Ok(None),
        }
    }

    /// Applies `op` to the session's database (as the session's request, if it has one).
    async fn apply(&self, op: ShardOp, issuer: &str) -> Result<QueryOutput> {
        let (db, issuer, request) = (self.db.clone(), issuer.to_string(), self.request.clone());
        let (op, id, done) = blocking(move || {
            let (id, done) = super::shard::op::apply(&db, &op, &issuer, request.as_ref())?;
            Ok((op, id, done))
        })
        .await?;
        super::shard::op::answer(&op, id, &done)
    }

    /// Runs a parsed `ERASE`.
    pub async fn erase(&self, stmt: EraseStatement) -> Result<QueryOutput> {
        self.erase_by(stmt, self.issuer()).await
    }

    /// Runs a parsed `ERASE`, recorded as issued by `issuer`.
    pub async fn erase_by(&self, stmt: EraseStatement, issuer: &str) -> Result<QueryOutput> {
        // As the session's request, if it has one: `apply` answers a repeat from its record.
        self.apply(ShardOp::erase(&stmt, &self.database), issuer).await
    }
}

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
        datafusion::execution::SessionStateBuilder::new()
            .with_config(SessionConfig::new().with_create_default_catalog_and_schema(false))
            .with_default_features()
            .with_optimizer_rules(rules)
            .with_physical_optimizer_rule(Arc::new(super::partial::PartialAggregates))
            .with_physical_optimizer_rule(Arc::new(super::coop::YieldingAmplifiers))
            .build()
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
        .with_runtime(crate::front::limits::statement_runtime(server, limits));
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

/// Runs engine work off the async threads.
pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| QueryError::Internal(format!("task failed: {e}")))?
}
