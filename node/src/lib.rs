//! `ebb-node`: the EbbDB server and command-line tool.
//!
//! - [`config`]: defaults, TOML file, `EBB_*` environment variables and flags.
//! - [`server`]: opens the database and runs the front ends: [`http`] (line protocol, SQL,
//!   health, metrics), [`pg`] (PostgreSQL wire protocol) and [`grpc`]; retention purges run in
//!   the background; shutdown flushes.
//! - [`error`]: [`error::NodeError`], what can go wrong in all of these.
//! - [`body`]: request bodies with a size limit.
//! - [`cli`]: `ebb sql` and `ebb import`, HTTP clients of a running server.
//! - [`security`]: the `admin` user from the configured password, and the refusal to serve
//!   other machines without users.
//! - [`tls`]: TLS on the client ports, mutual TLS and the cluster id on the cluster port,
//!   certificates reloaded when their files change, and `ebb cert`.
//!
//! Every protocol reaches the data through `ebb_query::front::FrontDoor`, which authenticates
//! and authorizes once for all of them; its one SQL session reaches a single node's database
//! or, on a cluster, the [`cluster::Router`] (this crate's `ebb_query::sql::shard::Shards`).

/// The release this binary is (the workspace's version).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The commit it was built from (12 hex digits, or what the build was told; `unknown`
/// without either).
pub const COMMIT: &str = env!("EBB_COMMIT");

/// What `ebb --version` prints after the name: `0.2.0 (commit 0123456789ab)`.
pub const VERSION_TEXT: &str =
    concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("EBB_COMMIT"), ")");

pub mod audit;
pub mod backup;
pub mod body;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod error;
pub mod flight;
pub mod grpc;
pub mod health;
pub mod http;
pub mod metrics;
pub mod pg;
pub mod prom;
pub mod security;
pub mod server;
pub mod tls;
