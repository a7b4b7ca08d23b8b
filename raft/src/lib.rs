//! `ebb-raft`: replication of a shard's storage engine through Raft (openraft 0.9).
//!
//! - [`types`]: the openraft type configuration and the replicated [`Command`]s.
//! - [`log`]: the on-disk Raft log: segmented, checksummed, with batched fsync, truncation and
//!   purge; it passes openraft's storage test suite.

pub mod error;
pub mod log;
pub mod types;

pub use error::LogError;
pub use log::{LogOptions, LogStore};
pub use types::{Command, NodeId, Response, TypeConfig};
