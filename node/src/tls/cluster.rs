//! What the cluster port checks besides the peer's certificate: every request carries the
//! cluster id (`x-ebb-cluster-id`), so that a node of another cluster signed by the same CA (or
//! a node that lost its data and created a new cluster) is not answered; and the sender's
//! version (`x-ebb-version`, absent from release 0.1.0), so that a node whose binary does not
//! support the cluster's active version is not answered either (see
//! `crate::cluster::version`). Health checks and `Join` (how a new node learns the id; it
//! checks the joining node's version itself) are exempt; `Join` still needs a member
//! certificate when the port runs mutual TLS.

use std::sync::Arc;
use std::task::{Context, Poll};

use ebb_raft::transport::{Connections, CLUSTER_ID_HEADER, VERSION_HEADER};

use crate::cluster::version::{parse_header, PeerVersion, Versions};
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

/// A tower layer refusing requests without this node's cluster id, or from a node whose binary
/// does not support the cluster's active version.
#[derive(Debug, Clone)]
pub struct RequireClusterId {
    conns: Arc<Connections>,
    versions: Arc<Versions>,
}

impl RequireClusterId {
    /// Checks against the id `conns` sends (none: a cluster created before ids, nothing to
    /// check) and the active version `versions` holds.
    pub fn new(conns: Arc<Connections>, versions: Arc<Versions>) -> RequireClusterId {
        RequireClusterId { conns, versions }
    }
}

impl<S> tower::Layer<S> for RequireClusterId {
    type Service = ClusterIdCheck<S>;

    fn layer(&self, inner: S) -> ClusterIdCheck<S> {
        ClusterIdCheck { inner, conns: self.conns.clone(), versions: self.versions.clone() }
    }
}

/// The service [`RequireClusterId`] wraps around the node's gRPC services.
#[derive(Debug, Clone)]
pub struct ClusterIdCheck<S> {
    inner: S,
    conns: Arc<Connections>,
    versions: Arc<Versions>,
}

/// What a request says of its sender.
struct Sent<'a> {
    cluster_id: Option<&'a [u8]>,
    version: Option<&'a [u8]>,
}

/// Why a request is refused, or `None` to serve it.
fn refusal(path: &str, sent: &Sent<'_>, ours: Option<&str>, versions: &Versions) -> Option<String> {
    let exempt = |p: &&str| if p.ends_with('/') { path.starts_with(p) } else { path == *p };
    if EXEMPT.iter().any(exempt) {
        return None;
    }
    if let Some(ours) = ours {
        match sent.cluster_id {
            None => return Some("the request carries no cluster id".into()),
            Some(id) if id == ours.as_bytes() => {}
            Some(_) => return Some("the request belongs to another cluster".into()),
        }
    }
    // Served without allocating; the sender is described only when refused.
    match parse_header(sent.version) {
        None => Some(format!("the request's {VERSION_HEADER} header does not parse")),
        Some((_, range)) if range.runs_at(versions.active()) => None,
        Some(_) => PeerVersion::from_header(sent.version).and_then(|p| versions.refusal(&p)),
    }
}

/// Logs a refused request, at most once every 10 s (a node refused retries many times a second):
/// with how many were refused since the last line.
fn log_refusal(path: &str, why: &str) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST_MS: AtomicU64 = AtomicU64::new(0);
    static SINCE: AtomicU64 = AtomicU64::new(0);
    let now = ebb_query::now_ms();
    let last = LAST_MS.load(Ordering::Relaxed);
    if now.saturating_sub(last) < 10_000
        || LAST_MS.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_err()
    {
        SINCE.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let others = SINCE.swap(0, Ordering::Relaxed);
    tracing::warn!(path, why, others_in_the_last_10s = others, "refused a cluster request");
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
        let sent = Sent {
            cluster_id: req.headers().get(CLUSTER_ID_HEADER).map(|v| v.as_bytes()),
            version: req.headers().get(VERSION_HEADER).map(|v| v.as_bytes()),
        };
        match refusal(req.uri().path(), &sent, ours.as_deref(), &self.versions) {
            None => futures::future::Either::Left(self.inner.call(req)),
            Some(why) => {
                log_refusal(req.uri().path(), &why);
                let status = tonic::Status::permission_denied(why);
                futures::future::Either::Right(futures::future::ready(Ok(status.into_http())))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::cluster::version::VersionRange;

    #[test]
    fn requests_need_the_cluster_id_and_a_version_the_cluster_runs() {
        let v = Versions::new(VersionRange::BUILD);
        let header = v.header();
        let id =
            |c: Option<&'static [u8]>| Sent { cluster_id: c, version: Some(header.as_bytes()) };
        let check = |path: &str, sent: Sent<'_>, ours: Option<&str>| refusal(path, &sent, ours, &v);
        let vote = "/ebb.raft.v1.Raft/Vote";
        assert_eq!(check(vote, id(None), None), None, "a cluster without an id checks no id");
        assert!(check(vote, id(None), Some("c1")).is_some());
        assert!(check(vote, id(Some(b"c2")), Some("c1")).is_some());
        assert_eq!(check(vote, id(Some(b"c1")), Some("c1")), None);
        assert_eq!(check("/ebb.cluster.v1.Cluster/Join", id(None), Some("c1")), None);
        assert_eq!(check("/grpc.health.v1.Health/Check", id(None), Some("c1")), None);
        assert!(check("/ebb.cluster.v1.Cluster/JoinX", id(None), Some("c1")).is_some());
        // The previous release sends no version: served until the cluster is finalized past it.
        let legacy = || Sent { cluster_id: Some(b"c1"), version: None };
        assert_eq!(check(vote, legacy(), Some("c1")), None);
        let garbled = Sent { cluster_id: Some(b"c1"), version: Some(b"x") };
        assert!(check(vote, garbled, Some("c1")).is_some());
        v.set_active(2);
        let why = check(vote, legacy(), Some("c1")).expect("refused once finalized");
        assert!(why.contains("cluster versions 1-1") && why.contains("cluster version 2"), "{why}");
        assert_eq!(check(vote, id(Some(b"c1")), Some("c1")), None);
        assert_eq!(check("/ebb.cluster.v1.Cluster/Join", legacy(), Some("c1")), None);
    }
}
