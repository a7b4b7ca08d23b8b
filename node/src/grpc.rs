//! The gRPC endpoint (tonic). A single node serves the standard health service
//! (`grpc.health.v1.Health`), which Kubernetes gRPC probes use; node-to-node services (Raft,
//! shard scans) are added here as the cluster needs them.

use std::time::Duration;

use crate::tls::conn::Incoming;

/// Longest a gRPC request may take on this server (a snapshot of a large shard streamed to a
/// new replica is the longest; clients set shorter deadlines of their own).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(1800);

/// Concurrent requests on one connection.
pub const MAX_STREAMS: u32 = 1024;

/// A gRPC server with the node's limits: a timeout on every request, HTTP/2 keep-alives that
/// drop a peer gone silent within 30 s, and bounded streams per connection.
pub fn builder() -> tonic::transport::Server {
    tonic::transport::Server::builder()
        .timeout(REQUEST_TIMEOUT)
        .http2_keepalive_interval(Some(Duration::from_secs(10)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)))
        .max_concurrent_streams(Some(MAX_STREAMS))
}

/// Serves gRPC on `incoming` until `shutdown` resolves.
pub async fn serve(
    incoming: Incoming,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_service_status("", tonic_health::ServingStatus::Serving).await;
    builder().add_service(health).serve_with_incoming_shutdown(incoming, shutdown).await
}
