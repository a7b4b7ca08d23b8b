//! Query results sent as they are produced: JSON rows, CSV and Arrow IPC are encoded batch by
//! batch into the response body, so a large result is never held whole. A failure after the
//! first batch can no longer change the status: the body ends early, and JSON clients see it
//! unterminated.

use datafusion::arrow;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;

/// A format that can be written batch by batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Streamed {
    /// A JSON array of row objects.
    Json,
    /// CSV with a header line.
    Csv,
    /// An Arrow IPC stream.
    Arrow,
}

/// Writes one result in `Streamed` format, a piece at a time.
pub struct Encoder {
    format: Streamed,
    schema: SchemaRef,
    rows_written: bool,
    header_written: bool,
    ipc: Option<arrow::ipc::writer::StreamWriter<Vec<u8>>>,
}

/// Why a piece of the body could not be encoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// Arrow could not encode the batch (or the IPC stream's schema or end).
    #[error(transparent)]
    Arrow(#[from] arrow::error::ArrowError),
    /// A batch or the end of an Arrow IPC body before [`Encoder::begin`].
    #[error("the IPC stream was not begun")]
    NotBegun,
}

impl Encoder {
    /// An encoder of a result with `schema`.
    pub fn new(format: Streamed, schema: SchemaRef) -> Encoder {
        Encoder { format, schema, rows_written: false, header_written: false, ipc: None }
    }

    /// The content type of the body.
    pub fn content_type(&self) -> &'static str {
        match self.format {
            Streamed::Json => "application/json",
            Streamed::Csv => "text/csv",
            Streamed::Arrow => "application/vnd.apache.arrow.stream",
        }
    }

    /// What starts the body.
    pub fn begin(&mut self) -> Result<Vec<u8>, EncodeError> {
        match self.format {
            Streamed::Json => Ok(b"[".to_vec()),
            Streamed::Csv => Ok(Vec::new()),
            Streamed::Arrow => {
                let mut w = arrow::ipc::writer::StreamWriter::try_new(Vec::new(), &self.schema)?;
                let out = std::mem::take(w.get_mut());
                self.ipc = Some(w);
                Ok(out)
            }
        }
    }

    /// One batch's bytes.
    pub fn batch(&mut self, b: &RecordBatch) -> Result<Vec<u8>, EncodeError> {
        match self.format {
            Streamed::Json => {
                let mut w = arrow::json::ArrayWriter::new(Vec::new());
                w.write(b)?;
                w.finish()?;
                let out = w.into_inner();
                // `[{...},{...}]`: the rows between the brackets.
                let inner =
                    out.strip_prefix(b"[").and_then(|o| o.strip_suffix(b"]")).unwrap_or_default();
                if inner.is_empty() {
                    return Ok(Vec::new());
                }
                let mut piece = Vec::with_capacity(inner.len() + 1);
                if self.rows_written {
                    piece.push(b',');
                }
                piece.extend_from_slice(inner);
                self.rows_written = true;
                Ok(piece)
            }
            Streamed::Csv => {
                let mut w = arrow::csv::WriterBuilder::new()
                    .with_header(!self.header_written)
                    .build(Vec::new());
                w.write(b)?;
                self.header_written = true;
                Ok(w.into_inner())
            }
            Streamed::Arrow => {
                let w = self.ipc.as_mut().ok_or(EncodeError::NotBegun)?;
                w.write(b)?;
                Ok(std::mem::take(w.get_mut()))
            }
        }
    }

    /// What ends the body.
    pub fn end(&mut self) -> Result<Vec<u8>, EncodeError> {
        match self.format {
            Streamed::Json => Ok(b"]\n".to_vec()),
            // A result without rows still has its header line.
            Streamed::Csv if !self.header_written && !self.schema.fields().is_empty() => {
                self.batch(&RecordBatch::new_empty(self.schema.clone()))
            }
            Streamed::Csv => Ok(Vec::new()),
            Streamed::Arrow => {
                let mut w = self.ipc.take().ok_or(EncodeError::NotBegun)?;
                w.finish()?;
                Ok(std::mem::take(w.get_mut()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn batch(schema: &SchemaRef, from: i64, n: i64) -> RecordBatch {
        RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from_iter_values(from..from + n)),
                Arc::new(StringArray::from_iter_values((from..from + n).map(|i| format!("r{i}")))),
            ],
        )
        .unwrap()
    }

    fn run(format: Streamed, schema: &SchemaRef, batches: &[RecordBatch]) -> Vec<u8> {
        let mut e = Encoder::new(format, schema.clone());
        let mut out = e.begin().unwrap();
        for b in batches {
            out.extend(e.batch(b).unwrap());
        }
        out.extend(e.end().unwrap());
        out
    }

    #[test]
    fn pieces_make_the_whole_result() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, false),
            Field::new("s", DataType::Utf8, false),
        ]));
        let batches = vec![batch(&schema, 0, 2), batch(&schema, 2, 0), batch(&schema, 2, 3)];
        let json: serde_json::Value =
            serde_json::from_slice(&run(Streamed::Json, &schema, &batches)).unwrap();
        assert_eq!(json.as_array().unwrap().len(), 5);
        assert_eq!(json[4]["s"], "r4");
        let empty: serde_json::Value =
            serde_json::from_slice(&run(Streamed::Json, &schema, &[])).unwrap();
        assert_eq!(empty, serde_json::json!([]));
        let csv = String::from_utf8(run(Streamed::Csv, &schema, &batches)).unwrap();
        assert_eq!(csv.lines().count(), 6, "{csv}");
        assert_eq!(csv.lines().next(), Some("n,s"));
        let ipc = run(Streamed::Arrow, &schema, &batches);
        let r = arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(ipc), None).unwrap();
        let rows: usize = r.map(|b| b.unwrap().num_rows()).sum();
        assert_eq!(rows, 5);
    }
}
