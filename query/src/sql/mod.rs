//! DataFusion integration: the catalog (`ebb`, one schema per database, plus `system`), a table
//! provider per table with pushdown, `INSERT`, `DELETE`, DDL, and SQL sessions.

pub mod alter_cluster;
mod catalog;
pub mod ddl;
pub mod delete;
pub mod erase;
mod newest;
pub mod parameters;
mod partial;
mod provider;
pub mod pushdown;
pub mod requested;
pub mod rows;
mod scan;
mod scan_exec;
mod session;
pub mod system;

pub use catalog::EbbCatalog;
pub use provider::EbbTable;
pub use session::{command_output, rows_output, QueryOutput, SqlSession, StatementKind};
pub(crate) use session::{limited_stream, new_context, optimized_stream};

/// Name of the DataFusion catalog.
pub const CATALOG: &str = "ebb";
