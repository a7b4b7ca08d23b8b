//! The shard of a single node: its [`Database`] (and, on a cluster shard's leader answering a
//! coordinator, the database of that shard).

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::DataFusionError;
use datafusion::physical_plan::ExecutionPlan;

use super::{
    EngineTable, Intent, Listing, Points, ScanRequest, ShardError, ShardId, ShardOp, ShardRequest,
    Shards, TablePart, WriteRequest,
};
use crate::db::{Database, RequestOutcome};
use crate::deletions::ReplicaDeletion;
use crate::error::{QueryError, Result};
use crate::model::hashspace::HashFilter;
use crate::sql::pushdown::ScanFilter;
use crate::sql::scan::{SeriesSpan, TableScan};
use crate::sql::scan_exec::ScanExec;
use crate::statements::StatementLog;
use crate::WriteSummary;

/// One local database as the only shard.
#[derive(Debug, Clone)]
pub struct LocalShards {
    db: Arc<Database>,
    /// The series hashes reads are limited to, if any (see [`LocalShards::with_hashes`]).
    hashes: Option<HashFilter>,
    /// The server's backups of this shard, if it takes any.
    backups: Option<Arc<dyn crate::backups::Backups>>,
}

impl LocalShards {
    /// The id of the one shard.
    pub const SHARD: super::ShardId = 0;

    /// `db` as the only shard.
    pub fn new(db: Arc<Database>) -> LocalShards {
        LocalShards { db, hashes: None, backups: None }
    }

    /// The same shard, whose reads see only the series whose hash `hashes` holds: what a
    /// coordinator asks of a shard it routes those hashes to (a shard being split holds both
    /// halves).
    pub fn with_hashes(self, hashes: Option<HashFilter>) -> LocalShards {
        LocalShards { hashes, ..self }
    }

    /// The same shard, backed up by `backups`.
    pub fn with_backups(self, backups: Arc<dyn crate::backups::Backups>) -> LocalShards {
        LocalShards { backups: Some(backups), ..self }
    }

    /// The database.
    pub fn db(&self) -> &Arc<Database> {
        &self.db
    }
}

/// Runs engine work off the async threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| QueryError::Internal(format!("the shard's work stopped: {e}")))?
}

#[async_trait]
impl Shards for LocalShards {
    fn routing(&self) -> Vec<(ShardId, Option<HashFilter>)> {
        vec![(Self::SHARD, self.hashes)]
    }

    fn statement_shards(&self) -> Vec<ShardId> {
        vec![Self::SHARD]
    }

    fn backups(&self) -> Option<Arc<dyn crate::backups::Backups>> {
        self.backups.clone()
    }

    async fn listing(&self) -> Result<Listing> {
        let mut listing = Listing::new();
        for d in self.db.catalog().databases() {
            listing.entry(d).or_default();
        }
        for t in self.db.catalog().tables() {
            listing.entry(t.database.clone()).or_default().insert(t.name.clone());
        }
        Ok(listing)
    }

    async fn apply(
        &self,
        _shard: ShardId,
        op: &ShardOp,
        request: &ShardRequest,
    ) -> std::result::Result<RequestOutcome, ShardError> {
        let (db, op, request) = (self.db.clone(), op.clone(), request.clone());
        let done = blocking(move || super::op::apply(&db, &op, &request)).await?;
        Ok(done)
    }

    async fn open_intent(&self, _intent: &Intent) -> Result<()> {
        // Applied at once, by this process: nothing to take over.
        Ok(())
    }

    async fn close_intent(&self, _id: u64) -> Result<()> {
        Ok(())
    }

    async fn deletions(&self) -> Vec<ReplicaDeletion> {
        crate::deletions::local_deletions(&self.db, Self::SHARD, 0)
    }

    async fn engine_rows(
        &self,
        _shard: ShardId,
        table: EngineTable,
    ) -> std::result::Result<RecordBatch, ShardError> {
        Ok(crate::sql::system::engine_rows(&self.db, table)?)
    }

    fn statement_log(&self) -> Arc<StatementLog> {
        self.db.statement_log().clone()
    }

    async fn table(&self, database: &str, name: &str) -> Result<Vec<TablePart>> {
        Ok(self
            .db
            .catalog()
            .table(database, name)
            .map(|def| TablePart { shard: Self::SHARD, hashes: self.hashes, def })
            .into_iter()
            .collect())
    }

    fn scan(
        self: Arc<Self>,
        part: &TablePart,
        scan: &ScanRequest,
        partitions: usize,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let def = &part.def;
        let full = def.schema();
        let mut columns = Vec::with_capacity(scan.columns.len());
        let mut indices = Vec::with_capacity(scan.columns.len());
        for name in &scan.columns {
            let (Some(c), Ok(i)) = (def.column(name), full.index_of(name)) else {
                return Err(QueryError::Internal(format!(
                    "column {name} is not in table {}.{} on this shard",
                    def.database, def.name
                )));
            };
            columns.push(c);
            indices.push(i);
        }
        let schema = Arc::new(full.project(&indices).map_err(DataFusionError::from)?);
        let mut filter = ScanFilter {
            time: scan.time,
            tags: scan.tags.iter().map(|t| t.resolve(def)).collect(),
            only: None,
        };
        if let Some(hashes) = &part.hashes {
            self.db.catalog().with_series(def.id, |idx| filter.limit_to_hashes(def, idx, hashes));
        }
        let spans = SeriesSpan::split(&self.db, def.id, &filter, partitions);
        // Every partition reads the snapshot the first one to start takes.
        let snapshot = Arc::new(OnceLock::new());
        let parts = spans
            .into_iter()
            .map(|span| {
                Arc::new(TableScan {
                    db: self.db.clone(),
                    def: def.clone(),
                    columns: columns.clone(),
                    schema: schema.clone(),
                    filter: filter.clone(),
                    limit: scan.limit,
                    span,
                    snapshot: snapshot.clone(),
                    newest_only: scan.newest_only,
                })
            })
            .collect();
        Ok(Arc::new(ScanExec::new(schema, parts)))
    }

    async fn write(&self, w: WriteRequest) -> Result<WriteSummary> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || match &w.points {
            Points::Body(body) => db.write_lines(&w.database, body, w.precision, w.now_ns),
            Points::Parsed(lines) => db.write_parsed(&w.database, lines, w.precision, w.now_ns),
        })
        .await
        .map_err(|e| QueryError::Internal(format!("the write stopped: {e}")))?
    }
}
