//! The HTTP API (axum):
//!
//! - `POST /write?db=&precision=` and `POST /api/v2/write?bucket=&precision=`: InfluxDB line
//!   protocol (gzip accepted), `204` on success; a bad request is rejected whole with `400` and
//!   the line number and reason.
//! - `POST /v1/sql?db=`: the body is SQL; JSON rows by default, CSV (`Accept: text/csv`),
//!   Arrow IPC (`Accept: application/vnd.apache.arrow.stream`) or a text table
//!   (`Accept: text/plain`).
//! - `POST /api/v1/write?db=` and `POST /api/v1/read?db=`: Prometheus remote write and read
//!   (snappy-compressed protobuf; see [`crate::prom`]).
//! - `POST /v1/admin/flush` (ADMIN): writes this node's memtables to files.
//! - `GET /health` (the process is up), `GET /ready` (it can serve: see [`crate::health`]),
//!   `GET /metrics`
//!   (Prometheus text format).

mod admin;
mod auth;
mod prom;
pub mod serve;
mod stream;

use std::collections::HashMap;
use std::io::Read;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Query, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use datafusion::arrow::record_batch::RecordBatch;
use ebb_query::front::{FrontDoor, Principal};
use ebb_query::lp::Precision;
use ebb_query::{QueryError, StatementKind};
use futures::StreamExt;

use crate::body::UnreadBody;
use crate::metrics::Metrics;
use ebb_query::access::Privilege;

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    /// The front door writes and SQL go through.
    pub door: Arc<FrontDoor>,
    /// What this node serves (for the node's metrics, flushes and audits).
    pub serving: Serving,
    /// Counters for `/metrics`.
    pub metrics: Arc<Metrics>,
    /// Largest body accepted (after decompression).
    pub max_body_bytes: usize,
    /// The node's readiness, for `/ready`.
    pub health: Arc<crate::health::Health>,
    /// Its backups (whose sets `ebb audit verify` scans too).
    pub backups: Arc<crate::backup::BackupService>,
}

/// What a node serves: its own database, or its part of a cluster.
#[derive(Clone)]
pub enum Serving {
    /// A single node's database.
    Node(Arc<ebb_query::Database>),
    /// A cluster, through this node's router.
    Cluster(Arc<crate::cluster::Router>),
}

impl Serving {
    /// The router, on a cluster.
    pub fn cluster(&self) -> Option<&Arc<crate::cluster::Router>> {
        match self {
            Serving::Node(_) => None,
            Serving::Cluster(r) => Some(r),
        }
    }
}

/// The router.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/write", post(write_v1))
        .route("/api/v2/write", post(write_v2))
        .route("/v1/sql", post(sql))
        .route("/api/v1/write", post(prom::write))
        .route("/api/v1/read", post(prom::read))
        .route("/health", get(|| async { "ok\n" }))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .route("/v1/audit/verify", get(admin::audit_verify))
        .route("/v1/cluster/decommission", post(admin::decommission))
        .route("/v1/admin/flush", post(admin::flush))
        // Bodies are read by `UnreadBody` once the caller is authenticated, within limits.
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
}

use auth::{access_error, error};

