//! Arrow IPC framing of query results between nodes: each message is a self-contained IPC
//! stream (schema plus at most one batch).

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::arrow::record_batch::RecordBatch;

/// Encodes `schema` and, if given, one batch.
pub fn encode(schema: &SchemaRef, batch: Option<&RecordBatch>) -> Result<Vec<u8>, ArrowError> {
    let mut out = Vec::new();
    {
        let mut w = StreamWriter::try_new(&mut out, schema)?;
        if let Some(b) = batch {
            w.write(b)?;
        }
        w.finish()?;
    }
    Ok(out)
}

/// Decodes a message: its schema and batch, if any.
pub fn decode(bytes: &[u8]) -> Result<(SchemaRef, Option<RecordBatch>), ArrowError> {
    let mut r = StreamReader::try_new(std::io::Cursor::new(bytes), None)?;
    let schema = r.schema();
    let batch = r.next().transpose()?;
    Ok((schema, batch))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    #[test]
    fn batches_round_trip() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("host", DataType::Utf8, true),
            Field::new("n", DataType::Int64, false),
        ]));
        let b = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(vec![Some("a"), None])),
                Arc::new(Int64Array::from(vec![1, 2])),
            ],
        )
        .unwrap();
        let (s, got) = decode(&encode(&schema, Some(&b)).unwrap()).unwrap();
        assert_eq!(s, schema);
        assert_eq!(got.unwrap(), b);
        let (s, none) = decode(&encode(&schema, None).unwrap()).unwrap();
        assert_eq!((s, none), (schema, None));
        assert!(decode(b"junk").is_err());
    }
}
