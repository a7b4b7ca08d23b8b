//! `INSERT` over the cluster: rows become lines again, and the shard client sends each series
//! to its shard's leader, as a line-protocol write would.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::datasource::sink::DataSink;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType};
use futures::StreamExt;

use super::ShardClient;
use crate::lp::Precision;
use crate::sql::rows::batch_lines;

/// Lines per forwarded write.
const LINES_PER_WRITE: usize = 5000;

/// Writes `INSERT` rows of one table through the shard client.
#[derive(Debug)]
pub struct ClusterInsert {
    /// The shards.
    pub client: Arc<dyn ShardClient>,
    /// Database of the table.
    pub database: String,
    /// The table.
    pub name: String,
    /// The table's schema (what the rows arrive in).
    pub schema: SchemaRef,
    /// Which of its columns are tags (the rest, but `time`, are fields).
    pub tags: BTreeSet<String>,
}

impl DisplayAs for ClusterInsert {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EbbClusterInsert: {}.{}", self.database, self.name)
    }
}

#[async_trait]
impl DataSink for ClusterInsert {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    async fn write_all(
        &self,
        mut data: SendableRecordBatchStream,
        _context: &Arc<TaskContext>,
    ) -> DfResult<u64> {
        let mut batches = Vec::new();
        while let Some(b) = data.next().await {
            batches.push(b?);
        }
        // Every row is checked before any is written.
        let mut rows = Vec::new();
        let mut row_no = 0usize;
        for b in &batches {
            batch_lines(&self.name, b, |c| self.tags.contains(c), &mut row_no, &mut rows)
                .map_err(|e| DataFusionError::Plan(e.to_string()))?;
        }
        let mut lines = Vec::with_capacity(rows.len());
        for (no, line) in &rows {
            let mut text = String::new();
            line.write_to(&mut text)
                .map_err(|e| DataFusionError::Plan(format!("row {no}: {e}")))?;
            lines.push(text);
        }
        let now = crate::now_ns();
        let mut written = 0u64;
        for chunk in lines.chunks(LINES_PER_WRITE) {
            let body = chunk.concat();
            let s = self
                .client
                .write_lines(&self.database, &body, Precision::Nanoseconds, now)
                .await
                .map_err(|e| DataFusionError::External(Box::new(e)))?;
            written += s.lines as u64;
        }
        Ok(written)
    }
}
