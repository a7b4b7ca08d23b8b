//! The cluster: the metadata group, shard replicas as Raft groups on each node, and the
//! services nodes call on each other.

mod meta;
mod node;
mod service;
mod shard;
pub mod view;

pub use meta::{Meta, MetaError, META_GROUP, META_VOTERS};
pub use node::{ClusterConfig, ClusterNode, NODE_ID_FILE};
pub use service::{join, ClusterService};
pub use shard::{RaftReplicator, Shard, PROPOSE_TIMEOUT};

/// The generated gRPC code of the cluster services.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("ebb.cluster.v1");
}
