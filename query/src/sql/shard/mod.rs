//! The shards a SQL session reads and writes, behind one trait: [`Shards`]. A single node is a
//! cluster of one local shard ([`LocalShards`]); the server implements the trait over the
//! shards of a cluster. Everything above it (the catalog, the table provider, `INSERT`,
//! `DELETE`, `ERASE`, DDL and the system tables) is one code path, and what crosses it is typed
//! ([`request`], [`ShardOp`]), never SQL text.

pub mod everywhere;
pub mod local;
pub mod op;
pub mod request;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::physical_plan::ExecutionPlan;
use serde::{Deserialize, Serialize};

use crate::db::RequestOutcome;
use crate::deletions::ReplicaDeletion;
use crate::error::{QueryError, Result};
use crate::model::hashspace::HashFilter;
use crate::model::schema::TableDef;
use crate::statements::{StatementLog, StatementRecord};
use crate::WriteSummary;

pub use everywhere::{Intent, ShardOutcome};
pub use local::LocalShards;
pub use op::ShardOp;
pub use request::{Points, ScanRequest, TableRequest, TagFilter, WriteRequest};

/// A shard's id (its Raft group in a cluster; [`LocalShards::SHARD`] on a single node).
pub type ShardId = u64;

/// Every database that has a table, with its tables, as the shards hold them.
pub type Listing = BTreeMap<String, BTreeSet<String>>;

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

/// A `DELETE`, `ERASE` or DDL statement issued on every shard as one request: its id,
/// deadline and issuer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardRequest {
    /// The request id every shard records it under.
    pub id: u64,
    /// Its deadline (ms since the epoch), if the statement set one.
    pub deadline_ms: Option<u64>,
    /// Who issued it (see [`crate::front::Principal`]).
    pub issued_by: String,
}

/// Why a shard could not answer: the shard's error (as its leader's node rebuilt it, if the
/// shard is on another node), classed by what the caller does with it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShardError {
    /// The table (or database) does not exist on that shard.
    #[error(transparent)]
    NotFound(QueryError),
    /// The request is at fault.
    #[error(transparent)]
    Invalid(QueryError),
    /// The shard could not answer (no leader, unreachable, a failure there): worth retrying.
    #[error(transparent)]
    Unavailable(QueryError),
}

impl ShardError {
    /// The shard could not answer, for the reason given.
    pub fn unavailable(why: impl Into<String>) -> Self {
        ShardError::Unavailable(QueryError::Unavailable(why.into()))
    }

    /// Why, for a message that says the shard was unavailable itself (without the error's own
    /// `unavailable:` prefix).
    pub fn reason(&self) -> String {
        match self {
            ShardError::Unavailable(QueryError::Unavailable(why)) => why.clone(),
            e => e.to_string(),
        }
    }
}

impl From<ShardError> for QueryError {
    fn from(e: ShardError) -> Self {
        match e {
            ShardError::NotFound(e) | ShardError::Invalid(e) | ShardError::Unavailable(e) => e,
        }
    }
}

impl From<QueryError> for ShardError {
    fn from(e: QueryError) -> Self {
        match e {
            e @ (QueryError::UnknownTable(_) | QueryError::UnknownDatabase(_)) => {
                ShardError::NotFound(e)
            }
            e if e.is_client_error() => ShardError::Invalid(e),
            e => ShardError::Unavailable(e),
        }
    }
}

/// A system table each shard answers of its own engine and catalog (with a leading `shard`
/// column once gathered).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum EngineTable {
    /// `system.compactions`: recent flushes, compactions and time-window executions.
    Compactions,
    /// `system.engine_deletes`: the engine's deletion ledger.
    EngineDeletes,
    /// `system.layout`: the KiWi+ delete-tile size per level.
    Layout,
    /// `system.tables`: the tables of the shard's catalog.
    Tables,
}

