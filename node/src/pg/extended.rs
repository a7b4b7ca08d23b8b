//! The extended query protocol: Parse keeps a statement's SQL, Describe plans it with DataFusion
//! (without running it) for its result columns and parameter types, and Execute runs it. A query
//! runs as a front-door [`PreparedQuery`] (planned at its first run, its plans kept for the
//! connection, Bind's values bound to them); other statements, and values of types without a
//! plan value (`numeric`, `date`, `bytea`), run as SQL with the values written in as literals.

use std::fmt::Debug;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use datafusion::logical_expr::LogicalPlan;
use ebb_query::QueryError;
use futures::future::{select, Either};
use futures::{Sink, SinkExt};
use pgwire::api::portal::{Format, Portal, PortalExecutionState};
use pgwire::api::query::{
    send_describe_response, send_execution_response, send_partial_query_response,
    ExtendedQueryHandler,
};
use pgwire::api::results::{
    DescribePortalResponse, DescribeStatementResponse, FieldInfo, Response, Tag,
};
use pgwire::api::stmt::{QueryParser, StoredStatement};
use pgwire::api::store::{Entry, PortalStore};
use pgwire::api::{
    ClientInfo, ClientPortalStore, ConnectionHandle, PgWireConnectionState, Type, DEFAULT_NAME,
};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::data::{NoData, ParameterDescription};
use pgwire::messages::extendedquery::{Describe, Execute, TARGET_TYPE_BYTE_STATEMENT};
use pgwire::messages::response::EmptyQueryResponse;
use pgwire::messages::PgWireBackendMessage;
use tracing::debug;

use super::{
    first_word, lexer, outcome, params, query_error, returns_rows, run, setting_schema, special,
    types, user_error, Backend, Outcome, Special,
};
use datafusion::common::ScalarValue;
use ebb_query::front::{PreparedQuery, Session};

/// A statement prepared with Parse: its SQL (one statement), the highest `$n` it uses, and the
/// parameter types DataFusion inferred for it, once they have been asked for.
#[derive(Debug, Clone)]
pub(super) struct Prepared {
    sql: Arc<str>,
    params: usize,
    inferred: Arc<OnceLock<Vec<Option<Type>>>>,
    /// Its plans, once it has run (a query's runs bind values to them).
    query: Arc<PreparedQuery>,
}

impl Prepared {
    /// Parameter types by position, as far as the planner could infer them.
    async fn inferred_types(&self, session: &Session) -> Vec<Option<Type>> {
        if let Some(types) = self.inferred.get() {
            return types.clone();
        }
        let types = match describe(session, &self.sql, self.params, None).await {
            Ok(description) => description.params,
            Err(_) => vec![None; self.params],
        };
        let _ = self.inferred.set(types.clone());
        types
    }
}

/// Parse: keeps the SQL text; planning waits for Describe or Execute.
#[derive(Debug, Default)]
pub(super) struct Parser;

/// Most parameters a statement may take (the protocol counts them in 16 bits).
pub(super) const MAX_PARAMS: usize = 65_535;

#[async_trait]
impl QueryParser for Parser {
    type Statement = Prepared;

    async fn parse_sql<C>(
        &self,
        _client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<Prepared>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        match lexer::split_statements(sql).as_slice() {
            [] => Ok(None),
            [one] => {
                let params = lexer::placeholder_count(one);
                if params > MAX_PARAMS {
                    return Err(user_error(
                        "42P02",
                        format!(
                            "placeholder ${params}: a statement takes at most {MAX_PARAMS} \
                             parameters"
                        ),
                    ));
                }
                Ok(Some(Prepared {
                    sql: Arc::from(*one),
                    params,
                    inferred: Arc::default(),
                    query: Arc::new(PreparedQuery::new(one)),
                }))
            }
            _ => Err(user_error(
                "42601",
                "cannot insert multiple commands into a prepared statement".to_owned(),
            )),
        }
    }

    fn get_parameter_types(&self, _stmt: &Prepared) -> PgWireResult<Vec<Type>> {
        Ok(Vec::new())
    }

    fn get_result_schema(
        &self,
        _stmt: &Prepared,
        _column_format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        Ok(Vec::new())
    }
}

#[async_trait]
impl ExtendedQueryHandler for Backend {
    type Statement = Prepared;
    type QueryParser = Parser;

