//! The SQL session of `ebb_query` reaches a cluster's shards through the [`Router`], which
//! implements `ebb_query::sql::shard::Shards` over the node's pooled gRPC channels: typed calls
//! on each shard's leader (`Table`, `Scan`, `Listing`, `EngineRows`, `Apply`; answers in Arrow
//! IPC where they are rows), routed writes, intents in the metadata group, and the system tables
//! only the cluster knows.

use std::time::{Duration, Instant};

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::error::DataFusionError;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::ExecutionPlan;
use ebb_query::db::RequestOutcome;
use ebb_query::deletions::ReplicaDeletion;
use ebb_query::model::hashspace::HashFilter;
use ebb_query::model::schema::TableDef;
use ebb_query::sql::shard::op::ApplyRequest;
use ebb_query::sql::shard::request::{self, Points, ScanRequest, TableRequest, WriteRequest};
use ebb_query::sql::shard::{
    EngineTable, Intent, Listing, NodeRow, ShardError, ShardId, ShardOp, ShardRequest, ShardRow,
    TablePart,
};
use ebb_query::statements::{StatementLog, StatementRecord};
use ebb_query::{QueryError, WriteSummary};
use futures::stream::BoxStream;
use futures::StreamExt;

use super::ipc;
use super::proto::cluster_client::ClusterClient;
use super::proto::ShardCall;
use super::router::{Router, MAX_HOPS};

/// Batches of a shard's answer.
type Batches = BoxStream<'static, Result<RecordBatch, ShardError>>;

/// Lines per write an `INSERT` sends.
const LINES_PER_WRITE: usize = 5000;

/// How long a shard call keeps retrying through elections.
const QUERY_RETRY: Duration = Duration::from_secs(10);

/// How long a shard may take to give its definition of a table for a change every shard
/// applies (a shard without a leader is left out of the planning, not waited for).
const TABLE_NOW_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a shard may take to start answering a query.
const QUERY_START_TIMEOUT: Duration = Duration::from_secs(20);

/// The batches of a shard's answer, its Arrow IPC chunks decoded.
fn batches(stream: tonic::Streaming<super::proto::QueryChunk>) -> Batches {
    stream
        .filter_map(|chunk| async move {
            match chunk {
                Err(s) => Some(Err(ShardError::unavailable(s.message()))),
                Ok(c) => match ipc::decode(&c.ipc) {
                    Ok((_, Some(b))) => Some(Ok(b)),
                    Ok((_, None)) => None,
                    Err(e) => Some(Err(ShardError::unavailable(e.to_string()))),
                },
            }
        })
        .boxed()
}

