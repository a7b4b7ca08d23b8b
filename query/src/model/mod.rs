//! The data model: keys, table schemas, row values, the series index and the catalog.

pub mod catalog;
pub mod hashspace;
pub mod keys;
pub mod rollup;
pub mod row;
pub mod schema;
pub mod series;
pub mod summary;
pub mod varint;

pub use schema::{Column, FieldType, TableDef, TIME_COLUMN};
