//! Integration tests of the SQL layer on one database.
//!
//! One test binary per crate: every module links against the same build of the crate, so the
//! test suite links once instead of once per file.

mod aggregates;
mod common;
mod concurrent_writes;
mod erase;
mod line_protocol;
mod lp_corpus;
mod newest;
mod prepared;
mod rollup;
mod sql;
