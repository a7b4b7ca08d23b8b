//! `ebb-raft`: replication of a shard's storage engine through Raft.
//!
//! This crate is empty for now. It will hold the openraft type configuration, the on-disk Raft log,
//! and the state machine that applies log entries to an `ebb-storage` engine.
