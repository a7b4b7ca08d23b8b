//! The HTTP API (axum):
//!
//! - `POST /write?db=&precision=` and `POST /api/v2/write?bucket=&precision=`: InfluxDB line
//!   protocol (gzip accepted), `204` on success; a bad request is rejected whole with `400` and
//!   the line number and reason.
//! - `POST /v1/sql?db=`: the body is SQL; JSON rows by default, CSV (`Accept: text/csv`),
//!   Arrow IPC (`Accept: application/vnd.apache.arrow.stream`) or a text table
//!   (`Accept: text/plain`).
//! - `GET /health` (the process is up), `GET /ready` (it serves requests), `GET /metrics`
//!   (Prometheus text format).

use std::collections::HashMap;
use std::io::Read;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use datafusion::arrow::record_batch::RecordBatch;
use ebb_query::lp::Precision;
use ebb_query::{Database, QueryError, SqlSession, StatementKind};
use futures::StreamExt;

use crate::body::LimitedBody;
use crate::metrics::Metrics;

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    /// The database.
    pub db: Option<Arc<Database>>,
    /// In cluster mode: routes writes and SQL over the cluster (then `db` is `None`).
    pub cluster: Option<Arc<crate::cluster::Router>>,
    /// Counters for `/metrics`.
    pub metrics: Arc<Metrics>,
    /// Largest body accepted (after decompression).
    pub max_body_bytes: usize,
    /// SQL sessions by database, shared by requests.
    pub sessions: Arc<SessionCache>,
}

/// One SQL session per database, shared by all HTTP requests: building a DataFusion context
/// registers every built-in function, which costs more than planning a simple query. Requests
/// that change session settings (`SET`) get a session of their own, so HTTP stays stateless.
#[derive(Default)]
pub struct SessionCache {
    sessions: std::sync::Mutex<HashMap<String, Arc<SqlSession>>>,
}

impl SessionCache {
    /// Most databases whose sessions are kept.
    const MAX: usize = 256;

    /// The shared session of `database`, or a private one if `sql` changes settings.
    pub fn session(&self, db: &Arc<Database>, database: &str, sql: &str) -> Arc<SqlSession> {
        let first = sql.trim_start().get(..4).unwrap_or("");
        if first.eq_ignore_ascii_case("set ") || first.eq_ignore_ascii_case("set\t") {
            return Arc::new(SqlSession::new(db.clone(), database));
        }
        let mut map = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = map.get(database) {
            return s.clone();
        }
        if map.len() >= Self::MAX {
            map.clear();
        }
        let s = Arc::new(SqlSession::new(db.clone(), database));
        map.insert(database.to_string(), s.clone());
        s
    }
}

/// The router.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/write", post(write_v1))
        .route("/api/v2/write", post(write_v2))
        .route("/v1/sql", post(sql))
        .route("/health", get(|| async { "ok\n" }))
        .route("/ready", get(|| async { "ready\n" }))
        .route("/metrics", get(metrics))
        .route("/v1/audit/verify", get(audit_verify))
        // Bodies are limited by `LimitedBody`, which answers oversized ones reliably.
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
}

