//! Table definitions: tags, typed fields and `time`.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use serde::{Deserialize, Serialize};

use super::rollup::RollupDef;
use crate::error::QueryError;

/// Name of the time column.
pub const TIME_COLUMN: &str = "time";

/// The schema metadata key under which a rollup's stored partials carry its definition (JSON
/// of [`RollupDef`]), so a cluster coordinator reading them from the shards knows how to merge
/// them.
pub const ROLLUP_METADATA: &str = "ebb.rollup";

/// Type of a field column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FieldType {
    /// 64-bit float.
    Float,
    /// Signed 64-bit integer.
    Integer,
    /// Unsigned 64-bit integer.
    UInteger,
    /// Boolean.
    Boolean,
    /// UTF-8 string.
    String,
}

impl FieldType {
    /// The Arrow type of the column.
    pub fn data_type(self) -> DataType {
        match self {
            FieldType::Float => DataType::Float64,
            FieldType::Integer => DataType::Int64,
            FieldType::UInteger => DataType::UInt64,
            FieldType::Boolean => DataType::Boolean,
            FieldType::String => DataType::Utf8,
        }
    }

    /// The field type of an Arrow type, if it has one.
    pub fn from_data_type(dt: &DataType) -> Option<FieldType> {
        Some(match dt {
            DataType::Float64 | DataType::Float32 => FieldType::Float,
            DataType::Int64 | DataType::Int32 | DataType::Int16 | DataType::Int8 => {
                FieldType::Integer
            }
            DataType::UInt64 | DataType::UInt32 | DataType::UInt16 | DataType::UInt8 => {
                FieldType::UInteger
            }
            DataType::Boolean => FieldType::Boolean,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => FieldType::String,
            _ => return None,
        })
    }

    /// Name used in error messages and `DESCRIBE`-like output.
    pub fn name(self) -> &'static str {
        match self {
            FieldType::Float => "float",
            FieldType::Integer => "integer",
            FieldType::UInteger => "unsigned integer",
            FieldType::Boolean => "boolean",
            FieldType::String => "string",
        }
    }
}

/// A table: its id, tags, fields (in the order they appeared) and retention.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableDef {
    /// Storage id (key prefix).
    pub id: u32,
    /// Database (SQL schema) the table belongs to.
    pub database: String,
    /// Table name (line-protocol measurement).
    pub name: String,
    /// Tag columns.
    pub tags: Vec<String>,
    /// Field columns with their types.
    pub fields: Vec<(String, FieldType)>,
    /// Retention in nanoseconds (`None`: keep forever).
    pub retention_ns: Option<u64>,
    /// What it keeps if it is a rollup (see [`crate::model::rollup`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollup: Option<RollupDef>,
}

/// What a column of a table is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    /// The time column.
    Time,
    /// Tag number `i`.
    Tag(usize),
    /// Field number `i`.
    Field(usize),
}

impl TableDef {
    /// The measurement its series hash by (see `crate::model::hashspace`): its own name, or a
    /// rollup's source, so a rollup's series live on their source series' shard.
    pub fn hash_name(&self) -> &str {
        self.rollup.as_ref().map_or(&self.name, |r| &r.source)
    }

    /// Column `name`, if the table has it.
    pub fn column(&self, name: &str) -> Option<Column> {
        if name == TIME_COLUMN {
            return Some(Column::Time);
        }
        if let Some(i) = self.tags.iter().position(|t| t == name) {
            return Some(Column::Tag(i));
        }
        self.fields.iter().position(|(f, _)| f == name).map(Column::Field)
    }

    /// Columns in schema order: `time`, tags, fields.
    pub fn columns(&self) -> Vec<Column> {
        let mut c = vec![Column::Time];
        c.extend((0..self.tags.len()).map(Column::Tag));
        c.extend((0..self.fields.len()).map(Column::Field));
        c
    }

    /// The Arrow schema: `time` (ns, not null), tags (strings), fields (typed, nullable).
    pub fn schema(&self) -> SchemaRef {
        let mut fields =
            vec![Field::new(TIME_COLUMN, DataType::Timestamp(TimeUnit::Nanosecond, None), false)];
        fields.extend(self.tags.iter().map(|t| Field::new(t, DataType::Utf8, true)));
        fields.extend(self.fields.iter().map(|(f, ty)| Field::new(f, ty.data_type(), true)));
        let mut meta = std::collections::HashMap::new();
        if let Some(json) = self.rollup.as_ref().and_then(|r| serde_json::to_string(r).ok()) {
            meta.insert(ROLLUP_METADATA.to_string(), json);
        }
        Arc::new(Schema::new_with_metadata(fields, meta))
    }

    /// Checks that `name` may be a new tag or field of this table.
    pub fn check_new_column(&self, name: &str) -> Result<(), QueryError> {
        if name.is_empty() {
            return Err(QueryError::invalid("column names must not be empty"));
        }
        if name == TIME_COLUMN {
            return Err(QueryError::invalid(format!(
                "{TIME_COLUMN:?} is reserved for the timestamp of table {}",
                self.name
            )));
        }
        if self.column(name).is_some() {
            return Err(QueryError::invalid(format!(
                "column {name:?} already exists in table {}",
                self.name
            )));
        }
        Ok(())
    }
}

/// Checks a database or table name: 1-255 bytes, no control characters.
pub fn check_name(kind: &str, name: &str) -> Result<(), QueryError> {
    if name.is_empty() || name.len() > 255 || name.chars().any(char::is_control) {
        return Err(QueryError::invalid(format!(
            "invalid {kind} name {name:?}: 1-255 bytes without control characters"
        )));
    }
    Ok(())
}

/// Databases EbbDB serves itself: no table can be written into them.
pub const RESERVED_DATABASES: [&str; 3] = ["system", "information_schema", "pg_catalog"];

/// Checks that `db` names a database rows may be written to or tables created in.
pub fn check_writable_database(db: &str) -> Result<(), QueryError> {
    check_name("database", db)?;
    if RESERVED_DATABASES.iter().any(|r| r.eq_ignore_ascii_case(db)) {
        return Err(QueryError::invalid(format!(
            "database {db:?} is reserved for what EbbDB serves itself; write to another database"
        )));
    }
    Ok(())
}
