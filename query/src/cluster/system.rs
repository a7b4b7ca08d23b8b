//! The `system` schema of cluster SQL: `system.deletions` (every delete request on every
//! replica, gathered from every node), `system.layout` (each shard leader's KiWi+ layout) and
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
    names.push("layout".into());
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
    } else if name == "layout" {
        layout(client).await?
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

/// `system.layout` of every shard's leader, with a `shard` column first.
async fn layout(client: &dyn ShardClient) -> DfResult<RecordBatch> {
    let mut fields = vec![Field::new("shard", DataType::UInt64, false)];
    fields.extend(crate::sql::system::layout_fields());
    let schema = Arc::new(Schema::new(fields));
    let calls = client.shard_ids().into_iter().map(|shard| async move {
        let sql = "SELECT * FROM system.layout";
        let (_, batches) = client
            .query(shard, "public", sql, None, None)
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        let batches: Vec<RecordBatch> =
            batches.try_collect().await.map_err(|e| DataFusionError::External(Box::new(e)))?;
        Ok::<_, DataFusionError>((shard, batches))
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
