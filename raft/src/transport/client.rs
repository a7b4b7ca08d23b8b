//! The sending side: openraft's network factory and client for one group, over the node's
//! shared connections.

use std::future::Future;
use std::time::Duration;

use openraft::error::{
    Fatal, NetworkError, RPCError, RaftError, RemoteError, ReplicationClosed, StreamingError,
    Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Snapshot, Vote};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::sync::Arc;

use super::proto::raft_client::RaftClient;
use super::proto::{RaftReply, RaftRequest};
use super::{encode, Connections, Fate, MAX_MESSAGE_BYTES};
use crate::types::{NodeId, TypeConfig};

/// Openraft's network factory for one group on one node.
#[derive(Debug, Clone)]
pub struct GroupNetwork {
    group: u64,
    conns: Arc<Connections>,
}

impl GroupNetwork {
    /// The network of group `group`, over `conns`.
    pub fn new(group: u64, conns: Arc<Connections>) -> GroupNetwork {
        GroupNetwork { group, conns }
    }
}

impl RaftNetworkFactory<TypeConfig> for GroupNetwork {
    type Network = GroupClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> GroupClient {
        GroupClient {
            group: self.group,
            target,
            addr: node.addr.clone(),
            conns: self.conns.clone(),
        }
    }
}

/// Sends one group's messages to one target node.
#[derive(Debug)]
pub struct GroupClient {
    group: u64,
    target: NodeId,
    addr: String,
    conns: Arc<Connections>,
}

type RpcErr = RPCError<NodeId, BasicNode, RaftError<NodeId>>;

#[derive(Clone, Copy)]
enum Kind {
    Append,
    Vote,
}

fn unreachable<E>(why: impl std::fmt::Display) -> RPCError<NodeId, BasicNode, E>
where
    E: std::error::Error,
{
    RPCError::Unreachable(Unreachable::new(&std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        why.to_string(),
    )))
}

fn network<E: std::error::Error>(why: impl std::fmt::Display) -> RPCError<NodeId, BasicNode, E> {
    RPCError::Network(NetworkError::new(&std::io::Error::other(why.to_string())))
}

/// Maps a gRPC status: an unreachable peer is `Unreachable` (openraft backs off), anything else
/// a network error.
fn status<E: std::error::Error>(s: tonic::Status) -> RPCError<NodeId, BasicNode, E> {
    match s.code() {
        tonic::Code::Unavailable | tonic::Code::Unknown => unreachable(s.message()),
        _ => network(format!("{}: {}", s.code(), s.message())),
    }
}

impl GroupClient {
    fn client(&self) -> Result<RaftClient<super::ClusterChannel>, tonic::transport::Error> {
        Ok(RaftClient::new(self.conns.channel(&self.addr)?)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }

    /// Applies the fault rules: the message's fate, after its delay.
    async fn fate(&self) -> Fate {
        let (fate, delay) = self.conns.faults().fate(self.conns.node(), self.target);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        fate
    }

    async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        kind: Kind,
        req: &Req,
        ttl: Duration,
    ) -> Result<Resp, RpcErr> {
        let fate = self.fate().await;
        if fate == Fate::DropRequest {
            return Err(unreachable("message dropped (fault injection)"));
        }
        let payload = encode(req).map_err(network)?;
        let mut client = self.client().map_err(unreachable)?;
        let mut request =
            tonic::Request::new(RaftRequest { group: self.group, target: self.target, payload });
        request.set_timeout(ttl);
        let reply = match kind {
            Kind::Append => client.append_entries(request).await,
            Kind::Vote => client.vote(request).await,
        };
        let reply: RaftReply = reply.map_err(status)?.into_inner();
        if fate == Fate::DropReply {
            return Err(network("reply dropped (fault injection)"));
        }
        if !reply.error.is_empty() {
            // Not deliverable (the group does not exist there yet, or is shutting down).
            return Err(unreachable(reply.error));
        }
        let res: Result<Resp, RaftError<NodeId>> =
            postcard::from_bytes(&reply.payload).map_err(network)?;
        res.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for GroupClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RpcErr> {
        self.call(Kind::Append, &rpc, option.hard_ttl()).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RpcErr> {
        self.call(Kind::Vote, &rpc, option.hard_ttl()).await
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote<NodeId>,
        snapshot: Snapshot<TypeConfig>,
        cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<NodeId>, StreamingError<TypeConfig, Fatal<NodeId>>> {
        type SErr = StreamingError<TypeConfig, Fatal<NodeId>>;
        let to_streaming = |e: RPCError<NodeId, BasicNode, Fatal<NodeId>>| -> SErr {
            match e {
                RPCError::Unreachable(u) => StreamingError::Unreachable(u),
                RPCError::Network(n) => StreamingError::Network(n),
                RPCError::Timeout(t) => StreamingError::Timeout(t),
                RPCError::RemoteError(r) => StreamingError::RemoteError(r),
                RPCError::PayloadTooLarge(p) => StreamingError::Network(NetworkError::new(
                    &std::io::Error::other(p.to_string()),
                )),
            }
        };
        let fate = self.fate().await;
        if fate == Fate::DropRequest {
            return Err(to_streaming(unreachable("snapshot dropped (fault injection)")));
        }
        let mut client = self.client().map_err(|e| to_streaming(unreachable(e)))?;
        let pacer = self.conns.snapshot_pacer().clone();
        let (chunks, bytes) = super::stream::send(self.group, self.target, &vote, &snapshot, pacer)
            .await
            .map_err(|e| to_streaming(network(e)))?;
        let call = client.install_snapshot(chunks);
        tokio::pin!(cancel);
        let reply = tokio::select! {
            r = call => r,
            closed = &mut cancel => return Err(StreamingError::Closed(closed)),
        };
        let reply = reply.map_err(|s| to_streaming(status(s)))?.into_inner();
        if fate == Fate::DropReply {
            return Err(to_streaming(network("reply dropped (fault injection)")));
        }
        if !reply.error.is_empty() {
            return Err(to_streaming(network(reply.error)));
        }
        let res: Result<SnapshotResponse<NodeId>, Fatal<NodeId>> =
            postcard::from_bytes(&reply.payload).map_err(|e| to_streaming(network(e)))?;
        let res = res.map_err(|e| StreamingError::RemoteError(RemoteError::new(self.target, e)))?;
        self.conns.snapshots_sent().add(bytes);
        Ok(res)
    }

    fn backoff(&self) -> openraft::network::Backoff {
        openraft::network::Backoff::new(std::iter::repeat(Duration::from_millis(200)))
    }
}
