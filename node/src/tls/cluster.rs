//! What the cluster port checks besides the peer's certificate: every request carries the
//! cluster id (`x-ebb-cluster-id`), so that a node of another cluster signed by the same CA (or
//! a node that lost its data and created a new cluster) is not answered. Health checks and
//! `Join` (how a new node learns the id) are exempt; `Join` still needs a member certificate
//! when the port runs mutual TLS.

use std::sync::Arc;
use std::task::{Context, Poll};

use ebb_raft::transport::{Connections, CLUSTER_ID_HEADER};
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

use super::{ClusterFiles, TlsError, NODE_NAME};

/// Paths answered without a cluster id (a trailing `/`: every method of the service).
const EXEMPT: &[&str] = &["/grpc.health.v1.Health/", "/ebb.cluster.v1.Cluster/Join"];

/// The TLS client configuration a node uses towards the others: its certificate, and the
/// cluster CA to verify theirs against (as [`NODE_NAME`]).
pub fn client_config(files: &ClusterFiles) -> Result<ClientTlsConfig, TlsError> {
    let read = |p: &std::path::Path| {
        std::fs::read(p).map_err(|source| TlsError::Read { path: p.to_path_buf(), source })
    };
    // Checked the way the server side loads them (the key must be the certificate's), so a
    // broken renewal is refused here instead of failing every connection later.
    super::certificates(&files.ca)?;
    super::certified_key(&files.node)?;
    Ok(ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read(&files.ca)?))
        .identity(Identity::from_pem(read(&files.node.cert)?, read(&files.node.key)?))
        .domain_name(NODE_NAME))
}

/// A tower layer refusing requests without this node's cluster id.
#[derive(Debug, Clone)]
pub struct RequireClusterId {
    conns: Arc<Connections>,
}

impl RequireClusterId {
    /// Checks against the id `conns` sends (none: a cluster created before ids, nothing to
    /// check).
    pub fn new(conns: Arc<Connections>) -> RequireClusterId {
        RequireClusterId { conns }
    }
}

impl<S> tower::Layer<S> for RequireClusterId {
    type Service = ClusterIdCheck<S>;

    fn layer(&self, inner: S) -> ClusterIdCheck<S> {
        ClusterIdCheck { inner, conns: self.conns.clone() }
    }
}

/// The service [`RequireClusterId`] wraps around the node's gRPC services.
#[derive(Debug, Clone)]
pub struct ClusterIdCheck<S> {
    inner: S,
    conns: Arc<Connections>,
}

/// Why a request is refused, or `None` to serve it.
fn refusal(path: &str, sent: Option<&[u8]>, ours: Option<&str>) -> Option<&'static str> {
    let ours = ours?;
    let exempt = |p: &&str| if p.ends_with('/') { path.starts_with(p) } else { path == *p };
    if EXEMPT.iter().any(exempt) {
        return None;
    }
    match sent {
        None => Some("the request carries no cluster id"),
        Some(id) if id == ours.as_bytes() => None,
        Some(_) => Some("the request belongs to another cluster"),
    }
}

impl<S, B, RB> tower::Service<http::Request<B>> for ClusterIdCheck<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
    RB: Default + Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<RB>;
    type Error = S::Error;
    type Future = futures::future::Either<
        S::Future,
        futures::future::Ready<Result<http::Response<RB>, S::Error>>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let ours = self.conns.cluster_id();
        let sent = req.headers().get(CLUSTER_ID_HEADER).map(|v| v.as_bytes());
        match refusal(req.uri().path(), sent, ours.as_deref()) {
            None => futures::future::Either::Left(self.inner.call(req)),
            Some(why) => {
                tracing::warn!(path = req.uri().path(), why, "refused a cluster request");
                let status = tonic::Status::permission_denied(why);
                futures::future::Either::Right(futures::future::ready(Ok(status.into_http())))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_need_the_cluster_id() {
        let vote = "/ebb.raft.v1.Raft/Vote";
        assert_eq!(refusal(vote, None, None), None, "a cluster without an id checks nothing");
        assert!(refusal(vote, None, Some("c1")).is_some());
        assert!(refusal(vote, Some(b"c2"), Some("c1")).is_some());
        assert_eq!(refusal(vote, Some(b"c1"), Some("c1")), None);
        assert_eq!(refusal("/ebb.cluster.v1.Cluster/Join", None, Some("c1")), None);
        assert_eq!(refusal("/grpc.health.v1.Health/Check", None, Some("c1")), None);
        assert!(refusal("/ebb.cluster.v1.Cluster/JoinX", None, Some("c1")).is_some());
    }
}
