//! Raft traffic between nodes over tonic gRPC: one HTTP/2 connection per pair of nodes carries
//! every Raft group they share (messages name their group and target node). Openraft messages
//! travel postcard-encoded; snapshots stream as their files, in chunks, and are validated
//! before they are installed.

mod client;
mod faults;
mod server;
mod stats;
mod stream;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tonic::transport::{Channel, Endpoint};

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

/// The node's connections to other nodes, shared by all its Raft groups, and the fault rules
/// applied to what it sends.
#[derive(Debug)]
pub struct Connections {
    node: NodeId,
    channels: Mutex<HashMap<String, Channel>>,
    faults: Arc<Faults>,
    connect_timeout: Duration,
    snapshots_sent: Traffic,
}

impl Connections {
    /// Connections of node `node`, sending through `faults`.
    pub fn new(node: NodeId, faults: Arc<Faults>) -> Arc<Connections> {
        Arc::new(Connections {
            node,
            channels: Mutex::new(HashMap::new()),
            faults,
            connect_timeout: Duration::from_secs(1),
            snapshots_sent: Traffic::default(),
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

    /// The channel to `addr` (`host:port`), created on first use and reconnected as needed.
    pub fn channel(&self, addr: &str) -> Result<Channel, tonic::transport::Error> {
        let mut ch = self.channels.lock();
        if let Some(c) = ch.get(addr) {
            return Ok(c.clone());
        }
        let c = Endpoint::from_shared(format!("http://{addr}"))?
            .connect_timeout(self.connect_timeout)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_timeout(Duration::from_secs(20))
            .connect_lazy();
        ch.insert(addr.to_string(), c.clone());
        Ok(c)
    }

    /// Forgets the channel to `addr` (after a node moved).
    pub fn forget(&self, addr: &str) {
        self.channels.lock().remove(addr);
    }
}

pub(crate) fn encode<T: serde::Serialize>(v: &T) -> Result<bytes::Bytes, postcard::Error> {
    postcard::to_allocvec(v).map(bytes::Bytes::from)
}
