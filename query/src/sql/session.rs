//! SQL sessions: statement dispatch between EbbDB's own statements (DDL, `DELETE`) and
//! DataFusion (everything else).

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::execution::context::SessionContext;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::logical_expr::{DmlStatement, LogicalPlan, WriteOp};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::prelude::SessionConfig;
use datafusion::sql::parser::{DFParser, Statement as DfStatement};
use datafusion::sql::sqlparser::ast::{
    AlterTableOperation, ObjectType, SchemaName, Statement as SqlStatement,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;

use super::catalog::EbbCatalog;
use super::ddl::{create_spec, retention_option, table_name};
use super::delete::delete_targets;
use super::erase::{is_erase, parse_erase, EraseStatement};
use super::CATALOG;
use crate::cluster::ShardRequest;
use crate::db::{Database, RequestSpec};
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
                return self.delete(d, delete_text, issuer).await;
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
        let db = self.db.clone();
        let out = match s {
            SqlStatement::CreateTable(ct) => {
                let spec = create_spec(ct, &self.database)?;
                if spec.if_not_exists && db.catalog().table(&spec.database, &spec.name).is_some() {
                    return Ok(Some(command("CREATE TABLE")));
                }
                blocking(move || {
                    db.create_table(
                        &spec.database,
                        &spec.name,
                        spec.tags,
                        spec.fields,
                        spec.retention.unwrap_or_else(|| db.default_retention()),
                    )
                })
                .await?;
                command("CREATE TABLE")
            }
            SqlStatement::AlterTable(at) => {
                let (d, t) = table_name(&at.name, &self.database)?;
                let mut retention = None;
                for op in &at.operations {
                    match op {
                        AlterTableOperation::SetOptionsParens { options }
                        | AlterTableOperation::SetTblProperties { table_properties: options } => {
                            retention = retention_option(options)?;
                        }
                        other => {
                            return Err(QueryError::Unsupported(format!(
                                "ALTER TABLE {other}; EbbDB supports ALTER TABLE t SET \
                                 (retention = '7d'); columns are added by writing them"
                            )))
                        }
                    }
                }
                let Some(retention) = retention else {
                    return Err(QueryError::invalid("ALTER TABLE needs SET (retention = ...)"));
                };
                blocking(move || db.set_retention(&d, &t, retention)).await?;
                command("ALTER TABLE")
            }
            SqlStatement::CreateView(cv) if cv.materialized => {
                let spec = super::rollup::rollup_spec(cv, &self.database)?;
                if spec.if_not_exists && db.catalog().table(&spec.database, &spec.name).is_some() {
                    return Ok(Some(command("CREATE MATERIALIZED VIEW")));
                }
                blocking(move || {
                    db.create_rollup(&spec.database, &spec.name, spec.def, spec.retention)
                })
                .await?;
                command("CREATE MATERIALIZED VIEW")
            }
            SqlStatement::Drop {
                object_type: object @ (ObjectType::Table | ObjectType::MaterializedView),
                names,
                if_exists,
                ..
            } => {
                let names: Vec<(String, String)> =
                    names.iter().map(|n| table_name(n, &self.database)).collect::<Result<_>>()?;
                let if_exists = *if_exists;
                let views = *object == ObjectType::MaterializedView;
                let spec = self.request_spec("drop", String::new(), issuer);
                blocking(move || {
                    for (d, t) in names {
                        if views && db.catalog().table(&d, &t).is_some_and(|t| t.rollup.is_none()) {
                            return Err(QueryError::invalid(format!(
                                "{d}.{t} is a table, not a rollup; use DROP TABLE"
                            )));
                        }
                        match db.drop_table_as(&d, &t, &spec) {
                            Err(QueryError::UnknownTable(_)) if if_exists => {}
                            other => {
                                other?;
                            }
                        }
                    }
                    Ok(())
                })
                .await?;
                command(if views { "DROP MATERIALIZED VIEW" } else { "DROP TABLE" })
            }
            SqlStatement::CreateSchema { schema_name: SchemaName::Simple(n), .. }
            | SqlStatement::CreateDatabase { db_name: n, .. } => {
                let name = match n.0.last() {
                    Some(datafusion::sql::sqlparser::ast::ObjectNamePart::Identifier(i)) => {
                        super::ddl::ident(i)
                    }
                    _ => return Err(QueryError::invalid(format!("invalid database name {n}"))),
                };
                blocking(move || db.create_database(&name)).await?;
                command("CREATE DATABASE")
            }
            _ => return Ok(None),
        };
        Ok(Some(out))
    }

    /// The request a statement of `kind` described by `text`, issued by `issuer`, runs as.
    fn request_spec(&self, kind: &str, text: String, issuer: &str) -> RequestSpec {
        let spec = RequestSpec::new(kind, text).with_issuer(issuer);
        match &self.request {
            Some(r) => spec.with_id(r.id).with_deadline(r.deadline_ms).recorded(),
            None => spec,
        }
    }

    /// Runs a parsed `ERASE`.
    pub async fn erase(&self, stmt: EraseStatement) -> Result<QueryOutput> {
        self.erase_by(stmt, self.issuer()).await
    }

    /// Runs a parsed `ERASE`, recorded as issued by `issuer`.
    pub async fn erase_by(&self, stmt: EraseStatement, issuer: &str) -> Result<QueryOutput> {
        let database = stmt.database.clone().unwrap_or_else(|| self.database.clone());
        let mut spec = self.request_spec("erase", stmt.text(&database), issuer);
        if let Some(d) = stmt.deadline {
            let max = self.db.engine().options().delete_deadline;
            if max.is_some_and(|m| d > m) {
                return Err(QueryError::invalid(format!(
                    "DEADLINE '{}' is longer than the configured delete deadline of {}; ask for \
                     at most that, or leave DEADLINE out",
                    crate::db::human_duration(d.as_secs()),
                    crate::db::human_duration(max.map_or(0, |m| m.as_secs())),
                )));
            }
            if spec.deadline_ms.is_none() {
                let now = self.db.engine().options().clock.now_ms();
                spec.deadline_ms = Some(now.saturating_add(d.as_millis() as u64));
            }
        }
        let db = self.db.clone();
        let (tag, value) = (stmt.tag, stmt.value);
        let run = async move {
            let out = blocking(move || db.erase(&database, &tag, &value, &spec)).await?;
            let done = crate::db::RequestOutcome {
                rows: out.rows,
                series: out.series,
                tables: out.tables,
                deletes: out.ids.len() as u64,
            };
            super::requested::erase_output(out.request, &done)
        };
        self.as_request(StatementKind::Erase, run).await
    }

    async fn delete(&self, d: &DmlStatement, text: String, issuer: &str) -> Result<QueryOutput> {
        let (database, table) = match (d.table_name.schema(), d.table_name.table()) {
            (Some(s), t) => (s.to_string(), t.to_string()),
            (None, t) => (self.database.clone(), t.to_string()),
        };
        let def = self.db.existing(&database, &table)?;
        if let Some(r) = &def.rollup {
            return Err(QueryError::invalid(format!(
                "{table} is a rollup of {}: its rows follow its source; delete from {}",
                r.source, r.source
            )));
        }
        let predicate = filter_of(&d.input);
        let db = self.db.clone();
        let spec = self.request_spec("delete", text, issuer);
        let outcome = blocking(move || {
            let targets = delete_targets(&db, &def, predicate.as_ref())?;
            if targets.is_empty() {
                if spec.recorded {
                    // Recorded all the same, so a repeat does nothing either.
                    db.record_outcome(spec.id, &crate::db::RequestOutcome::default())?;
                }
                return Ok(crate::DeleteOutcome { rows: 0, ids: Vec::new(), request: spec.id });
            }
            db.delete(&def, &targets, &spec)
        })
        .await?;
        let id = (!outcome.ids.is_empty()).then_some(outcome.request);
        super::requested::delete_output(outcome.rows, id, outcome.ids.len() as u64)
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
fn filter_of(plan: &LogicalPlan) -> Option<datafusion::logical_expr::Expr> {
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
