//! PostgreSQL wire-protocol front end.
//!
//! [`serve`] speaks protocol 3, over TLS when the server has a certificate, with SCRAM-SHA-256
//! logins once users exist ([`auth`]). Each connection's bytes pass through [`guard`], which
//! bounds what the client may make the server read before and after its login and checks the
//! structure of every extended-protocol and login message before pgwire decodes it.
//! Each connection gets one session at the server's front door (on the single node's database
//! or the whole cluster), created at its first statement. Its default database
//! is the startup packet's `database`, or [`DEFAULT_DATABASE`] when that is missing, `postgres`, or
//! the user name (what libpq and most drivers send when no database is given).
//!
//! - Simple queries run statement by statement; a statement's rows are streamed to the client
//!   before the next statement runs. Text format.
//! - Extended queries (Parse/Bind/Describe/Execute) keep the statement's SQL; bound parameters
//!   are substituted into it as SQL literals. Describe plans the statement with DataFusion, without
//!   running it, to report its result columns and the parameter types the planner inferred.
//!   Results are sent in the text or binary format each column was asked for.
//! - `BEGIN`/`START TRANSACTION`, `COMMIT`/`END`, `ROLLBACK`/`ABORT`, `SAVEPOINT`, `RELEASE`,
//!   `SET` (except `SET datafusion.*`, which goes to the engine), `RESET`, `DISCARD` and
//!   `DEALLOCATE` are accepted and do nothing: every statement commits on its own. `SHOW` answers
//!   the PostgreSQL settings drivers ask for (`server_version`, `transaction_isolation`...).
//! - `INSERT` answers `INSERT 0 <rows>`. `DELETE` answers `DELETE <rows>` and sends a notice with
//!   the delete id, to look up in `system.deletions`.
//! - Failures become `ErrorResponse`s with a SQLSTATE, and the connection stays usable.
//! - Clients' catalog queries (psql's `\\d`, pgjdbc's `DatabaseMetaData`, SQLAlchemy's
//!   inspector) read `pg_catalog` (`ebb_query::sql::pg_catalog`): the connection's database is
//!   its `current_database()`, and its tables are in a schema of the same name, which is the
//!   connection's `search_path`.
//! - A cancel request (Ctrl-C in psql) interrupts the connection's running statement.

mod auth;
mod backend;
mod conn;
mod extended;
mod guard;
mod lexer;
mod params;
mod types;
mod values;

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, AsArray, RecordBatch, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, UInt64Type};
use datafusion::error::DataFusionError;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use ebb_query::{QueryError, QueryOutput, StatementKind, DEFAULT_DATABASE};
use futures::{stream, Sink, SinkExt, StreamExt};
use pgwire::api::auth::StartupHandler;
use pgwire::api::cancel::{CancelHandler, DefaultCancelHandler};
use pgwire::api::portal::Format;
use pgwire::api::query::{
    send_execution_response, send_query_response, ExtendedQueryHandler, SimpleQueryHandler,
};
use pgwire::api::results::{QueryResponse, Response, Tag};
use pgwire::api::store::PortalStore;
use pgwire::api::{
    ClientInfo, ClientPortalStore, ConnectionManager, PgWireServerHandlers, METADATA_DATABASE,
    METADATA_USER,
};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult, SEVERITY_ERROR, SEVERITY_NOTICE};
use pgwire::messages::data::DataRow;
use pgwire::messages::response::NoticeResponse;
use pgwire::messages::PgWireBackendMessage;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tracing::{debug, info, warn};

use crate::metrics::Metrics;
use crate::tls::TlsSource;
use backend::ConnSession;
use ebb_query::access::AccessError;
use ebb_query::front::{FrontDoor, Session};
use extended::Parser;

/// What one client may hold of the PostgreSQL port.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    /// Open connections (more wait in the kernel's backlog).
    pub connections: usize,
    /// Longest message of an authenticated client (see [`guard`]).
    pub message: usize,
}