    fn query_parser(&self) -> Arc<Parser> {
        Arc::clone(&self.parser)
    }

    /// pgwire answers Describe of a statement that has parameters but no result columns with an
    /// empty RowDescription; PostgreSQL sends NoData there, and JDBC relies on it.
    async fn on_describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if message.target_type == TARGET_TYPE_BYTE_STATEMENT {
            let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
            if let Some(Entry::Value(stmt)) = client.portal_store().get_statement(name) {
                let described = self.do_describe_statement(client, &stmt).await?;
                if !described.fields.is_empty() {
                    return send_describe_response(client, &described).await;
                }
                let oids = described.parameters.iter().map(Type::oid).collect();
                let parameters = ParameterDescription::new(oids);
                client.send(PgWireBackendMessage::ParameterDescription(parameters)).await?;
                client.send(PgWireBackendMessage::NoData(NoData::new())).await?;
                return Ok(());
            }
        }
        self._on_describe(client, message).await
    }

    /// Execute, as pgwire's own but with the rows sent as the result stream yields them: pgwire
    /// gathers the rows of one Execute (every row, for the usual row count of 0) in memory
    /// before it sends the first, so a large result took memory without bound. A portal
    /// suspended by a row count keeps its stream for the client's next Execute.
    async fn on_execute<C>(&self, client: &mut C, message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
            return Err(PgWireError::NotReadyForQuery);
        }
        let mut transaction = client.transaction_status();
        client.set_state(PgWireConnectionState::QueryInProgress);
        let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
        // The guard in front of the codec has made a negative count 0 and capped a large one.
        let max_rows = usize::try_from(message.max_rows).unwrap_or(0);
        let portal = match client.portal_store().get_portal(name) {
            Some(Entry::Value(portal)) => portal,
            Some(Entry::Empty) => {
                client
                    .feed(PgWireBackendMessage::EmptyQueryResponse(EmptyQueryResponse::new()))
                    .await?;
                client.set_state(PgWireConnectionState::ReadyForQuery);
                return Ok(());
            }
            None => return Err(PgWireError::PortalNotFound(name.to_owned())),
        };
        let state = portal.state();
        let mut state = state.lock().await;
        let pending = match &mut *state {
            PortalExecutionState::Initial => {
                let handle = client.session_extensions().get::<Arc<ConnectionHandle>>();
                let cancelled = match handle {
                    Some(handle) => Some(handle.start_query().await),
                    None => None,
                };
                let ran = self.do_query(client, portal.as_ref(), max_rows);
                let response = match cancelled {
                    Some(cancelled) => match select(ran, cancelled).await {
                        Either::Left((response, _)) => response,
                        Either::Right(_) => Err(PgWireError::QueryCanceled),
                    },
                    None => ran.await,
                }?;
                match response {
                    Response::Query(rows) => {
                        *state = PortalExecutionState::Suspended(rows);
                        true
                    }
                    Response::EmptyQuery => {
                        let empty =
                            PgWireBackendMessage::EmptyQueryResponse(EmptyQueryResponse::new());
                        client.feed(empty).await?;
                        false
                    }
                    Response::Execution(tag) => {
                        send_execution_response(client, tag).await?;
                        false
                    }
                    Response::TransactionStart(tag) => {
                        send_execution_response(client, tag).await?;
                        transaction = transaction.to_in_transaction_state();
                        false
                    }
                    Response::TransactionEnd(tag) => {
                        send_execution_response(client, tag).await?;
                        transaction = transaction.to_idle_state();
                        drop(state);
                        client.portal_store().rm_portal(DEFAULT_NAME);
                        client.set_state(PgWireConnectionState::ReadyForQuery);
                        client.set_transaction_status(transaction);
                        return Ok(());
                    }
                    Response::Error(err) => {
                        client.send(PgWireBackendMessage::ErrorResponse((*err).into())).await?;
                        transaction = transaction.to_error_state();
                        false
                    }
                    Response::CopyIn(_) | Response::CopyOut(_) | Response::CopyBoth(_) => {
                        return Err(user_error(
                            "0A000",
                            "COPY is not supported; use INSERT or the write endpoints".to_owned(),
                        ));
                    }
                }
            }
            PortalExecutionState::Suspended(_) => true,
            PortalExecutionState::Finished => {
                // PostgreSQL answers a completed portal's Execute with no rows.
                let done = Tag::new("SELECT").with_rows(0);
                send_execution_response(client, done).await?;
                false
            }
        };
        if pending {
            if let PortalExecutionState::Suspended(rows) = &mut *state {
                if !send_partial_query_response(client, rows, max_rows).await? {
                    *state = PortalExecutionState::Finished;
                }
            }
        }
        client.set_state(PgWireConnectionState::ReadyForQuery);
        client.set_transaction_status(transaction);
        Ok(())
    }

    async fn do_describe_statement<C>(
        &self,
        client: &mut C,
        target: &StoredStatement<Prepared>,
    ) -> PgWireResult<DescribeStatementResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = self.session(&*client);
        let stmt = &target.statement;
        let description = describe(&session, &stmt.sql, stmt.params, None).await?;
        let _ = stmt.inferred.set(description.params.clone());
        let count = stmt.params.max(target.parameter_types.len());
        let params = resolve_types(&target.parameter_types, &description.params, count);
        Ok(DescribeStatementResponse::new(params, description.fields))
    }

    async fn do_describe_portal<C>(
        &self,
        client: &mut C,
        portal: &Portal<Prepared>,
    ) -> PgWireResult<DescribePortalResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = self.session(&*client);
        let sql = bound_sql(&session, portal).await?;
        let formats = Some(&portal.result_column_format);
        Ok(DescribePortalResponse::new(describe(&session, &sql, 0, formats).await?.fields))
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Prepared>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = self.session(&*client);
        let formats = Some(&portal.result_column_format);
        let stmt = &portal.statement.statement;
        let mut ran = None;
        if let Some(values) = bound_values(&session, portal).await? {
            debug!(sql = %ebb_query::access::statement::redact(&stmt.sql), "prepared query");
            let out = session.execute_prepared(&stmt.query, values).await;
            if let Some(out) = out.map_err(|e| query_error(&e))? {
                ran = Some(outcome(client, &stmt.sql, out, formats).await?);
            }
        }
        let ran = match ran {
            Some(ran) => ran,
            None => {
                let sql = bound_sql(&session, portal).await?;
                debug!(sql = %ebb_query::access::statement::redact(&sql), "extended query");
                run(client, &session, &sql, formats).await?
            }
        };
        Ok(match ran {
            Outcome::Rows(rows) => Response::Query(rows),
            Outcome::Tag(tag) => Response::Execution(tag),
            Outcome::Begin(tag) => Response::TransactionStart(tag),
            Outcome::End(tag) => Response::TransactionEnd(tag),
        })
    }
}