/// One member node of a cluster (`system.nodes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRow {
    /// Its id.
    pub id: u64,
    /// `active`, `joining`, `decommissioning`...
    pub state: String,
    /// Its role in the metadata group: `leader`, `voter`, `learner` or `none`.
    pub metadata_role: String,
    /// Its cluster (gRPC), HTTP and PostgreSQL addresses.
    pub grpc_addr: String,
    /// Its HTTP address.
    pub http_addr: String,
    /// Its PostgreSQL address.
    pub pg_addr: String,
    /// Shard replicas placed on it.
    pub replicas: u64,
    /// Shards it leads.
    pub leaders: u64,
    /// Bytes its replicas hold, if it said.
    pub bytes: Option<u64>,
    /// Why it is not ready (empty: ready).
    pub not_ready: Vec<String>,
    /// Its binary's release (`0.2.0`), if it said (release 0.1.0 says nothing).
    pub version: Option<String>,
    /// The commit its binary was built from, if it said.
    pub commit: Option<String>,
    /// The cluster versions its binary supports (`1-2`), if it answered.
    pub cluster_versions: Option<String>,
}

/// A change to how the cluster's version moves (`ALTER CLUSTER FINALIZE UPGRADE`,
/// `ALTER CLUSTER SET AUTO FINALIZE ...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum UpgradeChange {
    /// Raise the active cluster version to the newest every node's binary supports.
    Finalize,
    /// Finalize by itself once every node has supported a newer version this long (`None`:
    /// never by itself).
    AutoFinalizeAfter(Option<Duration>),
}

/// A change to the tokens nodes join with (`CREATE JOIN TOKEN`, `DROP JOIN TOKEN`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum JoinTokenChange {
    /// Mint a token valid for `valid_for` (`None`: no expiry) and `uses` joins (`None`: any
    /// number).
    Create {
        /// Its lifetime.
        valid_for: Option<Duration>,
        /// The joins it admits.
        uses: Option<u32>,
    },
    /// Drop token `.0` (its id).
    Drop(String),
}

/// A join token (`system.join_tokens`, and what `CREATE JOIN TOKEN` answers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinTokenRow {
    /// Its id.
    pub id: String,
    /// The token itself: only in the answer to `CREATE JOIN TOKEN`, shown once.
    pub token: Option<String>,
    /// Who made it.
    pub created_by: String,
    /// When.
    pub created_ms: u64,
    /// When it stops admitting nodes (`None`: never).
    pub expires_ms: Option<u64>,
    /// Joins it still admits (`None`: any number).
    pub uses_left: Option<u32>,
    /// The nodes it admitted (the latest).
    pub used_by: Vec<u64>,
}

/// The cluster as a whole (`system.cluster`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterRow {
    /// Its id (`None`: created before cluster ids).
    pub cluster_id: Option<String>,
    /// The active cluster version: what every node writes and speaks.
    pub active_version: u32,
    /// Since when, and who made it active (`created`, `auto`, or an admin).
    pub active_since_ms: Option<u64>,
    /// Who made it active.
    pub activated_by: Option<String>,
    /// The version a finalize would move to, if above the active one.
    pub finalizable_to: Option<u32>,
    /// Where an upgrade stands, as a sentence: finalized, pending, or what blocks it.
    pub upgrade: String,
    /// How long after every node supports a newer version it finalizes by itself (`None`:
    /// never).
    pub auto_finalize_after: Option<Duration>,
}

/// One shard of a cluster (`system.shards`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardRow {
    /// Its id.
    pub shard: ShardId,
    /// The nodes holding its replicas.
    pub replicas: Vec<u64>,
    /// Its leader, if it has one.
    pub leader: Option<u64>,
    /// The replicas it is moving to, if it is moving.
    pub moving_to: Option<Vec<u64>>,
    /// The root shard of its span of the series hash space.
    pub root: u64,
    /// The start of its span.
    pub hash_lo: u64,
    /// The end of its span (`None`: the end of the root's).
    pub hash_end: Option<u64>,
    /// Where it stands in a split, if it is in one.
    pub split: Option<String>,
}

/// How a SQL session reaches the shards.
#[async_trait]
pub trait Shards: Send + Sync + std::fmt::Debug {
    /// The shards queries read, each with the series hashes to limit it to (`None`: all it
    /// holds), as of one moment: a shard that is splitting still holds the half it gives
    /// away until the cluster routes to the new shard, and after that answers for its own
    /// half only.
    fn routing(&self) -> Vec<(ShardId, Option<HashFilter>)>;

    /// The shards a `DELETE`, `ERASE` or DDL statement must reach: those queries read and
    /// those being split off them (which hold a copy of their parent's rows).
    fn statement_shards(&self) -> Vec<ShardId>;

    /// Table `name` of `database` on every shard queries read that holds it, as of one moment
    /// (empty if none does).
    async fn table(&self, database: &str, name: &str) -> Result<Vec<TablePart>>;