/// Serves the PostgreSQL wire protocol on `listener` until `shutdown` resolves.
///
/// Each connection runs on its own task with its own session at `door`, and is counted in
/// `metrics.pg_connections`. When `shutdown` resolves the listener stops accepting; connections
/// already open keep running until their clients disconnect or the runtime shuts down. Failed
/// accepts (such as running out of file descriptors) are logged and retried, so this only returns
/// once `shutdown` has resolved.
pub async fn serve(
    listener: TcpListener,
    door: Arc<FrontDoor>,
    metrics: Arc<Metrics>,
    tls: Option<Arc<TlsSource>>,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let handlers = Arc::new(Handlers::new(door, tls.is_some()));
    match listener.local_addr() {
        Ok(addr) => info!(%addr, tls = tls.is_some(), "PostgreSQL endpoint listening"),
        Err(_) => info!("PostgreSQL endpoint listening"),
    }
    let limit = Arc::new(Semaphore::new(limits.connections.max(1)));
    tokio::pin!(shutdown);
    loop {
        // Beyond the limit, new connections wait in the kernel's backlog.
        let permit = tokio::select! {
            () = &mut shutdown => None,
            p = limit.clone().acquire_owned() => p.ok(),
        };
        let Some(permit) = permit else {
            info!("PostgreSQL endpoint stopped accepting connections");
            return Ok(());
        };
        tokio::select! {
            () = &mut shutdown => {
                info!("PostgreSQL endpoint stopped accepting connections");
                return Ok(());
            }
            accepted = listener.accept() => match accepted {
                Ok((socket, peer)) => {
                    metrics.pg_connections.inc();
                    let handlers = Arc::clone(&handlers);
                    // Each connection takes the certificate current when it arrives.
                    let acceptor = tls.as_ref().map(|t| t.acceptor());
                    tokio::spawn(async move {
                        let _permit = permit;
                        debug!(%peer, "PostgreSQL connection accepted");
                        match conn::serve(socket, acceptor, handlers, limits.message).await {
                            Ok(()) => debug!(%peer, "PostgreSQL connection closed"),
                            Err(e) => debug!(%peer, error = %e, "PostgreSQL connection failed"),
                        }
                    });
                }
                Err(e) => {
                    warn!(error = %e, "accepting a PostgreSQL connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
}

/// The handlers pgwire runs each connection with.
struct Handlers {
    backend: Arc<Backend>,
    startup: Arc<auth::Startup>,
    cancel: Arc<DefaultCancelHandler>,
}

impl Handlers {
    fn new(door: Arc<FrontDoor>, tls_required: bool) -> Handlers {
        let connections = Arc::new(ConnectionManager::new());
        let startup = auth::Startup::new(door.clone(), Arc::clone(&connections), tls_required);
        let backend = Backend { door, parser: Arc::new(Parser) };
        Handlers {
            backend: Arc::new(backend),
            startup: Arc::new(startup),
            cancel: Arc::new(DefaultCancelHandler::new(connections)),
        }
    }
}

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        Arc::clone(&self.backend)
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        Arc::clone(&self.backend)
    }

    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        Arc::clone(&self.startup)
    }

    fn cancel_handler(&self) -> Arc<impl CancelHandler> {
        Arc::clone(&self.cancel)
    }
}

/// Startup, simple and extended query handling, shared by all connections.
struct Backend {
    door: Arc<FrontDoor>,
    parser: Arc<Parser>,
}

impl Backend {
    /// The connection's SQL session, created at its first use.
    fn session<C: ClientInfo + ?Sized>(&self, client: &C) -> Session {
        if let Some(s) = client.session_extensions().get::<ConnSession>() {
            return s.0.clone();
        }
        // Read before the extensions are locked for the insert.
        let database = database_name(client);
        let who = auth::principal(client);
        let s = client.session_extensions().get_or_insert_with(|| {
            info!(principal = %who, %database, "PostgreSQL session opened");
            ConnSession(self.door.open(who, &database))
        });
        s.0.clone()
    }
}

/// The database the client asked for at startup (see the module documentation).
fn database_name<C: ClientInfo + ?Sized>(client: &C) -> String {
    let metadata = client.metadata();
    let user = metadata.get(METADATA_USER).map(String::as_str);
    match metadata.get(METADATA_DATABASE).map(|d| d.trim()) {
        Some(d) if !d.is_empty() && d != "postgres" && Some(d) != user => d.to_owned(),
        _ => DEFAULT_DATABASE.to_owned(),
    }
}

#[async_trait]
impl SimpleQueryHandler for Backend {
    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = self.session(&*client);
        // The whole request within the bounds on SQL before any statement of it runs.
        session.check(query).map_err(|e| query_error(&e))?;
        let statements = lexer::split_statements(query);
        let Some(last) = statements.len().checked_sub(1) else {
            return Ok(vec![Response::EmptyQuery]);
        };
        // Each statement's response is sent here, before the next statement runs. pgwire updates
        // the connection's transaction status only from the responses returned to it, so a
        // trailing BEGIN/COMMIT/ROLLBACK is returned rather than sent.
        for (idx, sql) in statements.into_iter().enumerate() {
            debug!(sql = %ebb_query::access::statement::redact(sql), "simple query");
            match run(client, &session, sql, None).await? {
                Outcome::Rows(rows) => send_query_response(client, rows, true).await?,
                Outcome::Tag(tag) => send_execution_response(client, tag).await?,
                Outcome::Begin(tag) if idx == last => {
                    return Ok(vec![Response::TransactionStart(tag)]);
                }
                Outcome::End(tag) if idx == last => {
                    return Ok(vec![Response::TransactionEnd(tag)]);
                }
                Outcome::Begin(tag) | Outcome::End(tag) => {
                    send_execution_response(client, tag).await?;
                }
            }
        }
        Ok(Vec::new())
    }
}

/// What a statement produced.
enum Outcome {
    Rows(QueryResponse),
    Tag(Tag),
    /// A transaction start (accepted, though every statement commits on its own).
    Begin(Tag),
    /// A transaction end.
    End(Tag),
}

/// Statements answered without the engine.
enum Special {
    Begin,
    End(&'static str),
    Tag(&'static str),
    /// `SHOW` of a PostgreSQL setting: its name and value.
    Setting(&'static str, &'static str),
}

/// Recognizes the statements answered without the engine.
fn special(sql: &str) -> Option<Special> {
    let words = lexer::leading_words(sql, 5);
    let second = words.get(1).map_or("", String::as_str);
    Some(match words.first()?.as_str() {
        "BEGIN" | "START" => Special::Begin,
        "COMMIT" | "END" => Special::End("COMMIT"),
        "ROLLBACK" | "ABORT" if words.iter().any(|w| w == "TO") => Special::Tag("ROLLBACK"),
        "ROLLBACK" | "ABORT" => Special::End("ROLLBACK"),
        "SAVEPOINT" => Special::Tag("SAVEPOINT"),
        "RELEASE" => Special::Tag("RELEASE"),
        // The session's own settings (statement_timeout) go to the front door.
        "SET" | "RESET"
            if words.iter().skip(1).take(2).any(|w| w.starts_with("STATEMENT_TIMEOUT")) =>
        {
            return None
        }
        "SET" if !second.starts_with("DATAFUSION.") => Special::Tag("SET"),
        "RESET" => Special::Tag("RESET"),
        "DISCARD" => Special::Tag("DISCARD ALL"),
        "DEALLOCATE" => Special::Tag("DEALLOCATE"),
        "SHOW" => {
            let (name, value) = pg_setting(&words.get(1..).unwrap_or_default().join(" "))?;
            Special::Setting(name, value)
        }
        _ => return None,
    })
}

/// The setting naming the schemas unqualified names resolve in: the connection's database.
const SEARCH_PATH: &str = "search_path";

/// The PostgreSQL settings `SHOW` answers (others go to the engine, e.g. `SHOW TABLES`).
fn pg_setting(name: &str) -> Option<(&'static str, &'static str)> {
    Some(match name.to_ascii_lowercase().as_str() {
        "server_version" => ("server_version", ebb_query::sql::pg_catalog::PG_VERSION),
        "server_version_num" => ("server_version_num", ebb_query::sql::pg_catalog::PG_VERSION_NUM),
        "server_encoding" => ("server_encoding", "UTF8"),
        "client_encoding" => ("client_encoding", "UTF8"),
        "standard_conforming_strings" => ("standard_conforming_strings", "on"),
        "integer_datetimes" => ("integer_datetimes", "on"),
        "datestyle" => ("DateStyle", "ISO, YMD"),
        "intervalstyle" => ("IntervalStyle", "postgres"),
        "timezone" | "time zone" => ("TimeZone", "Etc/UTC"),
        "transaction_isolation" | "transaction isolation level" => {
            ("transaction_isolation", "read committed")
        }
        "default_transaction_isolation" => ("default_transaction_isolation", "read committed"),
        "transaction_read_only" => ("transaction_read_only", "off"),
        "max_identifier_length" => ("max_identifier_length", "63"),
        SEARCH_PATH => (SEARCH_PATH, DEFAULT_DATABASE),
        "is_superuser" => ("is_superuser", "on"),
        _ => return None,
    })
}

/// The first word of a statement: whether it returns rows, or can be planned for parameter types.
fn first_word(sql: &str) -> String {
    lexer::leading_words(sql, 1).pop().unwrap_or_default()
}

fn returns_rows(word: &str) -> bool {
    matches!(
        word,
        "SELECT" | "WITH" | "VALUES" | "TABLE" | "SHOW" | "EXPLAIN" | "DESCRIBE" | "DESC"
    )
}

/// Runs one statement. `formats` are the result formats the client asked for (text if `None`).
async fn run<C>(
    client: &mut C,
    session: &Session,
    sql: &str,
    formats: Option<&Format>,
) -> PgWireResult<Outcome>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    match special(sql) {
        Some(Special::Begin) => return Ok(Outcome::Begin(Tag::new("BEGIN"))),
        Some(Special::End(tag)) => return Ok(Outcome::End(Tag::new(tag))),
        Some(Special::Tag(tag)) => {
            // `RESET ALL` and `DISCARD ALL` (what connection poolers send between clients)
            // also undo the session's own settings.
            let all = lexer::leading_words(sql, 2).get(1).is_some_and(|w| w == "ALL");
            if all && matches!(tag, "RESET" | "DISCARD ALL") {
                session.reset_settings();
            }
            return Ok(Outcome::Tag(Tag::new(tag)));
        }
        Some(Special::Setting(name, value)) => {
            // The schema the connection's tables are listed in is its database's.
            let value = if name == SEARCH_PATH { session.database() } else { value };
            let schema = setting_schema(name);
            let column: ArrayRef = Arc::new(StringArray::from(vec![value]));
            let batch = RecordBatch::try_new(Arc::clone(&schema), vec![column])
                .map_err(|e| user_error("XX000", e.to_string()))?;
            let batches = stream::iter([Ok::<_, DataFusionError>(batch)]);
            let batches = Box::pin(RecordBatchStreamAdapter::new(Arc::clone(&schema), batches));
            return Ok(Outcome::Rows(rows_response(schema, batches, formats)));
        }
        None => {}
    }
    let out = session.execute(sql).await.map_err(|e| query_error(&e))?;
    outcome(client, sql, out, formats).await
}

/// What the client is sent for `out`, the output of statement `sql`.
async fn outcome<C>(
    client: &mut C,
    sql: &str,
    out: QueryOutput,
    formats: Option<&Format>,
) -> PgWireResult<Outcome>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let QueryOutput { schema, stream: batches, kind } = out;
    Ok(match kind {
        // Statements the engine ran without a result (`SET datafusion.*`).
        StatementKind::Query if schema.fields().is_empty() => {
            collect(batches).await?;
            Outcome::Tag(Tag::new(&first_word(sql)))
        }
        StatementKind::Query => Outcome::Rows(rows_response(schema, batches, formats)),
        StatementKind::Insert => {
            let batches = collect(batches).await?;
            let rows: u64 = column_u64(&batches, 0).into_iter().flatten().sum();
            Outcome::Tag(Tag::new("INSERT").with_oid(0).with_rows(to_usize(rows)))
        }
        StatementKind::Delete => {
            // One row (per shard in a cluster): rows_deleted, delete_id (null if nothing
            // matched), deletes.
            let batches = collect(batches).await?;
            let column = |name: &str| -> Vec<u64> {
                match schema.index_of(name) {
                    Ok(i) => column_u64(&batches, i).into_iter().flatten().collect(),
                    Err(_) => Vec::new(),
                }
            };
            let rows: u64 = column("rows_deleted").iter().sum();
            let ids = column("delete_id");
            let deletes: u64 = column("deletes").iter().sum();
            let plural = if deletes == 1 { "" } else { "s" };
            let message = match ids.as_slice() {
                [] => None,
                [id, ..] => Some(format!(
                    "delete id {id} ({deletes} engine delete{plural}); see system.deletions"
                )),
            };
            if let Some(message) = message {
                client.feed(notice(message)).await?;
            }
            Outcome::Tag(Tag::new("DELETE").with_rows(to_usize(rows)))
        }
        StatementKind::Erase => {
            // One row (per shard in a cluster): rows_erased, erasure_id, series, tables.
            let batches = collect(batches).await?;
            let column = |name: &str| -> Vec<u64> {
                match schema.index_of(name) {
                    Ok(i) => column_u64(&batches, i).into_iter().flatten().collect(),
                    Err(_) => Vec::new(),
                }
            };
            let rows: u64 = column("rows_erased").iter().sum();
            let series: u64 = column("series").iter().sum();
            if let Some(id) = column("erasure_id").first() {
                client
                    .feed(notice(format!(
                        "erasure id {id} ({series} series); see system.deletions, and                          `ebb audit verify {id}` once it is persisted"
                    )))
                    .await?;
            }
            Outcome::Tag(Tag::new("ERASE").with_rows(to_usize(rows)))
        }
        StatementKind::Command(tag) => Outcome::Tag(Tag::new(&tag)),
    })
}

fn setting_schema(name: &str) -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(name, DataType::Utf8, false)]))
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// A query result whose rows are encoded batch by batch as the stream produces them.
fn rows_response(
    schema: SchemaRef,
    batches: SendableRecordBatchStream,
    formats: Option<&Format>,
) -> QueryResponse {
    let (fields, columns) = types::describe_schema(&schema, formats);
    let rows = batches.flat_map(move |batch| {
        let rows: Vec<PgWireResult<DataRow>> = match batch {
            Ok(batch) => match types::encode_batch(&batch, &columns) {
                Ok(rows) => rows.into_iter().map(Ok).collect(),
                Err(e) => vec![Err(e)],
            },
            Err(e) => vec![Err(query_error(&QueryError::from(e)))],
        };
        stream::iter(rows)
    });
    QueryResponse::new(Arc::new(fields), rows)
}

