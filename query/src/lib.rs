//! `ebb-query`: the SQL layer of EbbDB.
//!
//! This crate is empty for now. It will hold the DataFusion catalog, one `TableProvider` per table
//! with filter pushdown, `INSERT`, `DELETE`, retention DDL and the system tables.
