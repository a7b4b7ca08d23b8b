//! Prepared queries: planned once, run many times with new parameter values.
//!
//! A prepared query keeps the logical plan of its SQL, so a run neither parses nor plans SQL
//! again, and, where it is safe, a *generic plan*: the optimized plan with its `$n`
//! placeholders still in it, so a run binds the values and plans physically, and nothing more.
//! A generic plan is made only when every function in the query is immutable (`now()` is folded
//! when a plan is optimized, so a plan using it is optimized again every run) and every
//! placeholder has a type. On its first run, the bound generic plan must equal the plan
//! optimizing the bound query gives, else it is dropped for good; and every run checks that
//! each scan takes over the bound filters just as it took over the placeholders (a `NULL`
//! bound where a timestamp stood is not taken over), else that run is optimized on its own.
//!
//! A prepared query reads only tables of databases (not `system` or `information_schema`
//! tables, whose providers may hold what they show); others run as SQL with their values
//! written in, by the caller. Every run checks the tables the plan reads are the same tables
//! with the same columns (on the same shards), else plans anew, and checks the privileges the
//! query needs against the principal's grants of the moment. A plan made anew must answer with
//! the columns the first did (as in PostgreSQL, a client may hold them: `SELECT *` over a table
//! that gained a column fails until prepared again).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use datafusion::arrow::datatypes::{DataType, Fields};
use datafusion::catalog::TableProvider;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{ParamValues, ScalarValue, TableReference};
use datafusion::datasource::source_as_provider;
use datafusion::execution::SessionState;
use datafusion::logical_expr::{Expr, LogicalPlan, TableScan, Volatility};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::Statement as SqlStatement;
use parking_lot::Mutex;

use super::authorize::{self, Need};
use super::{limits, Session};
use crate::error::{QueryError, Result};
use crate::sql::{QueryOutput, ShardTable, StatementKind};
use crate::statements::Running;

/// A statement prepared once and run with parameter values (`$1`, `$2`...) many times.
pub struct PreparedQuery {
    sql: Arc<str>,
    planned: Mutex<Option<Planned>>,
    /// The columns its first plan answered with, where a client may hold them (PostgreSQL's
    /// RowDescription): a plan made anew must answer with the same. `None` for queries sent
    /// as SQL text, whose clients learn the columns with every answer.
    columns: Option<OnceLock<Fields>>,
}

impl std::fmt::Debug for PreparedQuery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedQuery").field("sql", &self.sql).finish_non_exhaustive()
    }
}

/// What planning a prepared statement gave.
#[derive(Clone)]
enum Planned {
    /// Not a query over database tables: it runs as SQL.
    AsSql,
    /// A query's plans.
    Query(Arc<Plans>),
}

/// A table a plan reads, by the name it was read by.
type TableRead = (TableReference, Arc<dyn TableProvider>);

/// A prepared query's optimized plan for one run, and the state it runs in.
pub(super) struct Bound {
    state: SessionState,
    plan: LogicalPlan,
}

/// The plans of a prepared query.
struct Plans {
    /// The privileges it needs.
    needs: Vec<Need>,
    /// The tables its plans read, as they were when planned.
    tables: Vec<TableRead>,
    /// Its logical plan, placeholders unbound.
    logical: LogicalPlan,
    /// The type of each `$n`, by `n - 1`.
    types: Vec<DataType>,
    /// The generic plan, while it may be used.
    generic: Mutex<Option<LogicalPlan>>,
    /// The generic plan, bound, gave the plan optimizing the bound query gives.
    verified: AtomicBool,
}

impl PreparedQuery {
    /// `sql` (one statement), not planned until its first run.
    pub fn new(sql: &str) -> PreparedQuery {
        PreparedQuery {
            sql: Arc::from(sql),
            planned: Mutex::new(None),
            columns: Some(OnceLock::new()),
        }
    }

    /// The query of SQL text sent with its literals made parameters: its answer's columns may
    /// change with the tables it reads.
    fn of_text(sql: &str) -> PreparedQuery {
        PreparedQuery { sql: Arc::from(sql), planned: Mutex::new(None), columns: None }
    }

    /// The statement.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// True if its runs bind a generic plan (verified on a first run) and plan nothing but
    /// physically.
    pub fn generic(&self) -> bool {
        match &*self.planned.lock() {
            Some(Planned::Query(plans)) => {
                plans.verified.load(Ordering::Acquire) && plans.generic.lock().is_some()
            }
            _ => false,
        }
    }
}

/// Prepared queries of statements sent as SQL, by their text with literals made parameters
/// (see [`crate::sql::parameters`]).
#[derive(Default)]
pub(super) struct PlanCache {
    queries: Mutex<HashMap<String, Arc<PreparedQuery>>>,
}

