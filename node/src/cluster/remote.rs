//! Running SQL on a shard's leader from any node: the `Query` call, its result stream decoded
//! from Arrow IPC.

use std::time::{Duration, Instant};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use futures::stream::BoxStream;
use futures::StreamExt;

use super::proto::cluster_client::ClusterClient;
use super::proto::QueryRequest;
use super::router::{Router, MAX_HOPS};

/// How long a shard query keeps retrying through elections.
const QUERY_RETRY: Duration = Duration::from_secs(10);

/// Why a shard query failed.
#[derive(Debug, thiserror::Error)]
pub enum ShardQueryError {
    /// The table does not exist on that shard.
    #[error("{0}")]
    NotFound(String),
    /// The statement is at fault.
    #[error("{0}")]
    Invalid(String),
    /// The shard could not answer (no leader, unreachable).
    #[error("{0}")]
    Unavailable(String),
}

/// Batches of a shard's answer.
pub type Batches = BoxStream<'static, Result<RecordBatch, String>>;

/// Runs `sql` in `database` on `shard`'s leader: the result's schema and its batches.
pub async fn query_shard(
    router: &Router,
    shard: u64,
    database: &str,
    sql: &str,
) -> Result<(SchemaRef, Batches), ShardQueryError> {
    query_shard_as(router, shard, database, sql, None).await
}

/// [`query_shard`] for a `DELETE` or `ERASE` issued as request `(id, deadline_ms)` on every
/// shard.
pub async fn query_shard_as(
    router: &Router,
    shard: u64,
    database: &str,
    sql: &str,
    request: Option<(u64, Option<u64>)>,
) -> Result<(SchemaRef, Batches), ShardQueryError> {
    let deadline = Instant::now() + QUERY_RETRY;
    loop {
        match try_query(router, shard, database, sql, request).await {
            Err(ShardQueryError::Unavailable(why)) if Instant::now() < deadline => {
                tracing::debug!(shard, %why, "retrying a shard query");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
}

async fn try_query(
    router: &Router,
    shard: u64,
    database: &str,
    sql: &str,
    request: Option<(u64, Option<u64>)>,
) -> Result<(SchemaRef, Batches), ShardQueryError> {
    let unavailable = |e: String| ShardQueryError::Unavailable(e);
    let addr = router.leader_addr(shard).map_err(|e| unavailable(e.to_string()))?;
    let ep = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| unavailable(e.to_string()))?
        .connect_timeout(Duration::from_secs(1))
        .timeout(Duration::from_secs(20));
    let ch = ep.connect().await.map_err(|e| unavailable(format!("{addr}: {e}")))?;
    let req = QueryRequest {
        shard,
        database: database.to_string(),
        sql: sql.to_string(),
        hops: MAX_HOPS,
        request_id: request.map_or(0, |r| r.0),
        deadline_ms: request.and_then(|r| r.1).unwrap_or(0),
    };
    let mut stream = ClusterClient::new(ch)
        .max_decoding_message_size(super::MAX_MESSAGE_BYTES)
        .query(req)
        .await
        .map_err(|s| match s.code() {
            tonic::Code::NotFound => ShardQueryError::NotFound(s.message().to_string()),
            tonic::Code::InvalidArgument => ShardQueryError::Invalid(s.message().to_string()),
            _ => unavailable(format!("{addr}: {}", s.message())),
        })?
        .into_inner();
    let head = stream
        .message()
        .await
        .map_err(|s| unavailable(s.message().to_string()))?
        .ok_or_else(|| unavailable("empty answer".into()))?;
    let (schema, _) = super::ipc::decode(&head.ipc).map_err(|e| unavailable(e.to_string()))?;
    let batches = stream
        .filter_map(|chunk| async move {
            match chunk {
                Err(s) => Some(Err(s.message().to_string())),
                Ok(c) => match super::ipc::decode(&c.ipc) {
                    Ok((_, Some(b))) => Some(Ok(b)),
                    Ok((_, None)) => None,
                    Err(e) => Some(Err(e.to_string())),
                },
            }
        })
        .boxed();
    Ok((schema, batches))
}
