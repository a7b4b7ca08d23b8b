//! Raft traffic between nodes over tonic gRPC: one HTTP/2 connection per pair of nodes carries
//! every Raft group they share (messages name their group and target node). Openraft messages
//! travel postcard-encoded; snapshots stream as their files, in chunks, and are validated
//! before they are installed.

mod client;
mod faults;
mod pace;
mod server;
mod stats;
mod stream;

pub use pace::Pacer;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tonic::metadata::{AsciiMetadataValue, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

pub use client::{GroupClient, GroupNetwork};
pub use faults::{Fate, Faults};
pub use server::{GroupHandle, Groups, RaftService};
pub use stats::Traffic;

use crate::types::NodeId;

/// The generated gRPC code.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("ebb.raft.v1");
}

/// Largest gRPC message a node accepts (an AppendEntries of several write batches).
pub const MAX_MESSAGE_BYTES: usize = 256 << 20;

/// Size of one snapshot file chunk on the wire.
pub const SNAPSHOT_CHUNK_BYTES: usize = 1 << 20;

/// The gRPC metadata key carrying the cluster id on every request between nodes.
pub const CLUSTER_ID_HEADER: &str = "x-ebb-cluster-id";

/// The gRPC metadata key carrying the sender's binary version and the cluster versions it
/// supports on every request between nodes (`0.2.0;1-2`; the node crate reads it).
pub const VERSION_HEADER: &str = "x-ebb-version";

/// A channel to another node that stamps every request with the cluster id and the sender's
/// version.
pub type ClusterChannel = InterceptedService<Channel, Stamp>;

/// Adds the cluster id and the sender's version to a request's metadata.
#[derive(Debug, Clone)]
pub struct Stamp {
    cluster_id: Option<AsciiMetadataValue>,
    version: Option<AsciiMetadataValue>,
}

impl tonic::service::Interceptor for Stamp {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(id) = &self.cluster_id {
            req.metadata_mut().insert(CLUSTER_ID_HEADER, id.clone());
        }
        if let Some(v) = &self.version {
            req.metadata_mut().insert(VERSION_HEADER, v.clone());
        }
        Ok(req)
    }
}

/// How a node proves itself to the others: the TLS client configuration (its certificate and
/// the cluster CA) and the cluster id. Without TLS, channels are plain HTTP/2.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// TLS towards the other nodes.
    pub tls: Option<ClientTlsConfig>,
    /// The cluster id sent with every request (none on a cluster created before ids).
    pub cluster_id: Option<String>,
    /// This node's version, sent with every request ([`VERSION_HEADER`]).
    pub version: Option<String>,
}

#[derive(Debug, Default)]
struct Pool {
    credentials: Credentials,
    channels: HashMap<String, Channel>,
}

/// The node's connections to other nodes, shared by all its Raft groups, and the fault rules
/// applied to what it sends.
#[derive(Debug)]
pub struct Connections {
    node: NodeId,
    /// The channels and the credentials they were made with, under one lock: a channel made
    /// with old credentials never enters a pool emptied for new ones.
    pool: Mutex<Pool>,
    faults: Arc<Faults>,
    connect_timeout: Duration,
    snapshots_sent: Traffic,
    snapshot_pacer: Arc<Pacer>,
}

impl Connections {
    /// Connections of node `node`, sending through `faults`.
    pub fn new(node: NodeId, faults: Arc<Faults>) -> Arc<Connections> {
        Arc::new(Connections {
            node,
            pool: Mutex::new(Pool::default()),
            faults,
            connect_timeout: Duration::from_secs(1),
            snapshots_sent: Traffic::default(),
            snapshot_pacer: Arc::default(),
        })
    }

    /// The node these connections belong to.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// The fault rules.
    pub fn faults(&self) -> &Arc<Faults> {
        &self.faults
    }

    /// Snapshots this node sent and the receiver installed.
    pub fn snapshots_sent(&self) -> &Traffic {
        &self.snapshots_sent
    }

    /// The budget every snapshot this node sends draws from (see [`Pacer`]).
    pub fn snapshot_pacer(&self) -> &Arc<Pacer> {
        &self.snapshot_pacer
    }

    /// Sets how this node proves itself; open channels are dropped so that new requests use
    /// the new credentials (after a certificate renewal).
    pub fn set_credentials(&self, credentials: Credentials) {
        let mut pool = self.pool.lock();
        pool.credentials = credentials;
        pool.channels.clear();
    }

    /// Replaces the TLS client configuration only.
    pub fn set_tls(&self, tls: Option<ClientTlsConfig>) {
        let mut pool = self.pool.lock();
        pool.credentials.tls = tls;
        pool.channels.clear();
    }

    /// The cluster id this node sends.
    pub fn cluster_id(&self) -> Option<String> {
        self.pool.lock().credentials.cluster_id.clone()
    }

    /// The channel to `addr` (`host:port`), created on first use and reconnected as needed.
    pub fn channel(&self, addr: &str) -> Result<ClusterChannel, tonic::transport::Error> {
        let mut pool = self.pool.lock();
        let stamp = stamp(&pool.credentials);
        if let Some(c) = pool.channels.get(addr) {
            return Ok(InterceptedService::new(c.clone(), stamp));
        }
        let c = endpoint(addr, pool.credentials.tls.clone(), self.connect_timeout)?
            .http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_timeout(Duration::from_secs(20))
            .connect_lazy();
        pool.channels.insert(addr.to_string(), c.clone());
        Ok(InterceptedService::new(c, stamp))
    }

    /// A channel to `addr` of its own, connected now, whose requests time out after `timeout`
    /// (for one-off calls that must not share a connection).
    pub async fn connect(
        &self,
        addr: &str,
        timeout: Duration,
    ) -> Result<ClusterChannel, tonic::transport::Error> {
        let creds = self.pool.lock().credentials.clone();
        let ep = endpoint(addr, creds.tls.clone(), self.connect_timeout)?.timeout(timeout);
        Ok(InterceptedService::new(ep.connect().await?, stamp(&creds)))
    }

    /// Forgets the channel to `addr` (after a node moved).
    pub fn forget(&self, addr: &str) {
        self.pool.lock().channels.remove(addr);
    }
}

fn stamp(c: &Credentials) -> Stamp {
    let value = |v: Option<&str>| v.and_then(|v| MetadataValue::try_from(v).ok());
    Stamp { cluster_id: value(c.cluster_id.as_deref()), version: value(c.version.as_deref()) }
}

/// An endpoint for `addr` (`host:port`): TLS when `tls` is given.
pub fn endpoint(
    addr: &str,
    tls: Option<ClientTlsConfig>,
    connect_timeout: Duration,
) -> Result<Endpoint, tonic::transport::Error> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut ep = Endpoint::from_shared(format!("{scheme}://{addr}"))?
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true);
    if let Some(tls) = tls {
        ep = ep.tls_config(tls)?;
    }
    Ok(ep)
}

pub(crate) fn encode<T: serde::Serialize>(v: &T) -> Result<bytes::Bytes, postcard::Error> {
    postcard::to_allocvec(v).map(bytes::Bytes::from)
}