/// Most queries a cache keeps (it starts over when full).
const MAX_CACHED: usize = 128;
/// Longest query text a cache keeps.
const MAX_CACHED_TEXT: usize = 16 * 1024;

impl PlanCache {
    /// The prepared query of `text`, made if new; `None` if `text` is too long to keep.
    fn query(&self, text: String) -> Option<Arc<PreparedQuery>> {
        if text.len() > MAX_CACHED_TEXT {
            return None;
        }
        let mut queries = self.queries.lock();
        if let Some(q) = queries.get(&text) {
            return Some(q.clone());
        }
        if queries.len() >= MAX_CACHED {
            queries.clear();
        }
        let q = Arc::new(PreparedQuery::of_text(&text));
        queries.insert(text, q.clone());
        Some(q)
    }
}

impl Session {
    /// How many queries sent as SQL the session keeps plans of (shared by the requests on its
    /// database, or its connection's own).
    pub fn cached_plans(&self) -> usize {
        self.plans.queries.lock().len()
    }

    /// Runs `stmt`, sent as SQL, as the prepared query of its text with the literals its
    /// `WHERE` compares columns with made parameters; `Ok(None)` if it cannot (not a query, not
    /// one that can be planned ahead, or its plan failed: the caller runs it as it is and
    /// reports its own errors).
    pub(super) async fn run_parameterized(
        &self,
        stmt: &SqlStatement,
        running: &Running,
    ) -> Result<Option<QueryOutput>> {
        let mut stmt = stmt.clone();
        let Some(values) = crate::sql::parameters::parameterize(&mut stmt) else {
            return Ok(None);
        };
        let Some(query) = self.plans.query(stmt.to_string()) else { return Ok(None) };
        match self.bind_within_timeout(&query, values).await? {
            Ok(Some(bound)) => Ok(Some(self.run_bound(bound, running.clone()).await?)),
            // Refused for a privilege: once is enough (each refusal is counted).
            Err(e @ QueryError::Access(_)) => Err(e),
            Ok(None) | Err(_) => Ok(None),
        }
    }

    /// Runs `query` with `values` for its placeholders (cast to the types they have in the
    /// query), as a statement of its own. `Ok(None)` if `query` is not one that can be planned
    /// ahead: the caller runs it as SQL with the values written in.
    pub async fn execute_prepared(
        &self,
        query: &Arc<PreparedQuery>,
        values: Vec<ScalarValue>,
    ) -> Result<Option<QueryOutput>> {
        let running = self.running();
        let (this, query, log) = (self.clone(), query.clone(), running.clone());
        // Planned and run on the statement threads, like every statement.
        let out = self
            .door
            .queries
            .run(async move {
                match this.bind_within_timeout(&query, values).await.and_then(|r| r) {
                    Ok(Some(bound)) => this.run_bound(bound, log).await.map(Some),
                    other => other.map(|_| None),
                }
            })
            .await;
        match out {
            Ok(Some(mut o)) => {
                let stream = std::mem::replace(&mut o.stream, super::empty_stream());
                o.stream = self.door.queries.drive(stream);
                Ok(Some(o))
            }
            Ok(None) => Ok(None),
            Err(e) => {
                running.failed();
                Err(e)
            }
        }
    }

    /// [`Session::bind_prepared`] within the session's statement timeout (planning, and in a
    /// cluster looking the tables up on the shards, can take long): the outer error is the
    /// timeout's.
    async fn bind_within_timeout(
        &self,
        query: &PreparedQuery,
        values: Vec<ScalarValue>,
    ) -> Result<Result<Option<Bound>>> {
        let bind = self.bind_prepared(query, values);
        let timeout = self.settings.lock().timeout(self.door.limits.statement_timeout);
        match timeout {
            Some(t) => tokio::time::timeout(t, bind)
                .await
                .map_err(|_| QueryError::from(limits::timed_out(t))),
            None => Ok(bind.await),
        }
    }

    /// `query`'s plan with `values` bound, once the principal is found to hold the privileges
    /// it needs; `None` if `query` is not one that can be planned ahead.
    pub(super) async fn bind_prepared(
        &self,
        query: &PreparedQuery,
        values: Vec<ScalarValue>,
    ) -> Result<Option<Bound>> {
        // Authorized before anything else is done for the principal (planning authorizes too).
        let plans = match self.prepared_plans(query).await? {
            Planned::AsSql => return Ok(None),
            Planned::Query(plans) => plans,
        };
        // A state of its own: the time `now()` reads is this run's.
        let state = self.context().state();
        let Some(plan) = plans.bind(&state, values)? else { return Ok(None) };
        Ok(Some(Bound { state, plan }))
    }

