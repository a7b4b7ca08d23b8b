//! The gRPC endpoint (tonic). A single node serves the standard health service
//! (`grpc.health.v1.Health`), which Kubernetes gRPC probes use; node-to-node services (Raft,
//! shard scans) are added here as the cluster needs them.

use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;

/// Serves gRPC on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_service_status("", tonic_health::ServingStatus::Serving).await;
    tonic::transport::Server::builder()
        .add_service(health)
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
        .await
}
