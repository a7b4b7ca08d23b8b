//! A shard leader's side of the typed reads a coordinator sends it (`Table`, `Scan`): the
//! read barrier, then the shard's database as an `ebb_query` local shard, the same code that
//! reads a single node.

use std::sync::Arc;

use datafusion::execution::TaskContext;
use ebb_query::sql::shard::request::{decode, ScanRequest, TableRequest};
use ebb_query::sql::shard::{LocalShards, Shards as _, TablePart};
use futures::StreamExt;
use tonic::Status;

use super::proto::{QueryChunk, ShardCall, TableReply};
use super::service::{query_status, QueryStream, READ_BARRIER_TIMEOUT};
use super::Shard;

/// Waits until `shard` has applied everything its group committed; fails (so the caller
/// retries on the real leader) if this replica lost its term.
pub(super) async fn read_barrier(shard: &Shard) -> Result<(), Status> {
    let barrier =
        tokio::time::timeout(READ_BARRIER_TIMEOUT, shard.group.raft.ensure_linearizable());
    match barrier.await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(Status::unavailable(format!("read barrier: {e}"))),
        Err(_) => Err(Status::unavailable("read barrier timed out")),
    }
}

/// The shard's definition of the table `call` names.
pub(super) async fn table(shard: &Shard, call: &ShardCall) -> Result<TableReply, Status> {
    read_barrier(shard).await?;
    let r: TableRequest = decode(call.version, &call.body).map_err(query_status)?;
    let def = shard.db.catalog().table(&r.database, &r.name);
    let def = def.map(|d| serde_json::to_vec(&*d)).transpose();
    Ok(TableReply { def: def.map_err(|e| Status::internal(e.to_string()))? })
}

/// The rows of the scan `call` asks for, as Arrow IPC chunks (the schema first).
pub(super) async fn scan(shard: &Shard, call: &ShardCall) -> Result<QueryStream, Status> {
    read_barrier(shard).await?;
    let r: ScanRequest = decode(call.version, &call.body).map_err(query_status)?;
    let hashes = call.hashes.as_ref().map(super::split::from_proto).transpose();
    let hashes = hashes.map_err(Status::invalid_argument)?;
    let def = shard.db.catalog().table(&r.database, &r.table).ok_or_else(|| {
        Status::not_found(format!(
            "table {}.{} is not on shard {}",
            r.database, r.table, call.shard
        ))
    })?;
    let part = TablePart { shard: call.shard, hashes, def };
    let partitions = std::thread::available_parallelism().map_or(1, |n| n.get());
    let plan = Arc::new(LocalShards::new(shard.db.clone())).scan(&part, &r, partitions);
    let plan = plan.map_err(query_status)?;
    let schema = plan.schema();
    let rows = datafusion::physical_plan::execute_stream(plan, Arc::new(TaskContext::default()))
        .map_err(|e| Status::internal(e.to_string()))?;
    let ipc = ebb_query::cluster::ipc::encode;
    let head = ipc(&schema, None).map_err(|e| Status::internal(e.to_string()))?;
    let rows = rows.map(move |b| {
        let b = b.map_err(|e| Status::internal(e.to_string()))?;
        let chunk = ipc(&schema, Some(&b)).map_err(|e| Status::internal(e.to_string()))?;
        Ok(QueryChunk { ipc: chunk })
    });
    let head = futures::stream::once(async move { Ok(QueryChunk { ipc: head }) });
    Ok(Box::pin(head.chain(rows)))
}
