//! Serves the HTTP API on the port's connections with hyper directly (rather than
//! `axum::serve`, which runs hyper without a timer and so without its header timeout): a
//! connection must send each request's headers within [`HEADER_TIMEOUT`], the first one included
//! and the next one on a kept-alive connection too, so idle or silent clients give their
//! connection slot back instead of holding it.

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;

use crate::tls::conn::Incoming;

/// Longest wait for a request's headers (also the most a kept-alive connection stays idle).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// How long requests in flight may finish after shutdown begins.
pub const DRAIN: Duration = Duration::from_secs(30);

/// Serves `app` on `incoming` until `shutdown` resolves, then lets requests in flight finish
/// (for at most [`DRAIN`]).
pub async fn serve(
    mut incoming: Incoming,
    app: Router,
    shutdown: impl std::future::Future<Output = ()>,
) {
    use axum::serve::Listener;
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (conn, addr): (_, SocketAddr) = tokio::select! {
            c = incoming.accept() => c,
            () = &mut shutdown => break,
        };
        let app = app.clone();
        let svc = tower::util::MapRequest::new(app, move |mut req: axum::extract::Request| {
            req.extensions_mut().insert(ConnectInfo(addr));
            req
        });
        let svc = TowerToHyperService::new(tower::util::MapRequest::new(
            svc,
            |req: hyper::Request<hyper::body::Incoming>| req.map(axum::body::Body::new),
        ));
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_TIMEOUT)
            .keep_alive(true)
            .serve_connection(TokioIo::new(conn), svc);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(client = %addr, error = %e, "HTTP connection ended");
            }
        });
    }
    drop(incoming);
    if tokio::time::timeout(DRAIN, graceful.shutdown()).await.is_err() {
        tracing::warn!("HTTP requests still running {} s after shutdown began", DRAIN.as_secs());
    }
}