/// `/ready`: 200 while the node can serve its share, else 503 with the reasons, one per line.
async fn ready(State(state): State<AppState>) -> Response {
    let r = state.health.get();
    if r.is_ready() {
        return "ready\n".into_response();
    }
    let body: String = r.reasons.iter().map(|w| format!("not ready: {w}\n")).collect();
    (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
}

fn query_error(e: &QueryError) -> Response {
    let e = e.cause();
    let status = match e {
        QueryError::Access(a) => return access_error(a),
        QueryError::UnknownTable(_) | QueryError::UnknownDatabase(_) => StatusCode::NOT_FOUND,
        QueryError::Backup(b) => match **b {
            ebb_backup::BackupError::NoSuchSet(_) | ebb_backup::BackupError::Empty => {
                StatusCode::NOT_FOUND
            }
            // The destination's store did not answer as it should.
            ebb_backup::BackupError::Store { .. } => StatusCode::BAD_GATEWAY,
            ebb_backup::BackupError::Busy(_) | ebb_backup::BackupError::OtherOrigin { .. } => {
                StatusCode::CONFLICT
            }
            ref b if b.is_disk_full() => StatusCode::INSUFFICIENT_STORAGE,
            _ if e.is_client_error() => StatusCode::BAD_REQUEST,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        },
        QueryError::Unavailable(_) | QueryError::NotLeader(_) | QueryError::Replication(_) => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        e if e.is_disk_full() => StatusCode::INSUFFICIENT_STORAGE,
        // Over its memory or time limit.
        QueryError::DataFusion(d)
            if matches!(
                d.find_root(),
                datafusion::error::DataFusionError::ResourcesExhausted(_)
            ) =>
        {
            StatusCode::SERVICE_UNAVAILABLE
        }
        e if e.is_client_error() => StatusCode::BAD_REQUEST,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    match e.line() {
        // The line a write was refused for, for a client that resends the rest.
        Some(line) => {
            auth::error_json(status, serde_json::json!({ "error": e.to_string(), "line": line }))
        }
        None => error(status, e),
    }
}

/// The body as text, gunzipped if `Content-Encoding: gzip` (every member of a multi-member
/// stream, as `cat a.gz b.gz` makes: RFC 1952 allows several), at most `limit` bytes.
/// A rejection is the status and the reason.
fn body_text(
    headers: &HeaderMap,
    body: Result<Bytes, (StatusCode, String)>,
    limit: usize,
) -> Result<String, (StatusCode, String)> {
    let body = body?;
    let gzip = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("gzip"));
    let raw = if gzip {
        let mut out = Vec::new();
        let mut dec = flate2::read::MultiGzDecoder::new(&body[..]).take(limit as u64 + 1);
        dec.read_to_end(&mut out)
            .map_err(|e| (StatusCode::BAD_REQUEST, format!("bad gzip body: {e}")))?;
        if out.len() > limit {
            return Err((
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("body larger than {limit} bytes after decompression"),
            ));
        }
        out
    } else {
        body.to_vec()
    };
    String::from_utf8(raw).map_err(|e| (StatusCode::BAD_REQUEST, format!("body is not UTF-8: {e}")))
}

/// A request's client and what it presented: the parts every handler authenticates with.
struct Caller {
    method: Method,
    client: SocketAddr,
    headers: HeaderMap,
    query: HashMap<String, String>,
}

impl Caller {
    async fn principal(&self, door: &FrontDoor) -> Result<Principal, Response> {
        auth::principal(door, &self.method, &self.headers, &self.query, self.client).await
    }
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Caller {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        let ConnectInfo(client) = ConnectInfo::<SocketAddr>::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let Query(query) = Query::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map_err(|e| error(StatusCode::BAD_REQUEST, e.body_text()))?;
        Ok(Caller { method: parts.method.clone(), client, headers: parts.headers.clone(), query })
    }
}

/// A line-protocol write; `db_param` names the query parameter that gives the database.
async fn write(state: AppState, caller: Caller, db_param: &str, body: UnreadBody) -> Response {
    let db = caller.query.get(db_param);
    let precision = caller.query.get("precision");
    let m = &state.metrics;
    m.write_requests.inc();
    // Everything the headers and the URL decide is checked before the body is read.
    let checked = async {
        let who = caller.principal(&state.door).await?;
        let Some(db) = db.filter(|d| !d.is_empty()).cloned() else {
            return Err(error(
                StatusCode::BAD_REQUEST,
                "missing database: give ?db= (or ?bucket=)",
            ));
        };
        let precision = match precision.map(|p| Precision::parse(p)) {
            None => Precision::Nanoseconds,
            Some(Some(p)) => p,
            Some(None) => {
                return Err(error(
                    StatusCode::BAD_REQUEST,
                    "precision must be one of ns, us, ms, s, m, h",
                ))
            }
        };
        state.door.authorize(&who, Some(&db), Privilege::Write).map_err(|e| query_error(&e))?;
        Ok((who, db, precision))
    };
    let (who, db, precision) = match checked.await {
        Ok(c) => c,
        Err(r) => {
            m.write_errors.inc();
            body.discard().await;
            return r;
        }
    };
    let headers = &caller.headers;
    let body = body.read(state.max_body_bytes).await;
    let text = match body_text(headers, body, state.max_body_bytes) {
        Ok(t) => t,
        Err((status, reason)) => {
            m.write_errors.inc();
            return error(status, reason);
        }
    };
    match state.door.write_lines(&who, &db, text, precision).await {
        Ok(s) => {
            m.lines_written.add(s.lines as u64);
            m.rows_written.add(s.rows as u64);
            StatusCode::NO_CONTENT.into_response()
        }
        Err(e) => {
            m.write_errors.inc();
            tracing::debug!(error = %e, "write rejected");
            query_error(&e)
        }
    }
}

async fn write_v1(State(state): State<AppState>, caller: Caller, body: UnreadBody) -> Response {
    write(state, caller, "db", body).await
}

async fn write_v2(State(state): State<AppState>, caller: Caller, body: UnreadBody) -> Response {
    write(state, caller, "bucket", body).await
}

/// Result formats of `/v1/sql`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Json,
    Csv,
    Arrow,
    Table,
}

