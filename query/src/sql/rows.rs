//! `INSERT` rows back into lines: what a table's rows become before they are written, on a
//! single node (straight to the database) and in a cluster (as line protocol, routed by series).

use std::borrow::Cow;

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{
    DataType, Float64Type, Int64Type, TimestampNanosecondType, UInt64Type,
};
use smallvec::SmallVec;

use crate::error::{QueryError, Result};
use crate::lp::{FieldValue, Line};
use crate::model::schema::TIME_COLUMN;

fn str_at(col: &dyn Array, r: usize) -> Result<&str> {
    Ok(match col.data_type() {
        DataType::Utf8 => col.as_string::<i32>().value(r),
        DataType::LargeUtf8 => col.as_string::<i64>().value(r),
        DataType::Utf8View => col.as_string_view().value(r),
        other => return Err(QueryError::Internal(format!("string column is {other}"))),
    })
}

/// Appends the rows of `batch` (in a table's schema: `time`, tags, fields) to `out` as lines
/// of `measurement` with nanosecond timestamps, numbered from `*row_no + 1` on. Columns for
/// which `is_tag` holds are tags; the others are fields, typed by their Arrow type. NULLs are
/// left out; a row needs a time and at least one field.
pub fn batch_lines<'a>(
    measurement: &'a str,
    batch: &'a RecordBatch,
    is_tag: impl Fn(&str) -> bool,
    row_no: &mut usize,
    out: &mut Vec<(usize, Line<'a>)>,
) -> Result<()> {
    let schema = batch.schema_ref();
    let time_idx = schema
        .index_of(TIME_COLUMN)
        .map_err(|_| QueryError::Internal("INSERT rows without a time column".into()))?;
    let time =
        batch.column(time_idx).as_primitive_opt::<TimestampNanosecondType>().ok_or_else(|| {
            QueryError::Internal(format!("time column is {}", batch.column(time_idx).data_type()))
        })?;
    for r in 0..batch.num_rows() {
        *row_no += 1;
        if time.is_null(r) {
            return Err(QueryError::invalid(format!("row {row_no}: time is NULL")));
        }
        let mut tags = SmallVec::new();
        let mut fields = SmallVec::new();
        for (i, f) in schema.fields().iter().enumerate() {
            let col = batch.column(i);
            if i == time_idx || col.is_null(r) {
                continue;
            }
            let name = Cow::Borrowed(f.name().as_str());
            if is_tag(f.name()) {
                tags.push((name, Cow::Borrowed(str_at(col.as_ref(), r)?)));
                continue;
            }
            let v = match col.data_type() {
                DataType::Float64 => FieldValue::Float(col.as_primitive::<Float64Type>().value(r)),
                DataType::Int64 => FieldValue::Integer(col.as_primitive::<Int64Type>().value(r)),
                DataType::UInt64 => FieldValue::UInteger(col.as_primitive::<UInt64Type>().value(r)),
                DataType::Boolean => FieldValue::Boolean(col.as_boolean().value(r)),
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                    FieldValue::String(Cow::Borrowed(str_at(col.as_ref(), r)?))
                }
                other => {
                    return Err(QueryError::invalid(format!(
                        "row {row_no}: column {} has type {other}, which no field has",
                        f.name()
                    )))
                }
            };
            fields.push((name, v));
        }
        if fields.is_empty() {
            return Err(QueryError::invalid(format!(
                "row {row_no}: a row needs at least one field value"
            )));
        }
        out.push((
            *row_no,
            Line {
                measurement: Cow::Borrowed(measurement),
                tags,
                fields,
                timestamp: Some(time.value(r)),
            },
        ));
    }
    Ok(())
}
