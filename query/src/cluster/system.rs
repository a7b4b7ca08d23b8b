//! The `system` schema of cluster SQL: `system.deletions` (every delete request on every
//! replica, gathered from every node) and the tables the cluster describes itself
//! (`system.nodes`, `system.shards`).

use std::sync::Arc;

use datafusion::catalog::TableProvider;
use datafusion::datasource::MemTable;
use datafusion::error::{DataFusionError, Result as DfResult};

use super::ShardClient;

/// Names of the cluster's system tables.
pub fn names(client: &dyn ShardClient) -> Vec<String> {
    let mut names: Vec<String> = client.cluster_tables().iter().map(|s| s.to_string()).collect();
    names.push("deletions".into());
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