async fn collect(mut batches: SendableRecordBatchStream) -> PgWireResult<Vec<RecordBatch>> {
    let mut out = Vec::new();
    while let Some(batch) = batches.next().await {
        out.push(batch.map_err(|e| query_error(&QueryError::from(e)))?);
    }
    Ok(out)
}

/// The values of column `column`, as `u64`, over all batches.
fn column_u64(batches: &[RecordBatch], column: usize) -> Vec<Option<u64>> {
    let mut values = Vec::new();
    for array in batches.iter().filter_map(|b| b.columns().get(column)) {
        if let Ok(array) = cast(array.as_ref(), &DataType::UInt64) {
            if let Some(array) = array.as_primitive_opt::<UInt64Type>() {
                values.extend(array.iter());
            }
        }
    }
    values
}

fn notice(message: String) -> PgWireBackendMessage {
    let info = ErrorInfo::new(SEVERITY_NOTICE.to_owned(), "00000".to_owned(), message);
    PgWireBackendMessage::NoticeResponse(NoticeResponse::from(info))
}

fn user_error(code: &str, message: String) -> PgWireError {
    let info = ErrorInfo::new(SEVERITY_ERROR.to_owned(), code.to_owned(), message);
    PgWireError::UserError(Box::new(info))
}

/// An `ErrorResponse` for a failed statement.
fn query_error(err: &QueryError) -> PgWireError {
    let err = err.cause();
    let code = sqlstate(err);
    if err.is_client_error() {
        debug!(code, error = %err, "statement failed");
    } else {
        warn!(code, error = %err, "statement failed");
    }
    user_error(code, err.to_string())
}

