//! DataFusion integration: the catalog (`ebb`, one schema per database, plus `system`), a table
//! provider per table with pushdown, `INSERT`, `DELETE`, DDL, and SQL sessions.

pub mod alter_cluster;
pub mod bounds;
pub mod catalog;
mod column_names;
pub mod coop;
pub mod ddl;
pub mod delete;
pub mod erase;
pub mod limits;
mod newest;
pub mod parameters;
mod partial;
pub mod pg_catalog;
pub mod pushdown;
pub mod rollup;
pub mod rows;
pub(crate) mod scan;
pub(crate) mod scan_exec;
mod session;
pub mod shard;
pub mod sized;
pub mod statement;
pub mod system;
pub(crate) mod table;

pub use catalog::EbbCatalog;
pub(crate) use session::optimized_stream;
pub use session::{command_output, rows_output, QueryOutput, SqlSession, StatementKind};
pub use table::ShardTable;

/// Name of the DataFusion catalog.
pub const CATALOG: &str = "ebb";

/// `s` as a quoted SQL identifier (`"` doubled), for SQL the server writes from names.
pub fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// `s` as a SQL string literal (`'` doubled; no backslash escapes in the dialect used).
pub fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}
