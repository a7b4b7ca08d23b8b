//! Statements: queries (`CommandStatementQuery`, answered by `DoGet` of a ticket holding the
//! SQL), updates (`CommandStatementUpdate`), and prepared statements with parameters.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::sql::server::PeekableFlightDataStream;
use arrow_flight::sql::{
    ActionCreatePreparedStatementResult, CommandPreparedStatementQuery, ProstMessageExt,
    TicketStatementQuery,
};
use arrow_flight::{FlightDescriptor, FlightEndpoint, FlightInfo, IpcMessage, SchemaAsIpc, Ticket};
use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::ipc::writer::IpcWriteOptions;
use datafusion::logical_expr::LogicalPlan;
use datafusion::scalar::ScalarValue;
use ebb_query::front::{PreparedQuery, Principal, Session};
use ebb_query::{QueryError, QueryOutput, StatementKind};
use futures::{StreamExt, TryStreamExt};
use parking_lot::Mutex;
use prost::Message;
use tonic::Status;

use super::query_status;

/// Most prepared statements held at once (over all clients); past it the oldest is closed.
const MAX_PREPARED: usize = 4_096;
/// Most bytes of SQL they hold in all; past it the oldest are closed.
const MAX_PREPARED_BYTES: usize = 256 << 20;
/// Most prepared statements of one user; past it their oldest is closed.
const PREPARED_PER_USER: usize = 64;
/// Largest parameter set a client may bind, in bytes of Arrow IPC messages.
const MAX_PARAMETER_BYTES: usize = 16 << 20;
/// Longest statement accepted.
pub const MAX_SQL_BYTES: usize = 1 << 20;

/// What a statement ticket carries: the database and the SQL. The ticket is the client's to
/// send back, so it gives nothing the client could not send as SQL: `DoGet` authenticates the
/// caller again and runs the SQL as them.
pub fn statement_ticket(database: &str, sql: &str) -> Ticket {
    let handle = serde_json::json!({ "db": database, "sql": sql }).to_string();
    let t = TicketStatementQuery { statement_handle: handle.into_bytes().into() };
    Ticket::new(t.as_any().encode_to_vec())
}

/// A ticket for the answer of a statement already run (see [`Results`]).
pub fn result_ticket(handle: &str) -> Ticket {
    let handle = serde_json::json!({ "result": handle }).to_string();
    let t = TicketStatementQuery { statement_handle: handle.into_bytes().into() };
    Ticket::new(t.as_any().encode_to_vec())
}

/// What a statement ticket asks for.
pub enum TicketFor {
    /// Run this SQL on this database.
    Sql { database: String, sql: String },
    /// The kept answer of a statement run already.
    Result(String),
}

/// What a statement ticket of this server asks for.
pub fn read_ticket(t: &TicketStatementQuery) -> Result<TicketFor, Status> {
    let bad = || Status::invalid_argument("not a statement ticket of this server");
    let v: serde_json::Value = serde_json::from_slice(&t.statement_handle).map_err(|_| bad())?;
    if let Some(h) = v["result"].as_str() {
        return Ok(TicketFor::Result(h.to_string()));
    }
    match (v["db"].as_str(), v["sql"].as_str()) {
        (Some(db), Some(sql)) => {
            Ok(TicketFor::Sql { database: db.to_string(), sql: sql.to_string() })
        }
        _ => Err(bad()),
    }
}

/// How long the answer of a statement run at `GetFlightInfo` waits for its `DoGet`.
const RESULT_TTL: std::time::Duration = std::time::Duration::from_secs(300);
/// Most such answers kept at once.
const MAX_RESULTS: usize = 1_000;
/// ... and of one user.
const RESULTS_PER_USER: usize = 16;

/// A kept answer: whose it is, its columns and rows, and when it was kept.
type Kept = (Option<String>, SchemaRef, Vec<RecordBatch>, Instant);