/// The SQLSTATE for a failure, by its kind. Errors that are bare text (DataFusion's planner and
/// execution messages, [`QueryError::Invalid`]) are told apart by their wording.
fn sqlstate(err: &QueryError) -> &'static str {
    let client = err.is_client_error();
    match err {
        QueryError::Access(AccessError::Unauthenticated(_)) => "28P01",
        QueryError::Access(AccessError::Forbidden(_)) => "42501",
        QueryError::Syntax(_) => "42601",
        QueryError::Unsupported(_) => "0A000",
        // As PostgreSQL: stack depth limit exceeded, too many columns, program limit exceeded.
        QueryError::Limit(l) => match l.setting {
            "max_expression_depth" => "54001",
            "max_columns_per_table" => "54011",
            _ => "54000",
        },
        QueryError::UnknownTable(_) => "42P01",
        QueryError::UnknownDatabase(_) => "3D000",
        QueryError::TypeConflict { .. } => "42804",
        QueryError::Line(_) => "22P02",
        QueryError::BeyondRetention { .. } => "22008",
        QueryError::Corrupt(_) => "XX001",
        QueryError::Backup(b) => backup_sqlstate(b),
        e if e.is_disk_full() => "53100",
        QueryError::Internal(_) => "XX000",
        // Try again: no leader or quorum just now.
        QueryError::NotLeader(_) | QueryError::Replication(_) | QueryError::Unavailable(_) => {
            "57P03"
        }
        QueryError::Storage(_) if client => "22023",
        QueryError::DataFusion(d) => datafusion_sqlstate(d, client),
        e => by_wording(&e.to_string(), client),
    }
}

