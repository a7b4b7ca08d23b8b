//! SQL over a sharded cluster, behind the [`ShardClient`] trait that the server implements over
//! its gRPC channels to the shards' leaders. Tables are read and written as on a single node:
//! through [`crate::sql::ShardTable`] over the client's [`crate::sql::shard::Shards`] (typed
//! scans, one partition per shard).
//!
//! - [`ClusterSql`]: statements over the cluster; `DELETE`,
//!   `ERASE` and DDL run on every shard's leader as one intent, each shard's part becoming
//!   that shard's own log entry.
//! - [`intent`]: `DELETE`, `ERASE` and DDL recorded in the metadata group, then run on every
//!   shard in parallel until each has answered.
//! - `system.deletions` gathered from every replica, and the tables the cluster itself
//!   describes (`system.nodes`, `system.shards`), through the client.
//! - [`ClusterTable`]: `information_schema`, gathered from every shard as SQL (the cluster's
//!   catalog lists no tables yet).
//! - [`ipc`]: the Arrow IPC framing of result batches between nodes.

pub mod intent;
pub mod ipc;
mod session;
mod system;
mod table;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use futures::stream::BoxStream;

use crate::deletions::ReplicaDeletion;
use crate::error::{QueryError, Result};

use crate::model::hashspace::HashFilter;
pub use intent::Intent;
pub use session::ClusterSql;
pub use table::ClusterTable;

/// A `DELETE`, `ERASE` or `DROP TABLE` issued on every shard as one request: its id, deadline
/// and issuer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShardRequest {
    /// The request id every shard records it under.
    pub id: u64,
    /// Its deadline (ms since the epoch), if the statement set one.
    pub deadline_ms: Option<u64>,
    /// Who issued it (see [`crate::front::Principal`]).
    pub issued_by: String,
}

/// Why a shard could not run a statement.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShardError {
    /// The table (or database) does not exist on that shard.
    #[error("{0}")]
    NotFound(String),
    /// The statement is at fault.
    #[error("{0}")]
    Invalid(String),
    /// The shard could not answer (no leader, unreachable).
    #[error("{0}")]
    Unavailable(String),
}

impl From<ShardError> for QueryError {
    fn from(e: ShardError) -> Self {
        match e {
            ShardError::NotFound(m) | ShardError::Invalid(m) => QueryError::Invalid(m),
            ShardError::Unavailable(m) => QueryError::Unavailable(m),
        }
    }
}

/// Batches of a shard's answer.
pub type Batches = BoxStream<'static, std::result::Result<RecordBatch, ShardError>>;

/// How cluster SQL reaches the shards. The server implements it over its Raft groups and its
/// pooled gRPC channels; each call finds the shard's leader (retrying through elections).
#[async_trait]
pub trait ShardClient: crate::sql::shard::Shards + Send + Sync + std::fmt::Debug {
    /// Every shard id of the cluster that queries read (the shards writes are routed to).
    fn shard_ids(&self) -> Vec<u64>;

    /// The shards queries read, each with the series hashes to limit it to (`None`: all it
    /// holds), as of one moment: a shard that is splitting still holds the half it gives
    /// away until the cluster routes to the new shard, and after that answers for its own
    /// half only.
    fn routing(&self) -> Vec<(u64, Option<HashFilter>)> {
        self.shard_ids().into_iter().map(|s| (s, None)).collect()
    }

    /// The shards a `DELETE`, `ERASE` or DDL statement must run on: those queries read and
    /// those being split off them (which hold a copy of their parent's rows).
    fn statement_shard_ids(&self) -> Vec<u64> {
        self.shard_ids()
    }

    /// Runs `sql` in `database` on `shard`'s leader (as `request` for a `DELETE` or `ERASE`
    /// issued on every shard; limited to the series `hashes` holds, if given): the result's
    /// schema and its batches.
    async fn query(
        &self,
        shard: u64,
        database: &str,
        sql: &str,
        request: Option<&ShardRequest>,
        hashes: Option<HashFilter>,
    ) -> std::result::Result<(SchemaRef, Batches), ShardError>;

    /// Applies `op` on `shard`'s leader as `request` (one request of every shard): what it
    /// did there.
    async fn apply(
        &self,
        shard: u64,
        op: &crate::sql::shard::ShardOp,
        request: &ShardRequest,
    ) -> std::result::Result<crate::db::RequestOutcome, ShardError>;

    /// How long a statement run on every shard waits for all of them before answering that it
    /// is recorded and still running.
    fn intent_patience(&self) -> std::time::Duration {
        std::time::Duration::from_secs(30)
    }

    /// Splits shard `shard` in two by the hashes of its series (`ALTER CLUSTER SPLIT SHARD`):
    /// records the split, which the cluster then carries out; returns the new shard's id.
    async fn split_shard(&self, shard: u64) -> Result<u64> {
        Err(QueryError::Unsupported(format!("this cluster cannot split shard {shard}")))
    }

    /// Records `intent` in the metadata group, before any shard runs it.
    async fn open_intent(&self, intent: &Intent) -> Result<()>;

    /// Removes intent `id` from the metadata group once every shard has answered it.
    async fn close_intent(&self, id: u64) -> Result<()>;

    /// Every delete request on every replica of the cluster (`system.deletions`).
    async fn deletions(&self) -> Vec<ReplicaDeletion>;

    /// The log this node's front door records its statements in (`system.queries`, which
    /// [`ShardClient::cluster_table`] gathers from every node).
    fn statement_log(&self) -> std::sync::Arc<crate::statements::StatementLog>;

    /// Names of the system tables the cluster describes itself (`nodes`, `shards`, `queries`).
    fn cluster_tables(&self) -> &'static [&'static str];

    /// System table `name` (one of [`ShardClient::cluster_tables`]), as of now.
    async fn cluster_table(&self, name: &str) -> Result<Option<RecordBatch>>;
}
