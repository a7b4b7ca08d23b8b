//! The shards a SQL session reads and writes, behind one trait: [`Shards`]. A single node is a
//! cluster of one local shard ([`LocalShards`]); the server implements the trait over the
//! shards of a cluster. Everything above it (the catalog, the table provider, `INSERT`) is one
//! code path, and what crosses it is typed ([`request`]), never SQL text.

pub mod local;
pub mod op;
pub mod request;

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::physical_plan::ExecutionPlan;

use crate::error::Result;
use crate::model::hashspace::HashFilter;
use crate::model::schema::TableDef;
use crate::WriteSummary;

pub use local::LocalShards;
pub use op::ShardOp;
pub use request::{Points, ScanRequest, TableRequest, TagFilter, WriteRequest};

/// A shard's id (its Raft group in a cluster; [`LocalShards::SHARD`] on a single node).
pub type ShardId = u64;

/// One shard holding a table: its id, the series hashes a read of it is limited to (`None`:
/// all it holds) and its definition of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct TablePart {
    /// The shard.
    pub shard: ShardId,
    /// The series hashes it answers for.
    pub hashes: Option<HashFilter>,
    /// The table as the shard defines it.
    pub def: Arc<TableDef>,
}

/// How a SQL session reaches the shards.
#[async_trait]
pub trait Shards: Send + Sync + std::fmt::Debug {
    /// Table `name` of `database` on every shard queries read that holds it, as of one moment
    /// (empty if none does).
    async fn table(&self, database: &str, name: &str) -> Result<Vec<TablePart>>;

    /// Table `name` of `database` as the shards that answer now define it: what a change
    /// every shard applies later (a `DELETE`) is planned from, so a shard without a leader is
    /// left out rather than waited for (an error only if no shard answers).
    async fn table_now(&self, database: &str, name: &str) -> Result<Vec<TablePart>> {
        self.table(database, name).await
    }

    /// Plans `part`'s share of `scan` (in up to `partitions` partitions), producing the
    /// requested columns in order (the shard has each).
    fn scan(
        self: Arc<Self>,
        part: &TablePart,
        scan: &ScanRequest,
        partitions: usize,
    ) -> Result<Arc<dyn ExecutionPlan>>;

    /// Writes the points of `write`, each to the shard of its series: a bad point refuses
    /// them all.
    async fn write(&self, write: WriteRequest) -> Result<WriteSummary>;
}