/// Answers of statements that are not queries (`DELETE`, `ERASE`, DDL), which run when the
/// client asks for their `FlightInfo`: clients (ADBC, JDBC) execute a statement that way and
/// may never fetch its rows, and a `DELETE` must not wait for a fetch. The answer (a row per
/// shard at most) waits here for the ticket's `DoGet`, once.
#[derive(Default)]
pub struct Results {
    map: Mutex<HashMap<String, Kept>>,
}

impl Results {
    /// Keeps an answer for `who`: its ticket handle.
    pub fn keep(&self, who: &Principal, schema: SchemaRef, batches: Vec<RecordBatch>) -> String {
        let mut bytes = [0u8; 16];
        rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut bytes);
        let handle: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let mut map = self.map.lock();
        let now = Instant::now();
        map.retain(|_, (_, _, _, at)| now.duration_since(*at) < RESULT_TTL);
        let mine: Vec<(Instant, String)> =
            map.iter().filter(|(_, v)| v.0 == who.user).map(|(k, v)| (v.3, k.clone())).collect();
        if mine.len() >= RESULTS_PER_USER {
            if let Some((_, k)) = mine.into_iter().min() {
                map.remove(&k);
            }
        }
        if map.len() >= MAX_RESULTS {
            if let Some(k) = map.iter().min_by_key(|(_, v)| v.3).map(|(k, _)| k.clone()) {
                map.remove(&k);
            }
        }
        map.insert(handle.clone(), (who.user.clone(), schema, batches, now));
        handle
    }

    /// Takes the answer `handle` names, if it is `who`'s.
    pub fn take(
        &self,
        handle: &str,
        who: &Principal,
    ) -> Result<(SchemaRef, Vec<RecordBatch>), Status> {
        let mut map = self.map.lock();
        match map.get(handle) {
            Some((user, ..)) if *user == who.user => {
                let (_, schema, batches, _) = map.remove(handle).expect("present");
                Ok((schema, batches))
            }
            _ => Err(Status::not_found("the statement's answer was fetched already, or expired")),
        }
    }
}

/// A `FlightInfo` answering `descriptor` with `schema` and one endpoint of `ticket`.
pub fn flight_info(
    schema: &Schema,
    ticket: Ticket,
    descriptor: FlightDescriptor,
) -> Result<FlightInfo, Status> {
    Ok(FlightInfo::new()
        .try_with_schema(schema)
        .map_err(|e| Status::internal(format!("schema: {e}")))?
        .with_endpoint(FlightEndpoint::new().with_ticket(ticket))
        .with_descriptor(descriptor))
}

/// Plans `sql` as `session` would run it, authorized first, without running it. `None` for
/// statements that are not planned ahead (`ERASE`, `ALTER CLUSTER`, DDL the planner does not
/// know): their columns come with their answer.
pub async fn plan(session: &Session, sql: &str) -> Result<Option<LogicalPlan>, Status> {
    check_length(sql)?;
    let mut statements = match session.parse(sql) {
        Ok(s) => s,
        Err(e @ QueryError::Limit(_)) => return Err(query_status(&e)),
        Err(_) => return Ok(None),
    };
    let Some(statement) = statements.pop_front() else {
        return Err(Status::invalid_argument("empty statement"));
    };
    if !statements.is_empty() {
        return Err(Status::invalid_argument("one statement per request"));
    }
    session.authorize(&statement).map_err(|e| query_status(&e))?;
    let query = {
        use datafusion::sql::parser::Statement as Df;
        use datafusion::sql::sqlparser::ast::Statement as S;
        matches!(&statement, Df::Statement(s) if matches!(**s, S::Query(_)))
    };
    match session.plan(statement).await {
        Ok(plan) => Ok(Some(plan)),
        Err(e) if query => Err(query_status(&e)),
        // Statements EbbDB runs itself (`CREATE TABLE` with tags, retention, `ERASE`) are not
        // DataFusion's to plan: they run as they are, and report their own errors.
        Err(_) => Ok(None),
    }
}

/// Refuses statements over [`MAX_SQL_BYTES`].
pub fn check_length(sql: &str) -> Result<(), Status> {
    match sql.len() > MAX_SQL_BYTES {
        true => Err(Status::invalid_argument(format!(
            "the statement is {} bytes, more than {MAX_SQL_BYTES}",
            sql.len()
        ))),
        false => Ok(()),
    }
}