/// Runs `call` until it answers other than unavailable, or [`QUERY_RETRY`] has passed
/// (through elections and leader moves).
async fn retrying<T, F, Fut>(shard: u64, mut call: F) -> Result<T, ShardError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ShardError>>,
{
    let deadline = Instant::now() + QUERY_RETRY;
    loop {
        match call().await {
            Err(ShardError::Unavailable(why)) if Instant::now() < deadline => {
                tracing::debug!(shard, %why, "retrying a shard call");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
}

/// The answer of `call` to the leader at `addr`, within [`QUERY_START_TIMEOUT`].
async fn answer<T>(
    addr: &str,
    call: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, ShardError> {
    tokio::time::timeout(QUERY_START_TIMEOUT, call)
        .await
        .map_err(|_| {
            ShardError::unavailable(format!("{addr}: no answer within {QUERY_START_TIMEOUT:?}"))
        })?
        .map(tonic::Response::into_inner)
        .map_err(|s| shard_error(addr, s))
}

/// `s` (a shard's answer) as a shard error.
fn shard_error(addr: &str, s: tonic::Status) -> ShardError {
    match s.code() {
        tonic::Code::NotFound => ShardError::NotFound(QueryError::Invalid(s.message().into())),
        tonic::Code::InvalidArgument => {
            ShardError::Invalid(QueryError::Invalid(s.message().into()))
        }
        _ => ShardError::unavailable(format!("{addr}: {}", s.message())),
    }
}

/// A client of shard `shard`'s leader (as this node knows it) and its address.
fn leader_client(
    router: &Router,
    shard: u64,
) -> Result<(ClusterClient<ebb_raft::transport::ClusterChannel>, String), ShardError> {
    let unavailable = ShardError::unavailable;
    let addr = router.leader_addr(shard).map_err(|e| unavailable(e.to_string()))?;
    let ch = router.conns().channel(&addr).map_err(|e| unavailable(format!("{addr}: {e}")))?;
    let client = ClusterClient::new(ch).max_decoding_message_size(super::MAX_MESSAGE_BYTES);
    Ok((client, addr))
}

/// A typed call on `shard` carrying `body`.
fn shard_call(shard: u64, hashes: Option<HashFilter>, body: Vec<u8>) -> ShardCall {
    ShardCall {
        shard,
        hops: MAX_HOPS,
        hashes: hashes.map(|h| super::split::to_proto(&h)),
        version: request::WIRE_VERSION,
        body,
    }
}

/// Shard `shard`'s definition of the table `body` names, if it holds it.
async fn try_table(
    router: &Router,
    shard: u64,
    body: &[u8],
) -> Result<Option<TableDef>, ShardError> {
    let (mut client, addr) = leader_client(router, shard)?;
    let reply = answer(&addr, client.table(shard_call(shard, None, body.to_vec()))).await?;
    reply
        .def
        .map(|d| serde_json::from_slice(&d))
        .transpose()
        .map_err(|e| ShardError::unavailable(format!("{addr}: an undecodable table: {e}")))
}

/// Starts scan `body` on shard `shard`'s leader: its batches once the first chunk arrived.
async fn try_scan(
    router: &Router,
    shard: u64,
    hashes: Option<HashFilter>,
    body: &[u8],
) -> Result<Batches, ShardError> {
    let unavailable = ShardError::unavailable;
    let (mut client, addr) = leader_client(router, shard)?;
    let call = client.scan(shard_call(shard, hashes, body.to_vec()));
    let mut stream = tokio::time::timeout(QUERY_START_TIMEOUT, call)
        .await
        .map_err(|_| unavailable(format!("{addr}: no answer within {QUERY_START_TIMEOUT:?}")))?
        .map_err(|s| shard_error(&addr, s))?
        .into_inner();
    tokio::time::timeout(QUERY_START_TIMEOUT, stream.message())
        .await
        .map_err(|_| unavailable(format!("{addr}: no answer within {QUERY_START_TIMEOUT:?}")))?
        .map_err(|s| shard_error(&addr, s))?
        .ok_or_else(|| unavailable(format!("{addr}: an empty answer")))?;
    Ok(batches(stream))
}

/// One shard's part of a scan, read from its leader.
#[derive(Debug)]
struct RemoteScan {
    router: Arc<Router>,
    shard: u64,
    hashes: Option<HashFilter>,
    /// The encoded [`ScanRequest`].
    body: Vec<u8>,
    /// What the shard produces (the requested columns as it defines them).
    schema: SchemaRef,
    /// The shard was asked for `time` only, to count rows of a scan that wants no column.
    rows_only: bool,
}

impl PartitionStream for RemoteScan {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let (router, shard, hashes, body) =
            (self.router.clone(), self.shard, self.hashes, self.body.clone());
        let (schema, rows_only) = (self.schema.clone(), self.rows_only);
        // The shard's own error, so `QueryError::cause` finds it (an unavailable shard answers
        // as unavailable).
        let external = |e: ShardError| DataFusionError::External(Box::new(QueryError::from(e)));
        let stream = futures::stream::once(async move {
            match retrying(shard, || try_scan(&router, shard, hashes, &body)).await {
                Ok(batches) => batches
                    .map(move |b| {
                        let b = b.map_err(external)?;
                        let cols = if rows_only { Vec::new() } else { b.columns().to_vec() };
                        let opts = RecordBatchOptions::new().with_row_count(Some(b.num_rows()));
                        Ok(RecordBatch::try_new_with_options(schema.clone(), cols, &opts)?)
                    })
                    .boxed(),
                // The table was dropped since planning.
                Err(ShardError::NotFound(_)) => futures::stream::empty().boxed(),
                Err(e) => futures::stream::once(async move { Err(external(e)) }).boxed(),
            }
        })
        .flatten();
        Box::pin(RecordBatchStreamAdapter::new(self.schema.clone(), stream))
    }
}

#[async_trait]
impl ebb_query::sql::shard::Shards for Router {
    fn routing(&self) -> Vec<(ShardId, Option<HashFilter>)> {
        let v = self.meta().view();
        let roots = v.settings.map_or(1, |s| s.shards);
        v.routed().map(|s| (s.id, s.span.map(|span| HashFilter { roots, span }))).collect()
    }

    fn backups(&self) -> Option<Arc<dyn ebb_query::backups::Backups>> {
        Router::backups(self)
    }

    fn statement_shards(&self) -> Vec<ShardId> {
        self.meta().view().shards.keys().copied().collect()
    }

    async fn listing(&self) -> Result<Listing, QueryError> {
        if let Some(why) = self.left() {
            return Err(QueryError::Unavailable(why));
        }
        let mut listing = Listing::new();
        for (shard, _) in self.routing() {
            let reply = retrying(shard, || async {
                let (mut client, addr) = leader_client(self, shard)?;
                answer(&addr, client.listing(shard_call(shard, None, Vec::new()))).await
            })
            .await?;
            for d in reply.databases {
                listing.entry(d.database).or_default().extend(d.tables);
            }
        }
        Ok(listing)
    }

    async fn apply(
        &self,
        shard: ShardId,
        op: &ShardOp,
        request: &ShardRequest,
    ) -> Result<RequestOutcome, ShardError> {
        let body = request::encode(&ApplyRequest { op: op.clone(), request: request.clone() });
        let (mut client, addr) = leader_client(self, shard)?;
        let r = answer(&addr, client.apply(shard_call(shard, None, body))).await?;
        Ok(RequestOutcome { rows: r.rows, series: r.series, tables: r.tables, deletes: r.deletes })
    }

    async fn open_intent(&self, intent: &Intent) -> Result<(), QueryError> {
        let mut b = ebb_storage::WriteBatch::new();
        super::view::put_intent(&mut b, intent);
        self.meta().change(b).await.map_err(|e| QueryError::Unavailable(e.to_string()))
    }

    async fn close_intent(&self, id: u64) -> Result<(), QueryError> {
        let mut b = ebb_storage::WriteBatch::new();
        super::view::close_intent(&mut b, id);
        // A request that deletes stays recorded, in the same change, until every backup
        // destination's journal has it (see `backup::MetaRegistry`).
        if let Some(intent) = self.meta().view().intents.get(&id).filter(|i| i.deletes_data()) {
            let request = super::view::JournaledRequest {
                intent: intent.clone(),
                completed_ms: ebb_query::now_ms(),
            };
            super::view::put_journaled(&mut b, &request);
        }
        self.meta().change(b).await.map_err(|e| QueryError::Unavailable(e.to_string()))
    }

    fn intent_patience(&self) -> Duration {
        Router::intent_patience(self)
    }

    async fn split_shard(&self, shard: ShardId) -> Result<ShardId, QueryError> {
        super::split::request(self.meta(), shard).await
    }

    async fn upgrade(
        &self,
        change: ebb_query::sql::shard::UpgradeChange,
        issuer: &str,
    ) -> Result<(u32, String), QueryError> {
        super::upgrade::request(self.meta(), change, issuer).await
    }

    async fn join_token(
        &self,
        change: ebb_query::sql::shard::JoinTokenChange,
        issuer: &str,
    ) -> Result<ebb_query::sql::shard::JoinTokenRow, QueryError> {
        super::join_token::change(self.meta(), change, issuer).await
    }

    async fn join_tokens(
        &self,
    ) -> Result<Option<Vec<ebb_query::sql::shard::JoinTokenRow>>, QueryError> {
        Ok(Some(super::join_token::rows(self.meta())))
    }

    async fn cluster(&self) -> Result<Option<ebb_query::sql::shard::ClusterRow>, QueryError> {
        Ok(Some(super::upgrade::cluster_row(self.meta()).await))
    }

    async fn deletions(&self) -> Vec<ReplicaDeletion> {
        super::deletions::gather(self).await
    }

    async fn engine_rows(
        &self,
        shard: ShardId,
        table: EngineTable,
    ) -> Result<RecordBatch, ShardError> {
        let body = request::encode(&table);
        let chunk = retrying(shard, || async {
            let (mut client, addr) = leader_client(self, shard)?;
            answer(&addr, client.engine_rows(shard_call(shard, None, body.clone()))).await
        })
        .await?;
        match ipc::decode(&chunk.ipc) {
            Ok((_, Some(b))) => Ok(b),
            Ok((schema, None)) => Ok(RecordBatch::new_empty(schema)),
            Err(e) => Err(ShardError::unavailable(format!("shard {shard}: {e}"))),
        }
    }

    fn statement_log(&self) -> Arc<StatementLog> {
        Router::statement_log(self).clone()
    }

    async fn statements(&self) -> Vec<(Option<u64>, StatementRecord)> {
        super::system::statements(self).await
    }

    fn has_members(&self) -> bool {
        true
    }

    async fn nodes(&self) -> Result<Option<Vec<NodeRow>>, QueryError> {
        Ok(Some(super::system::nodes(self).await))
    }

    async fn shards(&self) -> Result<Option<Vec<ShardRow>>, QueryError> {
        Ok(Some(super::system::shards(self).await))
    }

    async fn table(&self, database: &str, name: &str) -> Result<Vec<TablePart>, QueryError> {
        if let Some(why) = self.left() {
            return Err(QueryError::Unavailable(why));
        }
        let request = TableRequest { database: database.to_string(), name: name.to_string() };
        let body = request::encode(&request);
        let mut parts = Vec::new();
        for (shard, hashes) in self.routing() {
            match retrying(shard, || try_table(self, shard, &body)).await {
                Ok(Some(def)) => parts.push(TablePart { shard, hashes, def: Arc::new(def) }),
                Ok(None) | Err(ShardError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(parts)
    }

    async fn table_now(&self, database: &str, name: &str) -> Result<Vec<TablePart>, QueryError> {
        let request = TableRequest { database: database.to_string(), name: name.to_string() };
        let body = request::encode(&request);
        let asks = self.routing().into_iter().map(|(shard, hashes)| {
            let body = &body;
            async move {
                let answer = tokio::time::timeout(TABLE_NOW_TIMEOUT, try_table(self, shard, body))
                    .await
                    .unwrap_or_else(|_| Err(ShardError::unavailable("no answer")));
                (shard, hashes, answer)
            }
        });
        let mut parts = Vec::new();
        let mut unavailable = Vec::new();
        for (shard, hashes, answer) in futures::future::join_all(asks).await {
            match answer {
                Ok(Some(def)) => parts.push(TablePart { shard, hashes, def: Arc::new(def) }),
                Ok(None) | Err(ShardError::NotFound(_)) => {}
                Err(ShardError::Invalid(why)) => return Err(why),
                Err(e) => unavailable.push(format!("shard {shard}: {}", e.reason())),
            }
        }
        if parts.is_empty() && !unavailable.is_empty() {
            return Err(QueryError::Unavailable(unavailable.join("; ")));
        }
        Ok(parts)
    }

    fn scan(
        self: Arc<Self>,
        part: &TablePart,
        scan: &ScanRequest,
        _partitions: usize,
    ) -> Result<Arc<dyn ExecutionPlan>, QueryError> {
        let full = part.def.schema();
        let rows_only = scan.columns.is_empty();
        let mut asked = scan.clone();
        if rows_only {
            asked.columns.push(ebb_query::model::TIME_COLUMN.to_string());
        }
        let indices = scan
            .columns
            .iter()
            .map(|c| full.index_of(c))
            .collect::<Result<Vec<_>, _>>()
            .map_err(DataFusionError::from)?;
        let schema = Arc::new(full.project(&indices).map_err(DataFusionError::from)?);
        let partition = RemoteScan {
            router: self,
            shard: part.shard,
            hashes: part.hashes,
            body: request::encode(&asked),
            schema: schema.clone(),
            rows_only,
        };
        let exec =
            StreamingTableExec::try_new(schema, vec![Arc::new(partition)], None, [], false, None)?;
        Ok(Arc::new(exec))
    }

    async fn write(&self, w: WriteRequest) -> Result<WriteSummary, QueryError> {
        let (db, precision, now) = (w.database.as_str(), w.precision, w.now_ns);
        let written = match &w.points {
            Points::Body(body) => self.write_lines(db, body, precision, now).await,
            // The rows of an INSERT go in parts of a bounded size.
            Points::Parsed(lines) => {
                let mut written = WriteSummary::default();
                for chunk in lines.chunks(LINES_PER_WRITE) {
                    let points = chunk.iter().map(|(no, l)| Ok((*no, l.clone())));
                    let s = self.write_points(db, points, precision, now).await?;
                    written.lines += s.lines;
                    written.rows += s.rows;
                    written.tables_created += s.tables_created;
                    written.series_created += s.series_created;
                }
                Ok(written)
            }
        };
        Ok(written?)
    }
}