/// A type the client declared for parameter `idx` (`unknown` counts as none).
fn declared_type(declared: &[Option<Type>], idx: usize) -> Option<Type> {
    declared.get(idx).cloned().flatten().filter(|t| *t != Type::UNKNOWN)
}

/// Parameter types: declared by the client, else inferred by the planner, else `text`.
fn resolve_types(declared: &[Option<Type>], inferred: &[Option<Type>], count: usize) -> Vec<Type> {
    (0..count)
        .map(|idx| {
            declared_type(declared, idx)
                .or_else(|| inferred.get(idx).cloned().flatten())
                .unwrap_or(Type::TEXT)
        })
        .collect()
}

/// The parameter types of `portal`: declared by the client, else inferred by the planner.
async fn param_types(session: &Session, portal: &Portal<Prepared>) -> Vec<Type> {
    let stmt = &portal.statement.statement;
    let values = &portal.parameters;
    let declared = &portal.statement.parameter_types;
    let inferred = if (0..values.len()).any(|idx| declared_type(declared, idx).is_none()) {
        stmt.inferred_types(session).await
    } else {
        Vec::new()
    };
    resolve_types(declared, &inferred, values.len())
}

/// The portal's bound parameters as values, if its statement may run as a prepared query (not
/// one answered here, every value of a type that has a value).
async fn bound_values(
    session: &Session,
    portal: &Portal<Prepared>,
) -> PgWireResult<Option<Vec<ScalarValue>>> {
    let stmt = &portal.statement.statement;
    if special(&stmt.sql).is_some() || !returns_rows(&first_word(&stmt.sql)) {
        return Ok(None);
    }
    if portal.parameters.len() != stmt.params {
        // Reported by the SQL path.
        return Ok(None);
    }
    let types = param_types(session, portal).await;
    let mut values = Vec::with_capacity(types.len());
    for (idx, (value, ty)) in portal.parameters.iter().zip(&types).enumerate() {
        let binary = types::is_binary(&portal.parameter_format, idx);
        match params::param_value(value.as_deref(), ty, binary)? {
            Some(v) => values.push(v),
            None => return Ok(None),
        }
    }
    Ok(Some(values))
}