/// The columns a statement answers with: its plan's for a query, none known ahead for others.
/// Every column is nullable, in the `FlightInfo` and in the data alike ([`nullable`]): a plan
/// and its execution may disagree on which columns can hold nulls, and clients refuse a stream
/// whose schema differs from the one announced.
pub fn answer_schema(plan: Option<&LogicalPlan>) -> SchemaRef {
    match plan {
        // EbbDB runs these itself; their answers (`rows_deleted`...) are not the plan's.
        Some(LogicalPlan::Ddl(_) | LogicalPlan::Dml(_)) | None => Arc::new(Schema::empty()),
        Some(p) => nullable(p.schema().as_arrow()),
    }
}

/// `schema` with every column nullable (what Flight SQL answers announce and carry).
pub fn nullable(schema: &Schema) -> SchemaRef {
    let fields: Vec<Field> =
        schema.fields().iter().map(|f| f.as_ref().clone().with_nullable(true)).collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// `sql` with each `?` placeholder (ODBC, JDBC and ADBC's `qmark` style) numbered in order as
/// `$1`, `$2`, ..., the form the planner reads. Text without `?` outside strings and comments
/// is returned as it is.
pub fn numbered_placeholders(sql: &str) -> std::borrow::Cow<'_, str> {
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
    if !sql.contains('?') {
        return sql.into();
    }
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize() else {
        return sql.into();
    };
    let mut n = 0;
    let mut out = String::with_capacity(sql.len() + 8);
    let mut changed = false;
    for t in tokens {
        match t {
            Token::Question => {
                n += 1;
                changed = true;
                out.push_str(&format!("${n}"));
            }
            Token::Placeholder(p) if p.starts_with('?') => {
                n += 1;
                changed = true;
                out.push_str(&format!("${n}"));
            }
            t => out.push_str(&t.to_string()),
        }
    }
    if changed {
        out.into()
    } else {
        sql.into()
    }
}

/// True if a statement is a query, run when its ticket is fetched; others run at once.
pub fn is_query(plan: Option<&LogicalPlan>) -> bool {
    matches!(plan, Some(p) if !matches!(p, LogicalPlan::Ddl(_) | LogicalPlan::Dml(_) | LogicalPlan::Statement(_)))
}

/// The rows a statement's output counts as affected (`INSERT`, `DELETE`, `ERASE`), or -1.
/// Queries are refused: their rows are fetched with `CommandStatementQuery`, not counted.
pub async fn affected(out: QueryOutput) -> Result<i64, Status> {
    let QueryOutput { schema, mut stream, kind } = out;
    let column = match kind {
        StatementKind::Query if !schema.fields().is_empty() => {
            return Err(Status::invalid_argument(
                "a query returns rows: run it as a query (CommandStatementQuery), not an update",
            ))
        }
        StatementKind::Insert => Some(0),
        StatementKind::Delete => schema.index_of("rows_deleted").ok(),
        StatementKind::Erase => schema.index_of("rows_erased").ok(),
        _ => None,
    };
    let mut total = 0i64;
    // One batch at a time: a count is all that is kept.
    while let Some(b) = stream.next().await {
        let b = b.map_err(|e| query_status(&e.into()))?;
        let Some(i) = column else { continue };
        let col = datafusion::arrow::compute::cast(b.column(i), &DataType::Int64)
            .map_err(|e| Status::internal(e.to_string()))?;
        let col = col.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
        total += col.iter().flatten().sum::<i64>();
    }
    Ok(if column.is_some() { total } else { -1 })
}

/// A prepared statement of one principal.
pub struct Prepared {
    /// Whose it is: only they may run or close it.
    pub user: Option<String>,
    /// Its database.
    pub database: String,
    /// Its plans, kept between runs.
    pub query: Arc<PreparedQuery>,
    /// The columns it answers with.
    pub schema: SchemaRef,
    /// True for a query (run at `DoGet`); other statements run at `GetFlightInfo`.
    pub is_query: bool,
    /// The parameter values bound last (the first row of the last `DoPut`).
    pub params: Option<Vec<ScalarValue>>,
    created: Instant,
}

