//! Request bodies, read only once the request's credentials (in its headers) are accepted, with
//! a size limit and a deadline for the whole body, answering an oversized request with `413`
//! reliably.
//!
//! A handler takes the body unread ([`UnreadBody`]), authenticates the caller from the headers
//! and only then reads it ([`UnreadBody::read`]): nothing of an unauthenticated client's body is
//! held beyond [`REFUSED_DRAIN`] bytes, and no upload can hold a connection past
//! [`BODY_DEADLINE`].
//!
//! A server that rejects a large body without reading it closes the connection under a client
//! that is still sending, and a client that writes the whole body before reading the answer
//! (most line-protocol writers do) then sees a reset instead of the `413`. So an oversized body
//! of an authenticated client is read to its end and discarded, up to [`DRAIN_BYTES`], before
//! the answer goes out.

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request};
use axum::http::{header, StatusCode};
use futures::StreamExt;
use std::time::Duration;

/// An oversized body longer than this is not drained; the connection is closed instead.
pub const DRAIN_BYTES: usize = 64 << 20;

/// Longest wait for the next piece of a request body: a client that stops sending mid-body
/// is answered 408 instead of holding its handler (headers have their own 30 s limit,
/// `crate::http::serve::HEADER_TIMEOUT`).
pub const BODY_IDLE: Duration = Duration::from_secs(30);

/// Longest time a whole body may take to arrive, however steadily it trickles in.
pub const BODY_DEADLINE: Duration = Duration::from_secs(120);

/// What of a refused (unauthenticated or forbidden) request's body is read before the answer,
/// so that a small request sees its `401` rather than a reset; a longer one is cut off.
pub const REFUSED_DRAIN: usize = 64 << 10;

/// How long a refused request's body is read for.
const REFUSED_WAIT: Duration = Duration::from_secs(1);

/// A request body not read yet, and the length its headers declare.
pub struct UnreadBody {
    body: Body,
    declared: Option<usize>,
}

impl<S: Send + Sync> FromRequest<S> for UnreadBody {
    type Rejection = std::convert::Infallible;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        Ok(UnreadBody { body: req.into_body(), declared })
    }
}

impl UnreadBody {
    /// The body, of at most `limit` bytes, within [`BODY_DEADLINE`]; or why it was refused.
    pub async fn read(self, limit: usize) -> Result<Bytes, (StatusCode, String)> {
        let too_large =
            || (StatusCode::PAYLOAD_TOO_LARGE, format!("body larger than {limit} bytes"));
        if self.declared.is_some_and(|n| n > DRAIN_BYTES.max(limit)) {
            return Err(too_large());
        }
        let mut stream = self.body.into_data_stream();
        let mut buf = Vec::with_capacity(self.declared.unwrap_or(0).min(limit));
        let mut seen = 0usize;
        let deadline = tokio::time::Instant::now() + BODY_DEADLINE;
        loop {
            let wait = deadline.min(tokio::time::Instant::now() + BODY_IDLE);
            let chunk = match tokio::time::timeout_at(wait, stream.next()).await {
                Ok(Some(c)) => c,
                Ok(None) => break,
                Err(_) if wait == deadline => {
                    return Err((
                        StatusCode::REQUEST_TIMEOUT,
                        format!("the body took longer than {} s", BODY_DEADLINE.as_secs()),
                    ))
                }
                Err(_) => {
                    return Err((
                        StatusCode::REQUEST_TIMEOUT,
                        format!("the body stalled for {} s", BODY_IDLE.as_secs()),
                    ))
                }
            };
            let chunk =
                chunk.map_err(|e| (StatusCode::BAD_REQUEST, format!("reading the body: {e}")))?;
            seen = seen.saturating_add(chunk.len());
            if seen <= limit {
                buf.extend_from_slice(&chunk);
            } else if seen > DRAIN_BYTES.max(limit) {
                break;
            }
        }
        if seen > limit {
            return Err(too_large());
        }
        Ok(Bytes::from(buf))
    }

    /// Reads and drops what a refused request sent, up to [`REFUSED_DRAIN`] bytes within a
    /// second, so that the client sees the answer; a longer body is cut off with the connection.
    pub async fn discard(self) {
        if self.declared.is_some_and(|n| n > REFUSED_DRAIN) {
            return;
        }
        let mut stream = self.body.into_data_stream();
        let mut seen = 0usize;
        let drain = async {
            while let Some(Ok(c)) = stream.next().await {
                seen += c.len();
                if seen > REFUSED_DRAIN {
                    return;
                }
            }
        };
        let _ = tokio::time::timeout(REFUSED_WAIT, drain).await;
    }
}
