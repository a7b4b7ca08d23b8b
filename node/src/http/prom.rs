//! `POST /api/v1/write` and `POST /api/v1/read`: Prometheus remote write and remote read
//! (see [`crate::prom`]). The database is `?db=`; authentication is that of every request.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use ebb_query::lp::Precision;

use super::auth::error;
use super::{query_error, AppState, Caller};
use crate::body::LimitedBody;
use crate::prom::proto::{ReadRequest, WriteRequest};
use crate::prom::read::{ReadError, Reader};
use crate::prom::{decode, encode, write::to_line_protocol};

/// Line-protocol text written per front-door write of one remote write.
const CHUNK_BYTES: usize = 4 << 20;

/// The `db` parameter.
fn database(caller: &Caller) -> Option<String> {
    caller.query.get("db").filter(|d| !d.is_empty()).cloned()
}

/// The answer to a request without `db`.
fn no_database() -> Response {
    error(StatusCode::BAD_REQUEST, "missing database: add ?db=NAME to the remote URL")
}

/// Remote write: the samples as line protocol through the front door, in bounded chunks.
pub(super) async fn write(
    State(state): State<AppState>,
    caller: Caller,
    LimitedBody(body): LimitedBody,
) -> Response {
    let m = &state.metrics;
    m.write_requests.inc();
    let result = async {
        let who = caller.principal(&state.door).await?;
        let db = database(&caller).ok_or_else(no_database)?;
        let body = body.map_err(|(status, why)| error(status, why))?;
        let req: WriteRequest = decode(&body, state.max_body_bytes, "WriteRequest")
            .map_err(|e| error(StatusCode::BAD_REQUEST, e))?;
        drop(body);
        let c = to_line_protocol(&req, CHUNK_BYTES);
        let refused: usize = c.refused_series;
        drop(req);
        m.prometheus_samples_skipped.add((c.non_finite + c.refused_samples) as u64);
        for text in c.bodies.iter().cloned() {
            let s = state
                .door
                .write_lines(&who, &db, text, Precision::Milliseconds)
                .await
                .map_err(|e| query_error(&e))?;
            m.lines_written.add(s.lines as u64);
            m.rows_written.add(s.rows as u64);
            m.prometheus_samples_written.add(s.lines as u64);
        }
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
    LimitedBody(body): LimitedBody,
) -> Response {
    state.metrics.prometheus_reads.inc();
    let result = async {
        let who = caller.principal(&state.door).await?;
        let db = database(&caller).ok_or_else(no_database)?;
        let body = body.map_err(|(status, why)| error(status, why))?;
        let req: ReadRequest = decode(&body, state.max_body_bytes, "ReadRequest")
            .map_err(|e| error(StatusCode::BAD_REQUEST, e))?;
        let session = state.door.open(who, &db);
        let resp = Reader::new(&session).read(&req.queries).await.map_err(|e| match e {
            ReadError::Query(q) => query_error(&q),
            e @ ReadError::BadRegex { .. } => error(StatusCode::BAD_REQUEST, e),
            e => error(StatusCode::UNPROCESSABLE_ENTITY, e),
        })?;
        Ok::<_, Response>(
            (
                [
                    (header::CONTENT_TYPE, "application/x-protobuf"),
                    (header::CONTENT_ENCODING, "snappy"),
                ],
                encode(&resp),
            )
                .into_response(),
        )
    }
    .await;
    result.unwrap_or_else(|r| r)
}
