//! `INSERT` over the cluster: rows become lines again, and the router sends each series to
//! its shard's leader, as a line-protocol write would.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{
    DataType, Float64Type, Int64Type, SchemaRef, TimestampNanosecondType, UInt64Type,
};
use datafusion::datasource::sink::DataSink;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType};
use ebb_query::lp::{FieldValue, Line, Precision};
use futures::StreamExt;
use smallvec::SmallVec;

use super::router::Router;

/// Lines per forwarded write.
const LINES_PER_WRITE: usize = 5000;

/// Writes `INSERT` rows of one table through the router.
#[derive(Debug)]
pub struct ClusterInsert {
    /// The router.
    pub router: Arc<Router>,
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

fn invalid(msg: String) -> DataFusionError {
    DataFusionError::Plan(msg)
}

fn string_at(col: &dyn Array, r: usize) -> DfResult<String> {
    Ok(match col.data_type() {
        DataType::Utf8 => col.as_string::<i32>().value(r).to_string(),
        DataType::LargeUtf8 => col.as_string::<i64>().value(r).to_string(),
        DataType::Utf8View => col.as_string_view().value(r).to_string(),
        other => return Err(DataFusionError::Internal(format!("string column is {other}"))),
    })
}

impl ClusterInsert {
    /// Appends the rows of `b` as lines to `out`; `row_no` counts rows across batches.
    fn lines(&self, b: &RecordBatch, row_no: &mut usize, out: &mut Vec<String>) -> DfResult<()> {
        let schema = b.schema();
        let time_idx = schema.index_of("time")?;
        let time = b
            .column(time_idx)
            .as_primitive_opt::<TimestampNanosecondType>()
            .ok_or_else(|| invalid("the time column is not a nanosecond timestamp".into()))?;
        for r in 0..b.num_rows() {
            *row_no += 1;
            if time.is_null(r) {
                return Err(invalid(format!("row {row_no}: time is NULL")));
            }
            let mut tags = SmallVec::new();
            let mut fields = SmallVec::new();
            for (i, f) in schema.fields().iter().enumerate() {
                let col = b.column(i);
                if i == time_idx || col.is_null(r) {
                    continue;
                }
                let name = Cow::Borrowed(f.name().as_str());
                if self.tags.contains(f.name()) {
                    tags.push((name, Cow::Owned(string_at(col.as_ref(), r)?)));
                    continue;
                }
                let v = match col.data_type() {
                    DataType::Float64 => {
                        FieldValue::Float(col.as_primitive::<Float64Type>().value(r))
                    }
                    DataType::Int64 => {
                        FieldValue::Integer(col.as_primitive::<Int64Type>().value(r))
                    }
                    DataType::UInt64 => {
                        FieldValue::UInteger(col.as_primitive::<UInt64Type>().value(r))
                    }
                    DataType::Boolean => FieldValue::Boolean(col.as_boolean().value(r)),
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                        FieldValue::String(Cow::Owned(string_at(col.as_ref(), r)?))
                    }
                    other => {
                        return Err(invalid(format!(
                            "row {row_no}: column {} has type {other}, which no field has",
                            f.name()
                        )))
                    }
                };
                fields.push((name, v));
            }
            if fields.is_empty() {
                return Err(invalid(format!("row {row_no}: a row needs at least one field value")));
            }
            let line = Line {
                measurement: Cow::Borrowed(self.name.as_str()),
                tags,
                fields,
                timestamp: Some(time.value(r)),
            };
            let mut text = String::new();
            line.write_to(&mut text).map_err(|e| invalid(format!("row {row_no}: {e}")))?;
            out.push(text);
        }
        Ok(())
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
        // Every row is checked before any is written.
        let mut lines = Vec::new();
        let mut row_no = 0usize;
        while let Some(b) = data.next().await {
            self.lines(&b?, &mut row_no, &mut lines)?;
        }
        let now = ebb_query::now_ns();
        let mut written = 0u64;
        for chunk in lines.chunks(LINES_PER_WRITE) {
            let body = chunk.concat();
            let s = self
                .router
                .write_lines(&self.database, &body, Precision::Nanoseconds, now)
                .await
                .map_err(|e| DataFusionError::External(e.to_string().into()))?;
            written += s.lines as u64;
        }
        Ok(written)
    }
}
