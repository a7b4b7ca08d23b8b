//! The receiving side: the gRPC service that hands each message to its group's Raft.

use std::collections::HashMap;
use std::sync::Arc;

use openraft::raft::{AppendEntriesRequest, VoteRequest};
use openraft::{Raft, Snapshot};
use parking_lot::RwLock;
use tonic::{Request, Response, Status, Streaming};

use super::proto::raft_server::{Raft as RaftRpc, RaftServer};
use super::proto::snapshot_chunk::Kind;
use super::proto::{RaftReply, RaftRequest, SnapshotChunk};
use super::{encode, Traffic, MAX_MESSAGE_BYTES};
use crate::sm::Replica;
use crate::types::{NodeId, TypeConfig};

/// One Raft group on this node: its Raft handle and its replica.
#[derive(Clone)]
pub struct GroupHandle {
    /// The group's Raft.
    pub raft: Raft<TypeConfig>,
    /// The group's replica (engine).
    pub replica: Arc<Replica>,
    /// The group's log (shared with its Raft).
    pub log: crate::log::LogStore,
}

/// The Raft groups a node hosts, by group id.
#[derive(Default)]
pub struct Groups {
    map: RwLock<HashMap<u64, GroupHandle>>,
    appends_received: Traffic,
    snapshots_received: Traffic,
}

impl std::fmt::Debug for Groups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.map.read().keys()).finish()
    }
}

impl Groups {
    /// No groups.
    pub fn new() -> Arc<Groups> {
        Arc::new(Groups::default())
    }

    /// Adds (or replaces) group `id`.
    pub fn insert(&self, id: u64, g: GroupHandle) {
        self.map.write().insert(id, g);
    }

    /// Removes group `id`.
    pub fn remove(&self, id: u64) -> Option<GroupHandle> {
        self.map.write().remove(&id)
    }

    /// Group `id`.
    pub fn get(&self, id: u64) -> Option<GroupHandle> {
        self.map.read().get(&id).cloned()
    }

    /// AppendEntries requests delivered to this node's groups (entries and heartbeats; bytes
    /// as encoded on the wire).
    pub fn appends_received(&self) -> &Traffic {
        &self.appends_received
    }

    /// Snapshots received in full and validated by this node's groups (bytes of their files).
    pub fn snapshots_received(&self) -> &Traffic {
        &self.snapshots_received
    }

    /// Every group id, sorted.
    pub fn ids(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.map.read().keys().copied().collect();
        v.sort_unstable();
        v
    }
}

/// The Raft gRPC service of one node.
#[derive(Debug, Clone)]
pub struct RaftService {
    node: NodeId,
    groups: Arc<Groups>,
}

impl RaftService {
    /// The service of node `node`, delivering to `groups`.
    pub fn new(node: NodeId, groups: Arc<Groups>) -> RaftService {
        RaftService { node, groups }
    }

    /// The tonic server for it.
    pub fn into_server(self) -> RaftServer<RaftService> {
        RaftServer::new(self)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    /// Serves this service alone on `listener` until `shutdown` resolves (a node with other
    /// services adds [`RaftService::into_server`] to its own server instead).
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), tonic::transport::Error> {
        tonic::transport::Server::builder()
            .add_service(self.into_server())
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::TcpListenerStream::new(listener),
                shutdown,
            )
            .await
    }

    fn route(&self, group: u64, target: NodeId) -> Result<GroupHandle, Undeliverable> {
        let node = self.node;
        if target != node {
            return Err(Undeliverable::WrongNode { target, node });
        }
        self.groups.get(group).ok_or(Undeliverable::NoGroup { group, node })
    }
}

/// Why a message is not handed to a group's Raft (the sender is answered with why).
#[derive(Debug, thiserror::Error)]
enum Undeliverable {
    /// The message names another node than this one.
    #[error("message for node {target} reached node {node}")]
    WrongNode {
        /// The node it is for.
        target: NodeId,
        /// This node.
        node: NodeId,
    },
    /// This node does not host the group.
    #[error("group {group} is not on node {node}")]
    NoGroup {
        /// The group.
        group: u64,
        /// This node.
        node: NodeId,
    },
    /// The snapshot sent was not received whole and valid.
    #[error("snapshot refused: {0}")]
    Snapshot(#[source] super::stream::ReceiveError),
}

fn undeliverable(why: Undeliverable) -> Response<RaftReply> {
    Response::new(RaftReply { payload: Default::default(), error: why.to_string() })
}

fn reply<T: serde::Serialize>(v: &T) -> Result<Response<RaftReply>, Status> {
    let payload = encode(v).map_err(|e| Status::internal(e.to_string()))?;
    Ok(Response::new(RaftReply { payload, error: String::new() }))
}

#[tonic::async_trait]
impl RaftRpc for RaftService {
    async fn append_entries(
        &self,
        req: Request<RaftRequest>,
    ) -> Result<Response<RaftReply>, Status> {
        let r = req.into_inner();
        let g = match self.route(r.group, r.target) {
            Ok(g) => g,
            Err(why) => return Ok(undeliverable(why)),
        };
        let rpc: AppendEntriesRequest<TypeConfig> = postcard::from_bytes(&r.payload)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        self.groups.appends_received.add(r.payload.len() as u64);
        reply(&g.raft.append_entries(rpc).await)
    }

    async fn vote(&self, req: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
        let r = req.into_inner();
        let g = match self.route(r.group, r.target) {
            Ok(g) => g,
            Err(why) => return Ok(undeliverable(why)),
        };
        let rpc: VoteRequest<NodeId> = postcard::from_bytes(&r.payload)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        reply(&g.raft.vote(rpc).await)
    }

    async fn install_snapshot(
        &self,
        req: Request<Streaming<SnapshotChunk>>,
    ) -> Result<Response<RaftReply>, Status> {
        let mut stream = req.into_inner();
        let header = match stream.message().await? {
            Some(SnapshotChunk { kind: Some(Kind::Header(h)) }) => h,
            _ => return Err(Status::invalid_argument("a snapshot stream starts with its header")),
        };
        let g = match self.route(header.group, header.target) {
            Ok(g) => g,
            Err(why) => return Ok(undeliverable(why)),
        };
        let received = match super::stream::receive(&g.replica, header, stream).await {
            Ok(r) => r,
            Err(why) => return Ok(undeliverable(Undeliverable::Snapshot(why))),
        };
        self.groups.snapshots_received.add(received.descriptor.total_bytes());
        tracing::info!(
            group = g.replica.root().display().to_string(),
            snapshot = %received.descriptor.meta.snapshot_id,
            bytes = received.descriptor.total_bytes(),
            "received a snapshot"
        );
        let dir = received.snapshot.dir().to_path_buf();
        let snapshot =
            Snapshot { meta: received.descriptor.meta, snapshot: Box::new(received.snapshot) };
        let result = g.raft.install_full_snapshot(received.vote, snapshot).await;
        // Openraft answers once it installed the snapshot, which moves its directory, or
        // decided not to (a stale vote, or a replica already past it): files still here are
        // unused, and would hold back deletes until removed.
        match tokio::fs::remove_dir_all(&dir).await {
            Ok(()) => {
                tracing::info!(dir = %dir.display(), "removed a received snapshot not installed")
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(dir = %dir.display(), %e, "removing a received snapshot"),
        }
        reply(&result)
    }
}