/// The SQLSTATE of a backup's failure.
fn backup_sqlstate(e: &ebb_backup::BackupError) -> &'static str {
    use ebb_backup::BackupError as B;
    match e {
        // Invalid parameter value, as PostgreSQL's for a bad option.
        B::Uri { .. } | B::TargetExists(_) => "22023",
        // Undefined object.
        B::NoSuchSet(_) | B::Empty => "42704",
        // Object in use: another backup or a prune holds the destination.
        B::Busy(_) => "55006",
        // Object not in prerequisite state: the destination is another server's.
        B::OtherOrigin { .. } => "55000",
        e if e.is_disk_full() => "53100",
        // Data corrupted.
        B::Missing { .. } | B::Damaged { .. } | B::Manifest { .. } => "XX001",
        // An I/O error: the destination or a local file.
        _ => "58030",
    }
}

/// The SQLSTATE of a DataFusion error, `client` if the statement caused it: by the error's
/// variant, and by its wording where it is bare text.
fn datafusion_sqlstate(d: &DataFusionError, client: bool) -> &'static str {
    use datafusion::arrow::error::ArrowError as A;
    use datafusion::common::SchemaError as S;
    match d.find_root() {
        // Canceled by statement_timeout, or over its memory.
        DataFusionError::ResourcesExhausted(m) if m.contains("(statement_timeout)") => "57014",
        DataFusionError::ResourcesExhausted(_) => "53200",
        DataFusionError::SQL(..) => "42601",
        DataFusionError::SchemaError(e, _) => match **e {
            S::FieldNotFound { .. } => "42703",
            S::AmbiguousReference { .. } => "42702",
            S::DuplicateQualifiedField { .. } | S::DuplicateUnqualifiedField { .. } => "42701",
        },
        DataFusionError::NotImplemented(_) => "0A000",
        DataFusionError::ArrowError(a, _) => match **a {
            A::DivideByZero => "22012",
            A::ArithmeticOverflow(_) => "22003",
            A::CastError(_) | A::ParseError(_) => "22P02",
            _ if client => "22023",
            _ => "XX000",
        },
        root => by_wording(&root.to_string(), client),
    }
}