fn error(status: StatusCode, msg: impl std::fmt::Display) -> Response {
    let body = serde_json::json!({ "error": msg.to_string() }).to_string();
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn query_error(e: &QueryError) -> Response {
    let status = match e {
        QueryError::UnknownTable(_) | QueryError::UnknownDatabase(_) => StatusCode::NOT_FOUND,
        e if e.is_client_error() => StatusCode::BAD_REQUEST,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error(status, e)
}

/// The body as text, gunzipped if `Content-Encoding: gzip`, at most `limit` bytes.
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
        let mut dec = flate2::read::GzDecoder::new(&body[..]).take(limit as u64 + 1);
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

async fn write(
    state: AppState,
    db: Option<&String>,
    precision: Option<&String>,
    headers: HeaderMap,
    body: Result<Bytes, (StatusCode, String)>,
) -> Response {
    let m = &state.metrics;
    m.write_requests.inc();
    let Some(db) = db.filter(|d| !d.is_empty()).cloned() else {
        m.write_errors.inc();
        return error(StatusCode::BAD_REQUEST, "missing database: give ?db= (or ?bucket=)");
    };
    let precision = match precision.map(|p| Precision::parse(p)) {
        None => Precision::Nanoseconds,
        Some(Some(p)) => p,
        Some(None) => {
            m.write_errors.inc();
            return error(StatusCode::BAD_REQUEST, "precision must be one of ns, us, ms, s, m, h");
        }
    };
    let text = match body_text(&headers, body, state.max_body_bytes) {
        Ok(t) => t,
        Err((status, reason)) => {
            m.write_errors.inc();
            return error(status, reason);
        }
    };
    if let Some(router) = &state.cluster {
        return match router.write_lines(&db, &text, precision, ebb_query::now_ns()).await {
            Ok(s) => {
                m.lines_written.add(s.lines as u64);
                m.rows_written.add(s.rows as u64);
                StatusCode::NO_CONTENT.into_response()
            }
            Err(e) => {
                m.write_errors.inc();
                let status = match e {
                    crate::cluster::RouteError::Rejected(_) => StatusCode::BAD_REQUEST,
                    crate::cluster::RouteError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
                };
                error(status, e.to_string())
            }
        };
    }
    let Some(database) = state.db.clone() else {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "no database");
    };
    let res = tokio::task::spawn_blocking(move || {
        database.write_lines(&db, &text, precision, ebb_query::now_ns())
    })
    .await;
    match res {
        Ok(Ok(s)) => {
            m.lines_written.add(s.lines as u64);
            m.rows_written.add(s.rows as u64);
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(Err(e)) => {
            m.write_errors.inc();
            tracing::debug!(error = %e, "write rejected");
            query_error(&e)
        }
        Err(e) => {
            m.write_errors.inc();
            error(StatusCode::INTERNAL_SERVER_ERROR, format!("write task failed: {e}"))
        }
    }
}

async fn write_v1(
    State(state): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    LimitedBody(body): LimitedBody,
) -> Response {
    write(state, q.get("db"), q.get("precision"), headers, body).await
}

async fn write_v2(
    State(state): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    LimitedBody(body): LimitedBody,
) -> Response {
    write(state, q.get("bucket"), q.get("precision"), headers, body).await
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

async fn sql(
    State(state): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    LimitedBody(body): LimitedBody,
) -> Response {
    let m = &state.metrics;
    m.sql_requests.inc();
    let text = match body_text(&headers, body, state.max_body_bytes) {
        Ok(t) => t,
        Err((status, reason)) => {
            m.sql_errors.inc();
            return error(status, reason);
        }
    };
    let database = q.get("db").cloned().unwrap_or_else(|| ebb_query::DEFAULT_DATABASE.into());
    if let Some(router) = &state.cluster {
        return cluster_sql(&state, router.clone(), &database, &text, &headers).await;
    }
    let Some(db) = state.db.as_ref() else {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "no database");
    };
    let session = state.sessions.session(db, &database, &text);
    let result = async {
        let mut outputs = session.execute_all(&text).await?;
        let Some(last) = outputs.pop() else {
            return Err(QueryError::invalid("empty query"));
        };
        // Earlier statements run to completion first.
        for o in outputs {
            datafusion::physical_plan::common::collect(o.stream).await?;
        }
        let kind = last.kind.clone();
        let schema = last.schema.clone();
        let mut batches = Vec::new();
        let mut stream = last.stream;
        while let Some(b) = stream.next().await {
            batches.push(b?);
        }
        Ok::<_, QueryError>((kind, schema, batches))
    }
    .await;
    let (kind, schema, batches) = match result {
        Ok(r) => r,
        Err(e) => {
            m.sql_errors.inc();
            return query_error(&e);
        }
    };
    let tag = match &kind {
        StatementKind::Command(t) => t.clone(),
        StatementKind::Insert => "INSERT".into(),
        StatementKind::Delete => "DELETE".into(),
        StatementKind::Erase => "ERASE".into(),
        StatementKind::Query => "SELECT".into(),
    };
    match encode(format_of(&headers), &schema, &batches) {
        Ok((ctype, body)) => (
            [
                (header::CONTENT_TYPE, ctype),
                (header::HeaderName::from_static("x-ebb-statement"), tag),
            ],
            body,
        )
            .into_response(),
        Err(e) => {
            m.sql_errors.inc();
            error(StatusCode::INTERNAL_SERVER_ERROR, e)
        }
    }
}

/// `/v1/sql` in cluster mode: one statement over every shard.
async fn cluster_sql(
    state: &AppState,
    router: Arc<crate::cluster::Router>,
    database: &str,
    text: &str,
    headers: &HeaderMap,
) -> Response {
    let session = crate::cluster::ClusterSql::new(router, database);
    match session.query(text).await {
        Ok(batches) => {
            let schema = batches
                .first()
                .map(|b| b.schema())
                .unwrap_or_else(|| Arc::new(datafusion::arrow::datatypes::Schema::empty()));
            match encode(format_of(headers), &schema, &batches) {
                Ok((ctype, body)) => ([(header::CONTENT_TYPE, ctype)], body).into_response(),
                Err(e) => {
                    state.metrics.sql_errors.inc();
                    error(StatusCode::INTERNAL_SERVER_ERROR, e)
                }
            }
        }
        Err(e) => {
            state.metrics.sql_errors.inc();
            let status = match e {
                crate::cluster::ClusterSqlError::Invalid(_) => StatusCode::BAD_REQUEST,
                crate::cluster::ClusterSqlError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            };
            error(status, e.to_string())
        }
    }
}

fn encode(
    f: Format,
    schema: &datafusion::arrow::datatypes::SchemaRef,
    batches: &[RecordBatch],
) -> Result<(String, Vec<u8>), String> {
    use datafusion::arrow;
    let err = |e: arrow::error::ArrowError| e.to_string();
    match f {
        Format::Json => {
            let mut w = arrow::json::ArrayWriter::new(Vec::new());
            let refs: Vec<&RecordBatch> = batches.iter().collect();
            w.write_batches(&refs).map_err(err)?;
            w.finish().map_err(err)?;
            let mut out = w.into_inner();
            if out.is_empty() {
                out.extend_from_slice(b"[]");
            }
            out.push(b'\n');
            Ok(("application/json".into(), out))
        }
        Format::Csv => {
            let mut w = arrow::csv::WriterBuilder::new().with_header(true).build(Vec::new());
            for b in batches {
                w.write(b).map_err(err)?;
            }
            Ok(("text/csv".into(), w.into_inner()))
        }
        Format::Arrow => {
            let mut w =
                arrow::ipc::writer::StreamWriter::try_new(Vec::new(), schema).map_err(err)?;
            for b in batches {
                w.write(b).map_err(err)?;
            }
            w.finish().map_err(err)?;
            Ok(("application/vnd.apache.arrow.stream".into(), w.into_inner().map_err(err)?))
        }
        Format::Table => {
            let t = if schema.fields().is_empty() {
                String::new()
            } else {
                arrow::util::pretty::pretty_format_batches(batches).map_err(err)?.to_string()
            };
            let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
            Ok((
                "text/plain; charset=utf-8".into(),
                format!("{t}\n({rows} {})\n", if rows == 1 { "row" } else { "rows" }).into_bytes(),
            ))
        }
    }
}

async fn metrics(State(state): State<AppState>) -> Response {
    let engines: Vec<_> = match (&state.db, &state.cluster) {
        (Some(db), _) => vec![(None, db.clone())],
        (None, Some(router)) => {
            router.shards().all().into_iter().map(|s| (Some(s.id), s.db.clone())).collect()
        }
        (None, None) => Vec::new(),
    };
    let mut text = state.metrics.render(&engines);
    if let Some(router) = &state.cluster {
        crate::cluster::metrics::render(router, &mut text);
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// Query of `/v1/audit/verify`.
#[derive(Debug, serde::Deserialize)]
struct VerifyQuery {
    id: u64,
}

/// `GET /v1/audit/verify?id=N`: scans every replica for values delete request `N` covers
/// (a JSON [`crate::audit::VerifyReport`]; `pass` is the verdict).
async fn audit_verify(State(state): State<AppState>, Query(q): Query<VerifyQuery>) -> Response {
    let report = match (&state.db, &state.cluster) {
        (Some(db), _) => {
            let db = db.clone();
            let scan =
                tokio::task::spawn_blocking(move || crate::audit::audit_database(&db, q.id, 0, 0));
            match scan.await {
                Ok(r) => crate::audit::VerifyReport::new(q.id, vec![r]),
                Err(e) => {
                    return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response()
                }
            }
        }
        (None, Some(router)) => crate::cluster::deletions::verify(router, q.id).await,
        (None, None) => return StatusCode::SERVICE_UNAVAILABLE.into_response(),
    };
    axum::Json(report).into_response()
}
