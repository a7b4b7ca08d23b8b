//! `ebb-query`: the SQL layer of EbbDB.
//!
//! - [`lp`]: the InfluxDB line-protocol parser.
//! - [`model`]: keys `(table_id, series_id, time)`, table schemas (tags, typed fields, `time`),
//!   row values, the series index and the catalog, all stored in the engine.
//! - [`db`]: [`Database`], the engine plus catalog, and every write (line protocol, DDL,
//!   deletes, retention purges) through one writer; every change reaches the engine and the
//!   catalog through one `Database::apply(change, seq)`, which a single node calls under its
//!   writer lock and every replica of a shard calls for what its group commits. A shard's
//!   database proposes its changes, pipelined, through a [`db::Replicator`]: this crate does
//!   not depend on Raft; `ebb-node` joins the two.
//! - [`sql`]: DataFusion: one session type ([`SqlSession`]) over the shards that hold the data
//!   ([`sql::shard::Shards`]: a single node is one local shard, a cluster's are reached by
//!   typed requests): the catalog, one table provider ([`sql::ShardTable`]) with projection,
//!   limit and filter pushdown, `INSERT`, `DELETE`, `ERASE` and DDL as one typed change every
//!   shard applies ([`sql::shard::ShardOp`]), and the system tables.
//! - Rollups (`CREATE MATERIALIZED VIEW`): what they keep in [`model::rollup`], how they are
//!   read in [`sql::rollup`], kept and maintained by [`db`]. They are not in the design
//!   document; they store partials per source series (not per group) so that deletes and
//!   erasure reach them by the same series keys, and a source's retention purge does not
//!   recompute them (a rollup has its own retention, the source's unless set).
//! - [`front`]: the front door every protocol uses: [`front::FrontDoor`] authenticates,
//!   authorizes and opens [`front::Session`]s on a single database or a cluster, and records
//!   every statement it runs in a [`statements::StatementLog`] (`system.queries`).

pub mod access;
pub mod backups;
pub mod db;
pub mod deletions;
pub mod error;
pub mod front;
pub mod lp;
pub mod model;
pub mod sql;
pub mod statements;

pub use db::{
    Database, DeleteOutcome, DeleteTarget, EraseOutcome, GroupCommits, RequestSpec, RollupRound,
    WriteLimits, WriteSummary, DEFAULT_DATABASE,
};
pub use error::{QueryError, Result};

/// Nanoseconds since the Unix epoch as an RFC 3339 UTC time, to the nanosecond where it has
/// any (`2023-11-14T22:13:20Z`, `2023-11-14T22:13:20.000000001Z`): how messages give times.
pub fn rfc3339(ns: i64) -> String {
    chrono::DateTime::from_timestamp_nanos(ns).to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}
pub use sql::{QueryOutput, SqlSession, StatementKind};

/// Now, in nanoseconds since the Unix epoch.
pub fn now_ns() -> i64 {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    d.as_nanos().min(i64::MAX as u128) as i64
}

/// Now, in milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    d.as_millis().min(u64::MAX as u128) as u64
}
