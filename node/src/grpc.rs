//! The gRPC endpoint (tonic). A single node serves the standard health service
//! (`grpc.health.v1.Health`), which Kubernetes gRPC probes use; node-to-node services (Raft,
//! shard scans) are added here as the cluster needs them.

use crate::tls::conn::Incoming;

/// Serves gRPC on `incoming` until `shutdown` resolves.
pub async fn serve(
    incoming: Incoming,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_service_status("", tonic_health::ServingStatus::Serving).await;
    tonic::transport::Server::builder()
        .add_service(health)
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}
