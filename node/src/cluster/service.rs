//! The cluster gRPC service nodes call on each other, and its client side.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tonic::{Request, Response, Status};

use super::meta::{Meta, MetaError};
use super::proto::cluster_client::ClusterClient;
use super::proto::cluster_server::{Cluster, ClusterServer};
use super::proto::{JoinReply, JoinRequest};
use crate::error::{NodeError, Result};

/// The cluster service of one node.
#[derive(Debug, Clone)]
pub struct ClusterService {
    meta: Arc<Meta>,
}

impl ClusterService {
    /// The service over this node's metadata member.
    pub fn new(meta: Arc<Meta>) -> ClusterService {
        ClusterService { meta }
    }

    /// The tonic server for it.
    pub fn into_server(self) -> ClusterServer<ClusterService> {
        ClusterServer::new(self)
    }
}

async fn connect(
    addr: &str,
) -> std::result::Result<ClusterClient<tonic::transport::Channel>, String> {
    let ep = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(30));
    let ch = ep.connect().await.map_err(|e| format!("{addr}: {e}"))?;
    Ok(ClusterClient::new(ch))
}

#[tonic::async_trait]
impl Cluster for ClusterService {
    async fn join(
        &self,
        req: Request<JoinRequest>,
    ) -> std::result::Result<Response<JoinReply>, Status> {
        let r = req.into_inner();
        if r.grpc_addr.is_empty() {
            return Err(Status::invalid_argument("a joining node must give its gRPC address"));
        }
        match self.meta.register(&r.grpc_addr, &r.http_addr, &r.pg_addr).await {
            Ok(node_id) => Ok(Response::new(JoinReply { node_id })),
            Err(MetaError::NotLeader(Some((_, addr)))) => {
                // One hop to the leader; the joining node retries if leadership moves again.
                let mut leader = connect(&addr).await.map_err(Status::unavailable)?;
                leader.join(r).await
            }
            Err(MetaError::NotLeader(None)) => {
                Err(Status::unavailable("the cluster has no metadata leader right now"))
            }
            Err(MetaError::Failed(e)) => Err(Status::unavailable(e)),
        }
    }
}

/// Registers this node with the cluster through any of `seeds` (gRPC addresses), retrying
/// until `timeout`. Returns the node id the cluster assigned.
pub async fn join(seeds: &[String], req: JoinRequest, timeout: Duration) -> Result<u64> {
    let deadline = Instant::now() + timeout;
    let mut last = String::from("no seed address given");
    while Instant::now() < deadline {
        for seed in seeds {
            match connect(seed).await {
                Ok(mut c) => match c.join(req.clone()).await {
                    Ok(r) => return Ok(r.into_inner().node_id),
                    Err(s) => last = format!("{seed}: {}", s.message()),
                },
                Err(e) => last = e,
            }
        }
        tracing::info!(%last, "waiting to join the cluster");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(NodeError::Cluster(format!("could not join through {seeds:?}: {last}")))
}
