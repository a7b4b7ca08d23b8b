//! Benchmarks of EbbDB. Every figure is measured beside a baseline in the same run and printed as
//!
//! ```text
//! RESULT <bench> <metric>[ <param>=<value>...] ebb=<value> <baseline>=<value> ratio=<x>
//! ```
//!
//! where `ratio` is how many times better EbbDB is (throughput: ebb / baseline; latency or bytes:
//! baseline / ebb), so above 1 means EbbDB wins.

pub mod backup;
pub mod cluster;
pub mod cluster_nodes;
pub mod deletes;
pub mod durability;
mod ebb_server;
pub mod engine;
pub mod erasure;
pub mod moves;
pub mod peers;
pub mod range_delete;
pub mod range_delete_plot;
pub mod range_delete_report;
pub mod range_grf;
pub mod range_query;
pub mod range_reduce;
pub mod report;
pub mod rocksdb;
pub mod rollup;
pub mod scale;
pub mod security;
pub mod server_layout;
pub mod tsbs;
pub mod tsbs_cli;
pub mod tsbs_queries;
pub mod tsbs_query;
pub mod workload;