/// The SQLSTATE of an error that is only text, by its wording.
fn by_wording(message: &str, client: bool) -> &'static str {
    let message = message.to_ascii_lowercase();
    let has = |needle: &str| message.contains(needle);
    if has("sql syntax") || has("parsererror") || has("syntax error") {
        "42601"
    } else if has("no field named") || (has("column") && has("not found")) {
        "42703"
    } else if has("does not exist") || has("not found") {
        "42P01"
    } else if has("invalid function") {
        "42883"
    } else if has("not implemented") || has("not supported") || has("unsupported") {
        "0A000"
    } else if has("returned more than one row") {
        // A scalar subquery of several rows: PostgreSQL's cardinality_violation.
        "21000"
    } else if has("divide by zero") || has("division by zero") {
        "22012"
    } else if has("overflow") {
        "22003"
    } else if has("cast error") || has("cannot cast") || has("parse error") {
        "22P02"
    } else if client {
        "42000"
    } else {
        "XX000"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scalar_subquery_of_several_rows_is_a_cardinality_violation() {
        let e = QueryError::DataFusion(DataFusionError::Execution(
            "Scalar subquery returned more than one row".into(),
        ));
        assert!(e.is_client_error());
        assert_eq!(sqlstate(&e), "21000");
    }

    #[test]
    fn recognizes_statements_answered_here() {
        assert!(matches!(special("begin"), Some(Special::Begin)));
        assert!(matches!(special("START TRANSACTION"), Some(Special::Begin)));
        assert!(matches!(special("commit;"), Some(Special::End("COMMIT"))));
        assert!(matches!(special("ROLLBACK TO SAVEPOINT a"), Some(Special::Tag("ROLLBACK"))));
        assert!(matches!(special("SET extra_float_digits = 3"), Some(Special::Tag("SET"))));
        assert!(special("SET datafusion.execution.batch_size = 1024").is_none());
        assert!(special("SET statement_timeout=5000").is_none());
        assert!(special("SET SESSION statement_timeout TO '1s'").is_none());
        assert!(matches!(
            special("SHOW TRANSACTION ISOLATION LEVEL"),
            Some(Special::Setting("transaction_isolation", _))
        ));
        assert!(special("SHOW TABLES").is_none());
        assert!(special("SELECT 1").is_none());
    }

    #[test]
    fn maps_errors_to_sqlstates() {
        let syntax = DataFusionError::SQL(
            Box::new(datafusion::sql::sqlparser::parser::ParserError::ParserError("x".into())),
            None,
        );
        assert_eq!(sqlstate(&QueryError::syntax(syntax)), "42601");
        let column = datafusion::common::SchemaError::FieldNotFound {
            field: Box::new(datafusion::common::Column::from_name("x")),
            valid_fields: Vec::new(),
        };
        let column = DataFusionError::SchemaError(Box::new(column), Box::new(None));
        assert_eq!(sqlstate(&QueryError::DataFusion(column)), "42703");
        let zero = datafusion::arrow::error::ArrowError::DivideByZero;
        assert_eq!(sqlstate(&QueryError::DataFusion(zero.into())), "22012");
        // Bare text is told apart by its wording.
        let absent = QueryError::invalid("table t does not exist (on no shard): DROP TABLE t");
        assert_eq!(sqlstate(&absent), "42P01");
        let plan = DataFusionError::Plan("Savepoints not supported".into());
        assert_eq!(sqlstate(&QueryError::DataFusion(plan)), "0A000");
        let exec = DataFusionError::Execution("Overflow happened on FACTORIAL(100)".into());
        assert_eq!(sqlstate(&QueryError::DataFusion(exec)), "22003");
        assert_eq!(sqlstate(&QueryError::UnknownTable("t".into())), "42P01");
        assert_eq!(sqlstate(&QueryError::Unsupported("UPDATE".into())), "0A000");
        assert_eq!(sqlstate(&QueryError::Internal("boom".into())), "XX000");
        let full = ebb_storage::disk::BelowReserve { dir: "/d".into(), available: 1, reserve: 2 };
        assert_eq!(sqlstate(&QueryError::from(full)), "53100");
    }
}
