//! Request bodies with a size limit that answer an oversized request with `413` reliably.
//!
//! A server that rejects a large body without reading it closes the connection under a client
//! that is still sending, and a client that writes the whole body before reading the answer
//! (most line-protocol writers do) then sees a reset instead of the `413`. So an oversized body is
//! read to its end and discarded, up to [`DRAIN_BYTES`], before the answer goes out.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{header, StatusCode};
use futures::StreamExt;

use crate::http::AppState;

/// An oversized body longer than this is not drained; the connection is closed instead.
pub const DRAIN_BYTES: usize = 64 << 20;

/// Longest wait for the next piece of a request body: a client that stops sending mid-body
/// is answered 408 instead of holding its handler (headers have their own 30 s limit,
/// `crate::http::serve::HEADER_TIMEOUT`).
pub const BODY_IDLE: std::time::Duration = std::time::Duration::from_secs(30);

/// A request body of at most [`AppState::max_body_bytes`], or why it was refused.
pub struct LimitedBody(pub Result<Bytes, (StatusCode, String)>);

impl FromRequest<AppState> for LimitedBody {
    type Rejection = std::convert::Infallible;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let limit = state.max_body_bytes;
        let too_large =
            || (StatusCode::PAYLOAD_TOO_LARGE, format!("body larger than {limit} bytes"));
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        if declared.is_some_and(|n| n > DRAIN_BYTES.max(limit)) {
            return Ok(LimitedBody(Err(too_large())));
        }
        let mut stream = req.into_body().into_data_stream();
        let mut buf = Vec::with_capacity(declared.unwrap_or(0).min(limit));
        let mut seen = 0usize;
        loop {
            let chunk = match tokio::time::timeout(BODY_IDLE, stream.next()).await {
                Ok(Some(c)) => c,
                Ok(None) => break,
                Err(_) => {
                    return Ok(LimitedBody(Err((
                        StatusCode::REQUEST_TIMEOUT,
                        format!("the body stalled for {} s", BODY_IDLE.as_secs()),
                    ))))
                }
            };
            let chunk = match chunk {
                Ok(c) => c,
                Err(e) => {
                    return Ok(LimitedBody(Err((
                        StatusCode::BAD_REQUEST,
                        format!("reading the body: {e}"),
                    ))))
                }
            };
            seen = seen.saturating_add(chunk.len());
            if seen <= limit {
                buf.extend_from_slice(&chunk);
            } else if seen > DRAIN_BYTES.max(limit) {
                break;
            }
        }
        if seen > limit {
            return Ok(LimitedBody(Err(too_large())));
        }
        Ok(LimitedBody(Ok(Bytes::from(buf))))
    }
}