    /// Runs a bound plan as a statement of its own (a slot, the statement timeout).
    pub(super) async fn run_bound(&self, bound: Bound, running: Running) -> Result<QueryOutput> {
        let slot = limits::Slot::new(self.door.slot().await?);
        let run = async {
            let (runtime, limits) = (&self.door.runtime, &self.door.limits);
            let (schema, stream) =
                crate::sql::optimized_stream(&bound.state, runtime, limits, &bound.plan).await?;
            Ok(QueryOutput { schema, stream, kind: StatementKind::Query })
        };
        let (out, timeout) = self.start(true, Some(slot.clone()), run, running).await?;
        slot.release_after((timeout > std::time::Duration::ZERO).then_some(timeout));
        Ok(out)
    }

    /// `query`'s plans, made again if a table they read changed.
    async fn prepared_plans(&self, query: &PreparedQuery) -> Result<Planned> {
        let planned = query.planned.lock().clone();
        if let Some(planned) = planned {
            match &planned {
                Planned::AsSql => return Ok(planned),
                Planned::Query(plans) => {
                    self.authorize_needs(&plans.needs)?;
                    if self.same_tables(&plans.tables).await {
                        return Ok(planned);
                    }
                }
            }
        }
        let planned = self.plan_prepared(&query.sql).await?;
        if let (Planned::Query(plans), Some(first)) = (&planned, &query.columns) {
            let columns = plans.logical.schema().as_arrow().fields().clone();
            // Checked before the plan is kept, so every run of the statement fails alike.
            if *first.get_or_init(|| columns.clone()) != columns {
                return Err(QueryError::Unsupported(
                    "cached plan must not change result type: a table the prepared statement \
                     reads changed its columns; prepare it again"
                        .into(),
                ));
            }
        }
        *query.planned.lock() = Some(planned.clone());
        Ok(planned)
    }

    /// Checks the principal holds each of `needs`.
    fn authorize_needs(&self, needs: &[Need]) -> Result<()> {
        if self.door.auth_required() {
            for need in needs {
                self.door.authorize(&self.who, need.0.as_deref(), need.1)?;
            }
        }
        Ok(())
    }

    /// True if every table in `tables` is still the same table with the same columns.
    async fn same_tables(&self, tables: &[TableRead]) -> bool {
        for (name, then) in tables {
            match self.context().table_provider(name.clone()).await {
                Ok(now) if same_table(then.as_ref(), now.as_ref()) => {}
                _ => return false,
            }
        }
        true
    }

    /// Plans `sql` for [`Session::execute_prepared`].
    async fn plan_prepared(&self, sql: &str) -> Result<Planned> {
        let mut statements = self.parse(sql)?;
        let (Some(stmt), true) = (statements.pop_front(), statements.is_empty()) else {
            return Ok(Planned::AsSql);
        };
        let query =
            matches!(&stmt, DfStatement::Statement(s) if matches!(**s, SqlStatement::Query(_)));
        if !query {
            return Ok(Planned::AsSql);
        }
        let state = self.context().state();
        let needs = authorize::needs(&stmt, &state, self.database())?;
        // Checked before planning: a plan can tell what exists.
        self.authorize_needs(&needs)?;
        let logical = state.statement_to_plan(stmt).await?;
        // A placeholder without one type (compared with columns of two) runs as SQL.
        let Ok(Some(types)) = param_types(&logical) else { return Ok(Planned::AsSql) };
        let Some(tables) = tables_read(&logical)? else { return Ok(Planned::AsSql) };
        let generic = match immutable(&logical)? {
            // A rule that cannot optimize placeholders leaves the query without a generic plan.
            true => state.optimize(&logical).ok(),
            false => None,
        };
        Ok(Planned::Query(Arc::new(Plans {
            needs,
            tables,
            logical,
            types,
            generic: Mutex::new(generic),
            verified: AtomicBool::new(false),
        })))
    }
}

impl Plans {
    /// The optimized plan of the query with `values` bound: the generic plan's where it may be
    /// used, else the bound query optimized in `state`.
    /// `None` if a value does not keep its meaning as the type of its placeholder (`2.5` for
    /// an integer column: SQL compares it as a float, a cast would make it 2), so the query
    /// runs as SQL with the values written in.
    fn bind(&self, state: &SessionState, values: Vec<ScalarValue>) -> Result<Option<LogicalPlan>> {
        if values.len() != self.types.len() {
            return Err(QueryError::invalid(format!(
                "the statement takes {} parameters, {} were given",
                self.types.len(),
                values.len()
            )));
        }
        let mut cast = Vec::with_capacity(values.len());
        for (i, (v, t)) in values.into_iter().zip(&self.types).enumerate() {
            let c = v
                .cast_to(t)
                .map_err(|e| QueryError::invalid(format!("parameter ${} as {t}: {e}", i + 1)))?;
            if !keeps_meaning(&v, &c) {
                return Ok(None);
            }
            cast.push(c);
        }
        let values = cast;
        let params = ParamValues::from(values);
        let custom = || -> Result<LogicalPlan> {
            let bound = self.logical.clone().with_param_values(params.clone())?;
            Ok(state.optimize(&bound)?)
        };
        let generic = self.generic.lock().clone();
        let Some(generic) = generic else { return custom().map(Some) };
        let bound = generic.clone().with_param_values(params.clone())?;
        if !same_pushdown(&generic, &bound)? {
            return custom().map(Some);
        }
        if self.verified.load(Ordering::Acquire) {
            return Ok(Some(bound));
        }
        let optimized = custom()?;
        if optimized == bound {
            self.verified.store(true, Ordering::Release);
        } else {
            tracing::debug!("the generic plan of a prepared query differs; optimizing each run");
            *self.generic.lock() = None;
        }
        Ok(Some(optimized))
    }
}

