//! A shard leader's side of the typed calls a coordinator sends it (`Table`, `Scan`,
//! `Listing`, `EngineRows`, `Apply`): the read barrier, then the shard's database as an
//! `ebb_query` local shard, the same code that reads and changes a single node.

use std::sync::Arc;

use datafusion::execution::TaskContext;
use ebb_query::sql::shard::op::ApplyRequest;
use ebb_query::sql::shard::request::{decode, ScanRequest, TableRequest};
use ebb_query::sql::shard::{EngineTable, LocalShards, Shards as _, TablePart};
use futures::StreamExt;
use tonic::Status;

use super::ipc;
use super::proto::{ApplyReply, DatabaseTables, ListingReply, QueryChunk, ShardCall, TableReply};
use super::service::{query_status, shard_status, QueryStream, READ_BARRIER_TIMEOUT};
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
    let hashes = call.hashes.as_ref().map(super::split::from_proto).transpose()?;
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
    let head = ipc::encode(&schema, None).map_err(|e| Status::internal(e.to_string()))?;
    let rows = rows.map(move |b| {
        let b = b.map_err(|e| Status::internal(e.to_string()))?;
        let chunk = ipc::encode(&schema, Some(&b)).map_err(|e| Status::internal(e.to_string()))?;
        Ok(QueryChunk { ipc: chunk })
    });
    let head = futures::stream::once(async move { Ok(QueryChunk { ipc: head }) });
    Ok(Box::pin(head.chain(rows)))
}

/// The databases and tables of the shard's catalog.
pub(super) async fn listing(shard: &Shard) -> Result<ListingReply, Status> {
    read_barrier(shard).await?;
    let listing = LocalShards::new(shard.db.clone()).listing().await.map_err(query_status)?;
    let databases = listing
        .into_iter()
        .map(|(database, tables)| DatabaseTables { database, tables: tables.into_iter().collect() })
        .collect();
    Ok(ListingReply { databases })
}

/// The rows of the engine table `call` names, as one Arrow IPC chunk.
pub(super) async fn engine_rows(shard: &Shard, call: &ShardCall) -> Result<QueryChunk, Status> {
    read_barrier(shard).await?;
    let table: EngineTable = decode(call.version, &call.body).map_err(query_status)?;
    let local = LocalShards::new(shard.db.clone());
    let rows = local.engine_rows(call.shard, table).await.map_err(shard_status)?;
    let ipc = ipc::encode(&rows.schema(), Some(&rows));
    Ok(QueryChunk { ipc: ipc.map_err(|e| Status::internal(e.to_string()))? })
}

/// Applies the change `call` carries, as one request of every shard.
pub(super) async fn apply(shard: &Shard, call: &ShardCall) -> Result<ApplyReply, Status> {
    let a: ApplyRequest = decode(call.version, &call.body).map_err(query_status)?;
    // The change resolves series against the leader's catalog: the leader must have applied
    // every write committed before it (a new leader may not have yet), or a DELETE or ERASE
    // would miss the series they created.
    read_barrier(shard).await?;
    let local = LocalShards::new(shard.db.clone());
    let done = local.apply(call.shard, &a.op, &a.request).await.map_err(shard_status)?;
    Ok(ApplyReply {
        rows: done.rows,
        series: done.series,
        tables: done.tables,
        deletes: done.deletes,
    })
}
