//! `POST /api/v1/write` and `POST /api/v1/read`: Prometheus remote write and remote read
//! (see [`crate::prom`]). The database is `?db=`; authentication is that of every request.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use ebb_query::lp::Precision;

use super::auth::error;
use super::{query_error, AppState, Caller};
use crate::body::UnreadBody;
use crate::prom::proto::{ReadRequest, WriteRequest};
use crate::prom::read::{ReadError, Reader};
use crate::prom::write::{text_size, to_line_protocol};
use crate::prom::{decode, encode};
use ebb_query::access::Privilege;

/// Line-protocol text written per front-door write of one remote write.
const CHUNK_BYTES: usize = 4 << 20;
/// How many times its compressed body's size (at least 64 KiB) a remote write may make in line
/// protocol.
const MAX_EXPANSION: usize = 256;

/// The `db` parameter.
fn database(caller: &Caller) -> Option<String> {
    caller.query.get("db").filter(|d| !d.is_empty()).cloned()
}

/// The answer to a request without `db`.
fn no_database() -> Response {
    error(StatusCode::BAD_REQUEST, "missing database: add ?db=NAME to the remote URL")
}

/// The caller, its database (`?db=`) once it holds `privilege` there, and then the body: a
/// refused request's body is not read.
async fn checked_body(
    state: &AppState,
    caller: &Caller,
    privilege: Option<Privilege>,
    body: UnreadBody,
) -> Result<(ebb_query::front::Principal, String, axum::body::Bytes), Response> {
    let checked = async {
        let who = caller.principal(&state.door).await?;
        let db = database(caller).ok_or_else(no_database)?;
        if let Some(p) = privilege {
            state.door.authorize(&who, Some(&db), p).map_err(|e| query_error(&e))?;
        }
        Ok::<_, Response>((who, db))
    };
    let (who, db) = match checked.await {
        Ok(c) => c,
        Err(r) => {
            body.discard().await;
            return Err(r);
        }
    };
    let body = body.read(state.max_body_bytes).await.map_err(|(status, why)| error(status, why))?;
    Ok((who, db, body))
}

/// Remote write: the samples as line protocol through the front door, in bounded chunks.
pub(super) async fn write(
    State(state): State<AppState>,
    caller: Caller,
    body: UnreadBody,
) -> Response {
    let m = &state.metrics;
    m.write_requests.inc();
    let result = async {
        let (who, db, body) = checked_body(&state, &caller, Some(Privilege::Write), body).await?;
        let req: WriteRequest = decode(&body, state.max_body_bytes, "WriteRequest")
            .map_err(|e| error(StatusCode::BAD_REQUEST, e))?;
        if text_size(&req) > MAX_EXPANSION.saturating_mul(body.len().max(1 << 16)) {
            return Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "the samples' series labels make this request far larger as rows than as \
                 protobuf: send fewer samples per request (queue_config.max_samples_per_send)",
            ));
        }
        drop(body);
        let mut chunks = to_line_protocol(&req, CHUNK_BYTES);
        while let Some(text) = chunks.next_body() {
            let s = state
                .door
                .write_lines(&who, &db, text, Precision::Milliseconds)
                .await
                .map_err(|e| query_error(&e))?;
            m.lines_written.add(s.lines as u64);
            m.rows_written.add(s.rows as u64);
            m.prometheus_samples_written.add(s.lines as u64);
        }
        let c = chunks.out;
        let refused = c.refused_series;
        m.prometheus_samples_skipped.add((c.non_finite + c.refused_samples) as u64);
        match c.refusal() {
            Some(why) => {
                tracing::warn!(refused, "remote write: {why}");
                Err(error(StatusCode::BAD_REQUEST, why))
            }
            None => Ok(StatusCode::NO_CONTENT.into_response()),
        }
    }
    .await;
    result.unwrap_or_else(|r| {
        m.write_errors.inc();
        r
    })
}

/// Remote read: each query as SQL through the front door as the caller; one `ReadResponse`
/// of raw samples (the `SAMPLES` response type, which every Prometheus accepts).
pub(super) async fn read(
    State(state): State<AppState>,
    caller: Caller,
    body: UnreadBody,
) -> Response {
    state.metrics.prometheus_reads.inc();
    let result = async {
        let (who, db, body) = checked_body(&state, &caller, None, body).await?;
        let req: ReadRequest = decode(&body, state.max_body_bytes, "ReadRequest")
            .map_err(|e| error(StatusCode::BAD_REQUEST, e))?;
        // Queries only: a session shared with other requests on the database.
        let session = state.door.request_session(who, &db, "");
        let resp = Reader::new(&session).read(&req.queries).await.map_err(|e| match e {
            ReadError::Query(q) => query_error(&q),
            e @ (ReadError::BadRegex { .. } | ReadError::BadRequest(_)) => {
                error(StatusCode::BAD_REQUEST, e)
            }
            e => error(StatusCode::UNPROCESSABLE_ENTITY, e),
        })?;
        let body = encode(&resp).map_err(|e| error(StatusCode::INTERNAL_SERVER_ERROR, e))?;
        Ok::<_, Response>(
            (
                [
                    (header::CONTENT_TYPE, "application/x-protobuf"),
                    (header::CONTENT_ENCODING, "snappy"),
                ],
                body,
            )
                .into_response(),
        )
    }
    .await;
    result.unwrap_or_else(|r| r)
}