fn format_of(headers: &HeaderMap) -> Format {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    if accept.contains("text/csv") {
        Format::Csv
    } else if accept.contains("application/vnd.apache.arrow.stream") {
        Format::Arrow
    } else if accept.contains("text/plain") {
        Format::Table
    } else {
        Format::Json
    }
}

async fn sql(State(state): State<AppState>, caller: Caller, body: UnreadBody) -> Response {
    let m = &state.metrics;
    m.sql_requests.inc();
    let who = match caller.principal(&state.door).await {
        Ok(w) => w,
        Err(r) => {
            m.sql_errors.inc();
            body.discard().await;
            return r;
        }
    };
    let (headers, q) = (caller.headers, caller.query);
    let body = body.read(state.max_body_bytes).await;
    let text = match body_text(&headers, body, state.max_body_bytes) {
        Ok(t) => t,
        Err((status, reason)) => {
            m.sql_errors.inc();
            return error(status, reason);
        }
    };
    let database = q.get("db").cloned().unwrap_or_else(|| ebb_query::DEFAULT_DATABASE.into());
    let session = state.door.request_session(who, &database, &text);
    if format_of(&headers) == Format::Table {
        // A prompt's format: every statement's result, one after another.
        return match all_as_text(&session, &text).await {
            Ok((tag, body)) => (
                [
                    (header::CONTENT_TYPE, "text/plain; charset=utf-8".to_string()),
                    (header::HeaderName::from_static("x-ebb-statement"), tag),
                ],
                body,
            )
                .into_response(),
            Err(e) => {
                m.sql_errors.inc();
                query_error(&e)
            }
        };
    }
    let result = async {
        let mut statements = session.statements(&text).await?;
        loop {
            let Some(out) = statements.next().await else {
                return Err(QueryError::invalid("empty query"));
            };
            let out = out?;
            if statements.remaining() == 0 {
                return Ok::<_, QueryError>(out);
            }
            // Earlier statements run to completion first; only the last one's rows are sent.
            datafusion::physical_plan::common::collect(out.stream).await?;
        }
    }
    .await;
    let last = match result {
        Ok(r) => r,
        Err(e) => {
            m.sql_errors.inc();
            return query_error(&e);
        }
    };
    let statement = (header::HeaderName::from_static("x-ebb-statement"), tag_of(&last.kind));
    let streamed = match format_of(&headers) {
        Format::Json => stream::Streamed::Json,
        Format::Csv => stream::Streamed::Csv,
        // (A text table was answered above.)
        Format::Arrow | Format::Table => stream::Streamed::Arrow,
    };
    // The first batch decides the status (most failures, such as a memory limit, come before
    // it); the rest is sent as it comes.
    let mut rows = last.stream;
    let first = match rows.next().await.transpose() {
        Ok(b) => b,
        Err(e) => {
            m.sql_errors.inc();
            return query_error(&QueryError::from(e));
        }
    };
    let mut enc = stream::Encoder::new(streamed, last.schema.clone());
    let ctype = enc.content_type();
    let head = (|| -> Result<Vec<u8>, stream::EncodeError> {
        let mut out = enc.begin()?;
        if let Some(b) = &first {
            out.extend(enc.batch(b)?);
        }
        Ok(out)
    })();
    let head = match head {
        Ok(h) => h,
        Err(e) => {
            m.sql_errors.inc();
            return error(StatusCode::INTERNAL_SERVER_ERROR, e);
        }
    };
    let state_enc = std::sync::Arc::new(parking_lot::Mutex::new(enc));
    let tail_enc = state_enc.clone();
    let body = futures::stream::once(async move { Ok::<_, std::io::Error>(Bytes::from(head)) })
        .chain(rows.map(move |b| {
            let b = b.map_err(std::io::Error::other)?;
            state_enc.lock().batch(&b).map(Bytes::from).map_err(std::io::Error::other)
        }))
        .chain(futures::stream::once(async move {
            tail_enc.lock().end().map(Bytes::from).map_err(std::io::Error::other)
        }));
    ([(header::CONTENT_TYPE, ctype.to_string()), statement], axum::body::Body::from_stream(body))
        .into_response()
}

