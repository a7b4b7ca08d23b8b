//! The `system` schema of cluster SQL: `system.deletions` (every delete request on every
//! replica, gathered from every node), `system.layout` and `system.compactions` (each shard
//! leader's KiWi+ layout and recent compactions) and
//! the tables the cluster describes itself (`system.nodes`, `system.shards`).

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::catalog::TableProvider;
use datafusion::datasource::MemTable;
use datafusion::error::{DataFusionError, Result as DfResult};

use futures::TryStreamExt;

use super::ShardClient;

/// Names of the cluster's system tables.
pub fn names(client: &dyn ShardClient) -> Vec<String> {
    let mut names: Vec<String> = client.cluster_tables().iter().map(|s| s.to_string()).collect();
    names.push("deletions".into());
    names.extend(PER_SHARD.iter().map(|s| s.to_string()));
    names.sort();
    names
}

/// System table `name`, as of now.
pub async fn table(
    client: &dyn ShardClient,
    name: &str,
) -> DfResult<Option<Arc<dyn TableProvider>>> {
    let batch = if name == "deletions" {
        let rows = client.deletions().await;
        crate::deletions::batch(&rows, crate::now_ms())
            .map_err(|e| DataFusionError::External(Box::new(e)))?
    } else if let Some(fields) = per_shard_fields(name) {
        per_shard(client, name, fields).await?
    } else if client.cluster_tables().contains(&name) {
        match client.cluster_table(name).await {
            Ok(Some(b)) => b,
            Ok(None) => return Ok(None),
            Err(e) => return Err(DataFusionError::External(Box::new(e))),
        }
    } else {
        return Ok(None);
    };
    let t = MemTable::try_new(batch.schema(), vec![vec![batch]])?;
    Ok(Some(Arc::new(t)))
}

/// System tables of one engine, answered by every shard's leader with a `shard` column first.
const PER_SHARD: [&str; 2] = ["compactions", "layout"];

/// The columns of per-shard system table `name` (without `shard`).
fn per_shard_fields(name: &str) -> Option<Vec<Field>> {
    match name {
        "compactions" => Some(crate::sql::system::compaction_fields()),
        "layout" => Some(crate::sql::system::layout_fields()),
        _ => None,
    }
}

/// System table `name` of every shard's leader, with a `shard` column first.
async fn per_shard(
    client: &dyn ShardClient,
    name: &str,
    columns: Vec<Field>,
) -> DfResult<RecordBatch> {
    let mut fields = vec![Field::new("shard", DataType::UInt64, false)];
    fields.extend(columns);
    let schema = Arc::new(Schema::new(fields));
    let sql = format!("SELECT * FROM system.{name}");
    let calls = client.shard_ids().into_iter().map(|shard| {
        let sql = sql.clone();
        async move {
            let (_, batches) = client
                .query(shard, "public", &sql, None, None)
                .await
                .map_err(|e| DataFusionError::External(Box::new(e)))?;
            let batches: Vec<RecordBatch> =
                batches.try_collect().await.map_err(|e| DataFusionError::External(Box::new(e)))?;
            Ok::<_, DataFusionError>((shard, batches))
        }
    });
    let mut out = Vec::new();
    for r in futures::future::join_all(calls).await {
        let (shard, batches) = r?;
        for b in batches {
            let mut cols: Vec<ArrayRef> =
                vec![Arc::new(UInt64Array::from(vec![shard; b.num_rows()]))];
            cols.extend(b.columns().iter().cloned());
            out.push(RecordBatch::try_new(schema.clone(), cols)?);
        }
    }
    Ok(datafusion::arrow::compute::concat_batches(&schema, &out)?)
}