impl Prepared {
    /// What a run needs, taken under the statement's lock and run outside it.
    pub fn run(&self) -> Run {
        Run {
            database: self.database.clone(),
            query: self.query.clone(),
            params: self.params.clone().unwrap_or_default(),
        }
    }
}

/// One run of a prepared statement.
pub struct Run {
    /// Its database.
    pub database: String,
    query: Arc<PreparedQuery>,
    params: Vec<ScalarValue>,
}

impl Run {
    /// The statement.
    pub fn sql(&self) -> &str {
        self.query.sql()
    }
}

/// Prepared statements by handle.
#[derive(Default)]
pub struct PreparedStore {
    map: Mutex<HashMap<Vec<u8>, Arc<Mutex<Prepared>>>>,
}

impl PreparedStore {
    /// Prepares `sql` for `who` on `session`: its handle and what the client is told.
    pub async fn create(
        &self,
        session: &Session,
        who: &Principal,
        sql: &str,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        // Held to the statement's bound before it is tokenized to number its placeholders.
        check_length(sql)?;
        let sql = &*numbered_placeholders(sql);
        let plan = plan(session, sql).await?;
        let schema = answer_schema(plan.as_ref());
        let mut params: Vec<(usize, DataType)> = Vec::new();
        if let Some(p) = &plan {
            for (id, ty) in p.get_parameter_types().map_err(|e| query_status(&e.into()))? {
                let n = id.strip_prefix('$').and_then(|n| n.parse::<usize>().ok()).unwrap_or(0);
                params.push((n, ty.unwrap_or(DataType::Utf8)));
            }
        }
        params.sort_by_key(|(n, _)| *n);
        let param_schema = Schema::new(
            params
                .iter()
                .map(|(n, ty)| Field::new(format!("${n}"), ty.clone(), true))
                .collect::<Vec<_>>(),
        );
        let mut handle = [0u8; 16];
        rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut handle);
        let prepared = Prepared {
            user: who.user.clone(),
            database: session.database().to_string(),
            query: Arc::new(PreparedQuery::new(sql)),
            schema: schema.clone(),
            is_query: is_query(plan.as_ref()),
            params: None,
            created: Instant::now(),
        };
        {
            let mut map = self.map.lock();
            let mine: Vec<(Instant, Vec<u8>)> = map
                .iter()
                .filter_map(|(k, p)| {
                    let p = p.lock();
                    (p.user == who.user).then(|| (p.created, k.clone()))
                })
                .collect();
            if mine.len() >= PREPARED_PER_USER {
                if let Some((_, k)) = mine.into_iter().min() {
                    map.remove(&k);
                }
            }
            let mut held: usize = map.values().map(|p| p.lock().query.sql().len()).sum();
            while !map.is_empty()
                && (map.len() >= MAX_PREPARED || held + sql.len() > MAX_PREPARED_BYTES)
            {
                let oldest =
                    map.iter().min_by_key(|(_, p)| p.lock().created).map(|(k, _)| k.clone());
                match oldest.and_then(|k| map.remove(&k)) {
                    Some(p) => held -= p.lock().query.sql().len(),
                    None => break,
                }
            }
            map.insert(handle.to_vec(), Arc::new(Mutex::new(prepared)));
        }
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: handle.to_vec().into(),
            dataset_schema: ipc_schema(&schema)?,
            parameter_schema: ipc_schema(&param_schema)?,
        })
    }

    /// The prepared statement `handle` names, if it is `who`'s.
    pub fn get(&self, handle: &[u8], who: &Principal) -> Result<Arc<Mutex<Prepared>>, Status> {
        let p =
            self.map.lock().get(handle).cloned().ok_or_else(|| {
                Status::not_found("no such prepared statement (closed, or too old)")
            })?;
        if p.lock().user != who.user {
            return Err(Status::not_found("no such prepared statement (closed, or too old)"));
        }
        Ok(p)
    }

    /// Closes `handle` if it is `who`'s.
    pub fn close(&self, handle: &[u8], who: &Principal) -> Result<(), Status> {
        self.get(handle, who)?;
        self.map.lock().remove(handle);
        Ok(())
    }

    /// Binds the parameters a `DoPut` carries (one row) to `handle`.
    pub async fn bind(
        &self,
        handle: &[u8],
        who: &Principal,
        data: PeekableFlightDataStream,
    ) -> Result<(), Status> {
        let p = self.get(handle, who)?;
        let values = parameters(data).await?;
        p.lock().params = Some(values);
        Ok(())
    }
}

