//! `ebb-node`: the EbbDB server.
//!
//! This crate is empty for now. It will hold the `ebb` binary: configuration, HTTP, PostgreSQL wire
//! protocol, gRPC between nodes, cluster metadata and shard placement.