    /// Table `name` of `database` as the shards that answer now define it: what a change
    /// every shard applies later (a `DELETE`) is planned from, so a shard without a leader is
    /// left out rather than waited for (an error only if no shard answers).
    async fn table_now(&self, database: &str, name: &str) -> Result<Vec<TablePart>> {
        self.table(database, name).await
    }

    /// Every database and table the shards queries read hold, as of now.
    async fn listing(&self) -> Result<Listing>;

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

    /// Applies `op` on `shard` as `request` (one request of every shard): what it did there.
    /// A shard answers a request it completed before from its record.
    async fn apply(
        &self,
        shard: ShardId,
        op: &ShardOp,
        request: &ShardRequest,
    ) -> std::result::Result<RequestOutcome, ShardError>;

    /// Records `intent` before any shard applies it, so that it is driven to completion even
    /// if its coordinator stops (a single node applies it at once: nothing to record).
    async fn open_intent(&self, intent: &Intent) -> Result<()>;

    /// Removes intent `id` once every shard has answered it.
    async fn close_intent(&self, id: u64) -> Result<()>;

    /// How long a statement applied on every shard waits for all of them before answering
    /// that it is recorded and still running.
    fn intent_patience(&self) -> Duration {
        Duration::from_secs(30)
    }

    /// Splits shard `shard` in two by the hashes of its series (`ALTER CLUSTER SPLIT SHARD`):
    /// records the split, which the cluster then carries out; returns the new shard's id.
    async fn split_shard(&self, shard: ShardId) -> Result<ShardId> {
        let _ = shard;
        Err(QueryError::Unsupported(
            "ALTER CLUSTER: this server runs as a single node, without shards".into(),
        ))
    }

    /// Finalizes an upgrade, or sets when one finalizes by itself, as `issuer`: what was done,
    /// as a sentence, and the active cluster version after it.
    async fn upgrade(&self, change: UpgradeChange, issuer: &str) -> Result<(u32, String)> {
        let _ = (change, issuer);
        Err(QueryError::Unsupported(
            "ALTER CLUSTER: this server runs as a single node, without a cluster version".into(),
        ))
    }

    /// Mints or drops a join token as `issuer`: the token minted (with its secret) or dropped.
    async fn join_token(&self, change: JoinTokenChange, issuer: &str) -> Result<JoinTokenRow> {
        let _ = (change, issuer);
        Err(QueryError::Unsupported(
            "join tokens: this server runs as a single node, which nodes do not join".into(),
        ))
    }

    /// The join tokens (`system.join_tokens`, without their secrets); `None` where there is no
    /// cluster.
    async fn join_tokens(&self) -> Result<Option<Vec<JoinTokenRow>>> {
        Ok(None)
    }

    /// Every delete request on every replica (`system.deletions`).
    async fn deletions(&self) -> Vec<ReplicaDeletion>;

    /// The rows of `table` on `shard`'s leader.
    async fn engine_rows(
        &self,
        shard: ShardId,
        table: EngineTable,
    ) -> std::result::Result<RecordBatch, ShardError>;

    /// The log this node's front door records its statements in.
    fn statement_log(&self) -> Arc<StatementLog>;

    /// The statements run lately, with the node that ran each (`None`: this one), oldest
    /// first (`system.queries`).
    async fn statements(&self) -> Vec<(Option<u64>, StatementRecord)> {
        self.statement_log().recent().into_iter().map(|r| (None, r)).collect()
    }

    /// The server's backups of these shards (`BACKUP TO`, `system.backups`), if it takes any.
    fn backups(&self) -> Option<Arc<dyn crate::backups::Backups>> {
        None
    }

    /// True where the shards are a cluster's, which describes its members
    /// ([`Shards::nodes`], [`Shards::shards`]).
    fn has_members(&self) -> bool {
        false
    }

    /// The member nodes (`system.nodes`); `None` where there is no cluster.
    async fn nodes(&self) -> Result<Option<Vec<NodeRow>>> {
        Ok(None)
    }

    /// The cluster as a whole (`system.cluster`); `None` where there is no cluster.
    async fn cluster(&self) -> Result<Option<ClusterRow>> {
        Ok(None)
    }

    /// The shards (`system.shards`); `None` where there is no cluster.
    async fn shards(&self) -> Result<Option<Vec<ShardRow>>> {
        Ok(None)
    }
}