/// The one row of parameter values a `DoPut` carries (none if it carries no rows). The
/// messages are checked before Arrow decodes them: at most [`MAX_PARAMETER_BYTES`] in all, a
/// schema and record batches only (no dictionaries), uncompressed (a compressed buffer names
/// the size to allocate for it), and reading stops at the first batch with rows.
async fn parameters(data: PeekableFlightDataStream) -> Result<Vec<ScalarValue>, Status> {
    use datafusion::arrow::ipc::{root_as_message, MessageHeader};
    let bad = |why: &str| Status::invalid_argument(format!("parameters: {why}"));
    let mut total = 0usize;
    let checked = data.map(move |fd| {
        let fd = fd?;
        total += fd.data_header.len() + fd.data_body.len() + fd.app_metadata.len();
        if total > MAX_PARAMETER_BYTES {
            return Err(Status::resource_exhausted("parameters over 16 MiB"));
        }
        if fd.data_header.is_empty() {
            return Ok(fd);
        }
        let message = root_as_message(&fd.data_header).map_err(|_| bad("not an IPC message"))?;
        match message.header_type() {
            MessageHeader::Schema => Ok(fd),
            MessageHeader::RecordBatch => {
                let compressed = message.header_as_record_batch().and_then(|b| b.compression());
                match compressed {
                    Some(_) => Err(bad("compressed batches are not accepted")),
                    None => Ok(fd),
                }
            }
            _ => Err(bad("only a schema and record batches are accepted")),
        }
    });
    let mut batches =
        FlightRecordBatchStream::new_from_flight_data(checked.map_err(FlightError::from));
    while let Some(batch) = batches.next().await {
        let batch = batch.map_err(|e| bad(&e.to_string()))?;
        match batch.num_rows() {
            0 => continue,
            1 => {
                return (0..batch.num_columns())
                    .map(|i| ScalarValue::try_from_array(batch.column(i).as_ref(), 0))
                    .collect::<Result<_, _>>()
                    .map_err(|e| bad(&e.to_string()))
            }
            n => return Err(bad(&format!("{n} rows; one row of values per run"))),
        }
    }
    Ok(Vec::new())
}

/// `schema` as the IPC message Flight SQL carries schemas in.
pub fn ipc_schema(schema: &Schema) -> Result<bytes::Bytes, Status> {
    let IpcMessage(bytes) = SchemaAsIpc::new(schema, &IpcWriteOptions::default())
        .try_into()
        .map_err(|e: datafusion::arrow::error::ArrowError| Status::internal(e.to_string()))?;
    Ok(bytes)
}

/// A prepared statement's ticket: the command itself, as Flight SQL clients expect.
pub fn prepared_ticket(handle: &[u8]) -> Ticket {
    let cmd = CommandPreparedStatementQuery { prepared_statement_handle: handle.to_vec().into() };
    Ticket::new(cmd.as_any().encode_to_vec())
}

/// Runs a prepared statement with its bound parameters.
pub async fn run_prepared(session: &Session, run: &Run) -> Result<QueryOutput, Status> {
    match session.execute_prepared(&run.query, run.params.clone()).await {
        Ok(Some(out)) => Ok(out),
        Ok(None) if run.params.is_empty() => {
            session.execute(run.query.sql()).await.map_err(|e| query_status(&e))
        }
        Ok(None) => Err(Status::invalid_argument(
            "parameters are supported in queries; send other statements with their values",
        )),
        Err(e) => Err(query_status(&e)),
    }
}
