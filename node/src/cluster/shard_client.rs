//! The cluster SQL of `ebb_query` reaches the shards through the [`Router`]: the `Query` call
//! on a shard's leader (its result stream decoded from Arrow IPC) over the node's pooled gRPC
//! channels, routed writes, and the system tables only the cluster knows.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use ebb_query::cluster::ipc;
use ebb_query::cluster::{Batches, Intent, ShardClient, ShardError, ShardRequest};
use ebb_query::deletions::ReplicaDeletion;
use ebb_query::lp::Precision;
use ebb_query::model::hashspace::HashFilter;
use ebb_query::{QueryError, WriteSummary};
use futures::StreamExt;

use super::proto::cluster_client::ClusterClient;
use super::proto::QueryRequest;
use super::router::{RouteError, Router, MAX_HOPS};

/// How long a shard query keeps retrying through elections.
const QUERY_RETRY: Duration = Duration::from_secs(10);

/// How long a shard may take to start answering a query.
const QUERY_START_TIMEOUT: Duration = Duration::from_secs(20);

#[async_trait]
impl ShardClient for Router {
    fn shard_ids(&self) -> Vec<u64> {
        Router::shard_ids(self)
    }

    fn routing(&self) -> Vec<(u64, Option<HashFilter>)> {
        let v = self.meta().view();
        let roots = v.settings.map_or(1, |s| s.shards);
        v.routed().map(|s| (s.id, s.span.map(|span| HashFilter { roots, span }))).collect()
    }

    fn statement_shard_ids(&self) -> Vec<u64> {
        self.meta().view().shards.keys().copied().collect()
    }

    async fn split_shard(&self, shard: u64) -> Result<u64, QueryError> {
        super::split::request(self.meta(), shard).await
    }

    async fn query(
        &self,
        shard: u64,
        database: &str,
        sql: &str,
        request: Option<&ShardRequest>,
        hashes: Option<HashFilter>,
    ) -> Result<(SchemaRef, Batches), ShardError> {
        let deadline = Instant::now() + QUERY_RETRY;
        loop {
            match try_query(self, shard, database, sql, request, hashes).await {
                Err(ShardError::Unavailable(why)) if Instant::now() < deadline => {
                    tracing::debug!(shard, %why, "retrying a shard query");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                other => return other,
            }
        }
    }

    async fn write_lines(
        &self,
        database: &str,
        body: &str,
        precision: Precision,
        now_ns: i64,
    ) -> Result<WriteSummary, QueryError> {
        Router::write_lines(self, database, body, precision, now_ns).await.map_err(|e| match e {
            RouteError::Rejected(m) => QueryError::Invalid(m),
            RouteError::Unavailable(m) => QueryError::Unavailable(m),
            RouteError::DiskFull(m) => QueryError::DiskFull(m),
            e @ RouteError::Moved(_) => QueryError::Unavailable(e.to_string()),
        })
    }

    fn intent_patience(&self) -> Duration {
        Router::intent_patience(self)
    }

    async fn open_intent(&self, intent: &Intent) -> Result<(), QueryError> {
        let mut b = ebb_storage::WriteBatch::new();
        super::view::put_intent(&mut b, intent);
        self.meta().change(b).await.map_err(|e| QueryError::Unavailable(e.to_string()))
    }

    async fn close_intent(&self, id: u64) -> Result<(), QueryError> {
        let mut b = ebb_storage::WriteBatch::new();
        super::view::close_intent(&mut b, id);
        self.meta().change(b).await.map_err(|e| QueryError::Unavailable(e.to_string()))
    }

    async fn deletions(&self) -> Vec<ReplicaDeletion> {
        super::deletions::gather(self).await
    }

    fn statement_log(&self) -> std::sync::Arc<ebb_query::statements::StatementLog> {
        Router::statement_log(self).clone()
    }

    fn cluster_tables(&self) -> &'static [&'static str] {
        super::system::NAMES
    }

    async fn cluster_table(&self, name: &str) -> Result<Option<RecordBatch>, QueryError> {
        super::system::table(self, name).await
    }
}

async fn try_query(
    router: &Router,
    shard: u64,
    database: &str,
    sql: &str,
    request: Option<&ShardRequest>,
    hashes: Option<HashFilter>,
) -> Result<(SchemaRef, Batches), ShardError> {
    let unavailable = |e: String| ShardError::Unavailable(e);
    let addr = router.leader_addr(shard).map_err(|e| unavailable(e.to_string()))?;
    let ch = router.conns().channel(&addr).map_err(|e| unavailable(format!("{addr}: {e}")))?;
    let req = QueryRequest {
        shard,
        database: database.to_string(),
        sql: sql.to_string(),
        hops: MAX_HOPS,
        request_id: request.map_or(0, |r| r.id),
        deadline_ms: request.and_then(|r| r.deadline_ms).unwrap_or(0),
        issued_by: request.map(|r| r.issued_by.clone()).unwrap_or_default(),
        hashes: hashes.map(|h| super::split::to_proto(&h)),
    };
    let mut client = ClusterClient::new(ch).max_decoding_message_size(super::MAX_MESSAGE_BYTES);
    let call = tokio::time::timeout(QUERY_START_TIMEOUT, client.query(req))
        .await
        .map_err(|_| unavailable(format!("{addr}: no answer within {QUERY_START_TIMEOUT:?}")))?;
    let mut stream = call
        .map_err(|s| match s.code() {
            tonic::Code::NotFound => ShardError::NotFound(s.message().to_string()),
            tonic::Code::InvalidArgument => ShardError::Invalid(s.message().to_string()),
            _ => unavailable(format!("{addr}: {}", s.message())),
        })?
        .into_inner();
    let head = tokio::time::timeout(QUERY_START_TIMEOUT, stream.message())
        .await
        .map_err(|_| unavailable(format!("{addr}: no answer within {QUERY_START_TIMEOUT:?}")))?
        .map_err(|s| unavailable(s.message().to_string()))?
        .ok_or_else(|| unavailable("empty answer".into()))?;
    let (schema, _) = ipc::decode(&head.ipc).map_err(|e| unavailable(e.to_string()))?;
    let batches = stream
        .filter_map(|chunk| async move {
            match chunk {
                Err(s) => Some(Err(ShardError::Unavailable(s.message().to_string()))),
                Ok(c) => match ipc::decode(&c.ipc) {
                    Ok((_, Some(b))) => Some(Ok(b)),
                    Ok((_, None)) => None,
                    Err(e) => Some(Err(ShardError::Unavailable(e.to_string()))),
                },
            }
        })
        .boxed();
    Ok((schema, batches))
}