/// The command tag of a statement's result (`x-ebb-statement`).
fn tag_of(kind: &StatementKind) -> String {
    match kind {
        StatementKind::Command(t) => t.clone(),
        StatementKind::Insert => "INSERT".into(),
        StatementKind::Delete => "DELETE".into(),
        StatementKind::Erase => "ERASE".into(),
        StatementKind::Query => "SELECT".into(),
    }
}

/// The most a request's text tables hold in memory (`Accept: text/plain`).
const MAX_TEXT_TABLE_BYTES: usize = 64 << 20;

/// Every statement of `text` run in turn, each result as text (what `Accept: text/plain`
/// asks for, a prompt's format): a query's rows as a table with its header, also when it has
/// no rows, and its row count; another statement's rows if it returns some, else its tag.
/// The last statement's tag and the text.
async fn all_as_text(
    session: &ebb_query::front::Session,
    text: &str,
) -> Result<(String, String), QueryError> {
    use datafusion::arrow;
    let mut statements = session.statements(text).await?;
    let (mut out, mut tag) = (String::new(), None);
    // Every row is held to size the columns: the results together stay under a bound.
    let mut held = 0usize;
    while let Some(result) = statements.next().await {
        let result = result?;
        let mut batches = Vec::new();
        let mut stream = result.stream;
        while let Some(b) = stream.next().await {
            let b = b?;
            held += b.get_array_memory_size();
            if held > MAX_TEXT_TABLE_BYTES {
                return Err(QueryError::invalid(format!(
                    "the results hold over {} MiB, more than a text table shows: ask for CSV \
                     (Accept: text/csv) or Arrow, which are streamed",
                    MAX_TEXT_TABLE_BYTES >> 20
                )));
            }
            batches.push(b);
        }
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        let this = tag_of(&result.kind);
        if !out.is_empty() {
            out.push('\n');
        }
        if result.schema.fields().is_empty() || (rows == 0 && result.kind != StatementKind::Query) {
            out.push_str(&this);
            out.push('\n');
        } else {
            // With no batch, an empty one: the header is printed all the same.
            let empty = [RecordBatch::new_empty(result.schema.clone())];
            let shown = if batches.is_empty() { &empty[..] } else { &batches[..] };
            let table = arrow::util::pretty::pretty_format_batches(shown)
                .map_err(|e| QueryError::Internal(format!("formatting a result: {e}")))?;
            out.push_str(&format!(
                "{table}\n({rows} {})\n",
                if rows == 1 { "row" } else { "rows" }
            ));
        }
        tag = Some(this);
    }
    let tag = tag.ok_or_else(|| QueryError::invalid("empty query"))?;
    Ok((tag, out))
}

async fn metrics(State(state): State<AppState>) -> Response {
    let engines: Vec<_> = match &state.serving {
        Serving::Node(db) => vec![(None, db.clone())],
        Serving::Cluster(router) => {
            router.shards().all().into_iter().map(|s| (Some(s.id), s.db.clone())).collect()
        }
    };
    let mut text = state.metrics.render(&engines);
    let c = state.door.counters();
    let n = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    text.push_str(&format!(
        "# HELP ebb_auth_failures_total Failed logins (any protocol).\n\
         # TYPE ebb_auth_failures_total counter\nebb_auth_failures_total {}\n\
         # HELP ebb_access_refused_total Statements and writes refused for lack of a privilege.\n\
         # TYPE ebb_access_refused_total counter\nebb_access_refused_total {}\n",
        n(&c.auth_failures),
        n(&c.refused)
    ));
    let (ran, failed) = state.door.statement_log().counts();
    text.push_str(&format!(
        "# HELP ebb_statements_total SQL statements this node ran (any protocol).\n\
         # TYPE ebb_statements_total counter\nebb_statements_total {ran}\n\
         # HELP ebb_statements_failed_total SQL statements that ended with an error.\n\
         # TYPE ebb_statements_failed_total counter\nebb_statements_failed_total {failed}\n\
         # HELP ebb_statements_running Requests running statements now (the rest wait for a \
         slot: max_statements).\n\
         # TYPE ebb_statements_running gauge\nebb_statements_running {}\n",
        state.door.statements_running()
    ));
    if let Some(router) = state.serving.cluster() {
        crate::cluster::metrics::render(router, &mut text);
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}
