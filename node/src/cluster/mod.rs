//! The cluster: the metadata group, shard replicas as Raft groups on each node, and the
//! services nodes call on each other.

pub mod deletions;
mod insert;
mod ipc;
mod meta;
pub mod metrics;
mod node;
pub mod placement;
mod rebalance;
mod remote;
pub mod router;
mod service;
mod session;
mod shard;
mod shards;
mod system;
mod table;
pub mod view;

pub use meta::{Meta, MetaError, META_GROUP, META_VOTERS};
pub use node::{ClusterConfig, ClusterNode, NODE_ID_FILE};
pub use service::{decommission, join, set_shard_members, ClusterService, MOVE_TIMEOUT};
pub use shard::{RaftReplicator, Shard, PROPOSE_TIMEOUT};
pub use shards::{ShardEnv, Shards};

/// Largest cluster gRPC message (a forwarded write).
pub const MAX_MESSAGE_BYTES: usize = 256 << 20;

pub use remote::{query_shard, ShardQueryError};
pub use router::{RouteError, Router};
pub use session::{ClusterSql, ClusterSqlError};
pub use table::ClusterTable;

/// The generated gRPC code of the cluster services.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("ebb.cluster.v1");
}