/// The portal's SQL with its bound parameters substituted.
async fn bound_sql(session: &Session, portal: &Portal<Prepared>) -> PgWireResult<String> {
    let stmt = &portal.statement.statement;
    let values = &portal.parameters;
    if values.is_empty() && stmt.params == 0 {
        return Ok(stmt.sql.to_string());
    }
    let param_types = param_types(session, portal).await;
    let literals = values
        .iter()
        .zip(&param_types)
        .enumerate()
        .map(|(idx, (value, ty))| {
            let binary = types::is_binary(&portal.parameter_format, idx);
            params::param_literal(value.as_deref(), ty, binary)
        })
        .collect::<PgWireResult<Vec<String>>>()?;
    lexer::substitute(&stmt.sql, &literals).map_err(|missing| {
        user_error(
            "08P01",
            format!("bind message supplies {} parameters, but ${missing} is used", literals.len()),
        )
    })
}

/// What Describe reports: result columns, and parameter types the planner inferred (by position).
struct Description {
    fields: Vec<FieldInfo>,
    params: Vec<Option<Type>>,
}

/// Describes `sql` (with `params` placeholders) by planning it, without running it.
async fn describe(
    session: &Session,
    sql: &str,
    params: usize,
    formats: Option<&Format>,
) -> PgWireResult<Description> {
    let mut description = Description { fields: Vec::new(), params: vec![None; params] };
    match special(sql) {
        Some(Special::Setting(name, _)) => {
            description.fields = types::describe_schema(&setting_schema(name), formats).0;
            return Ok(description);
        }
        Some(_) => return Ok(description),
        None => {}
    }
    let word = first_word(sql);
    if word == "BACKUP" {
        // Answers one row, the backup's (as `system.backups` shows it).
        description.fields = types::describe_schema(&ebb_query::backups::schema(), formats).0;
        return Ok(description);
    }
    let rows = returns_rows(&word);
    if !rows && !matches!(word.as_str(), "INSERT" | "DELETE") {
        return Ok(description);
    }
    let plan = match plan_statement(session, sql).await {
        Ok(plan) => plan,
        // Errors in statements without rows are reported when they run.
        Err(_) if !rows => return Ok(description),
        Err(e) if params == 0 => return Err(query_error(&e)),
        Err(e) => {
            // Placeholders whose types the planner cannot resolve (`SELECT $1`): describe the
            // columns with the placeholders as NULLs.
            let nulls = vec!["NULL".to_owned(); params];
            let sql = lexer::substitute(sql, &nulls).map_err(|_| query_error(&e))?;
            plan_statement(session, &sql).await.map_err(|_| query_error(&e))?
        }
    };
    if let Ok(inferred) = plan.get_parameter_types() {
        for (id, data_type) in inferred {
            let idx = id.strip_prefix('$').and_then(|n| n.parse::<usize>().ok());
            let slot =
                idx.and_then(|n| n.checked_sub(1)).and_then(|i| description.params.get_mut(i));
            if let (Some(slot), Some(data_type)) = (slot, data_type) {
                *slot = Some(types::param_type(&data_type));
            }
        }
    }
    if rows {
        description.fields = types::describe_schema(plan.schema().as_arrow(), formats).0;
    }
    Ok(description)
}

/// Plans one statement the way `SqlSession` runs it, without running it.
async fn plan_statement(session: &Session, sql: &str) -> Result<LogicalPlan, QueryError> {
    let mut statements = session.parse(sql)?;
    let statement = statements.pop_front().ok_or_else(|| QueryError::invalid("empty query"))?;
    // A plan tells what exists: authorized before it is made.
    session.authorize(&statement)?;
    session.plan(statement).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_parameter_types() {
        let declared = [Some(Type::INT4), None, Some(Type::UNKNOWN)];
        let inferred = [None, Some(Type::INT8), None];
        assert_eq!(
            resolve_types(&declared, &inferred, 4),
            vec![Type::INT4, Type::INT8, Type::TEXT, Type::TEXT]
        );
    }
}