/// True if `cast` (`value` cast to its placeholder's type) means what `value` does in SQL: a
/// number cast to another number type must cast back to itself; a number cannot stand for a
/// string, boolean or time (SQL coerces those its own way), nor a string for a number.
fn keeps_meaning(value: &ScalarValue, cast: &ScalarValue) -> bool {
    let (from, to) = (value.data_type(), cast.data_type());
    if from == to || value.is_null() {
        return true;
    }
    match (from.is_numeric(), to.is_numeric()) {
        (true, true) => cast.cast_to(&from).is_ok_and(|back| back == *value),
        (false, false) => true,
        _ => false,
    }
}

/// The type of each `$n` of `plan`, by `n - 1`; `None` if one has no type, or placeholders are
/// not numbered `$1..$n`.
fn param_types(plan: &LogicalPlan) -> Result<Option<Vec<DataType>>> {
    let found = plan.get_parameter_types()?;
    let mut types = vec![None; found.len()];
    for (id, t) in found {
        let n = id.strip_prefix('$').and_then(|n| n.parse::<usize>().ok());
        match n.and_then(|n| n.checked_sub(1)).and_then(|i| types.get_mut(i)) {
            Some(slot) => *slot = t,
            None => return Ok(None),
        }
    }
    Ok(types.into_iter().collect())
}

/// The tables `plan` scans, if every one is a table of a database.
fn tables_read(plan: &LogicalPlan) -> Result<Option<Vec<TableRead>>> {
    let mut tables = Vec::new();
    let mut all = true;
    plan.apply_with_subqueries(|p| {
        if let LogicalPlan::TableScan(scan) = p {
            let provider = source_as_provider(&scan.source)?;
            if provider.downcast_ref::<ShardTable>().is_some() {
                tables.push((scan.table_name.clone(), provider));
            } else {
                all = false;
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(all.then_some(tables))
}

/// True if `then` and `now` are the same table with the same columns (on the same shards).
fn same_table(then: &dyn TableProvider, now: &dyn TableProvider) -> bool {
    match (then.downcast_ref::<ShardTable>(), now.downcast_ref::<ShardTable>()) {
        (Some(a), Some(b)) => a.same_as(b),
        _ => false,
    }
}

/// True if every function `plan` calls is immutable.
fn immutable(plan: &LogicalPlan) -> Result<bool> {
    let mut immutable = true;
    plan.apply_with_subqueries(|p| {
        p.apply_expressions(|e| {
            e.apply(|e| {
                if let Expr::ScalarFunction(f) = e {
                    if f.func.signature().volatility != Volatility::Immutable {
                        immutable = false;
                        return Ok(TreeNodeRecursion::Stop);
                    }
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    })?;
    Ok(immutable)
}

/// The scans of `plan`, in a fixed order.
fn scans(plan: &LogicalPlan) -> Result<Vec<TableScan>> {
    let mut out = Vec::new();
    plan.apply_with_subqueries(|p| {
        if let LogicalPlan::TableScan(scan) = p {
            out.push(scan.clone());
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(out)
}

/// True if each scan of `bound` (`generic` with values bound) takes over its filters just as
/// the same scan of `generic` took over the placeholders'.
fn same_pushdown(generic: &LogicalPlan, bound: &LogicalPlan) -> Result<bool> {
    let (before, after) = (scans(generic)?, scans(bound)?);
    if before.len() != after.len() {
        return Ok(false);
    }
    for (a, b) in before.iter().zip(&after) {
        if a.filters.is_empty() {
            continue;
        }
        let a_filters: Vec<&Expr> = a.filters.iter().collect();
        let b_filters: Vec<&Expr> = b.filters.iter().collect();
        if a.source.supports_filters_pushdown(&a_filters)?
            != b.source.supports_filters_pushdown(&b_filters)?
        {
            return Ok(false);
        }
    }
    Ok(true)
}
