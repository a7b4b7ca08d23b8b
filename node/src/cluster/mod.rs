//! The cluster: shard replicas as Raft groups on each node.

mod shard;

pub use shard::{RaftReplicator, Shard, PROPOSE_TIMEOUT};
