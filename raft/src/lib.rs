//! `ebb-raft`: replication of a shard's storage engine through Raft (openraft 0.9).
//!
//! - [`types`]: the openraft type configuration and the replicated [`Command`]s.
//! - [`log`]: the on-disk Raft log: segmented, checksummed, with batched fsync, truncation and
//!   purge; it passes openraft's storage test suite.
//! - [`sm`]: the state machine: a shard [`Replica`] whose engine applies committed entries at
//!   sequence numbers derived from the log index; snapshots are engine checkpoints.
//! - [`transport`]: Raft traffic over tonic gRPC, many groups per connection, snapshots
//!   streamed in chunks, and fault injection for tests.

pub mod error;
pub mod group;
pub mod log;
pub mod purge;
pub mod sm;
pub mod transport;
pub mod types;

pub use error::{LogError, ReplicaError};
pub use group::{open_group, run_group, start_group, GroupOptions, StartError};
pub use log::{LogOptions, LogStore};
pub use purge::{LogPurger, PurgeError, PurgeOutcome};
pub use sm::{Applier, Replica, ShardSnapshot, ShardStateMachine};
pub use types::{Command, NodeId, Response, TypeConfig, MAX_BATCH_BYTES};
