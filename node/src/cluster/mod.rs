//! The cluster: the metadata group, shard replicas as Raft groups on each node, and the
//! services nodes call on each other. The [`Router`] implements `ebb_query::sql::shard::Shards`,
//! through which the SQL session (in `ebb_query`) reaches the shards.

mod autosplit;
pub mod backup;
pub mod backup_registry;
pub mod bootstrap;
pub mod deletions;
pub mod hashspace;
mod intents;
pub mod ipc;
pub mod join_token;
mod meta;
pub mod metrics;
mod node;
pub mod placement;
pub mod readiness;
mod rebalance;
mod refusal;
mod replication;
pub mod restore;
pub mod router;
mod service;
mod shard;
mod shard_client;
mod shard_reads;
mod shards;
pub mod split;
mod system;
pub mod upgrade;
pub mod version;
pub mod view;
mod write_check;

pub use meta::{Meta, MetaError, META_GROUP, META_VOTERS};
pub use node::{ClusterConfig, ClusterNode, NODE_ID_FILE};
pub use replication::PROPOSE_TIMEOUT;
pub use service::{decommission, join, set_shard_members, ClusterService, MOVE_TIMEOUT};
pub use shard::Shard;
pub use shards::{ShardEnv, Shards};

/// Largest cluster gRPC message (a forwarded write).
pub const MAX_MESSAGE_BYTES: usize = 256 << 20;

pub use router::{RouteError, Router};

/// The generated gRPC code of the cluster services.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("ebb.cluster.v1");
}
