//! Integration tests of the storage engine.
//!
//! One test binary per crate: every module links against the same build of the crate, so the
//! test suite links once instead of once per file.

mod account;
mod common;
mod corruption;
mod deadlines;
mod disk_full;
mod durability;
mod engine;
mod layout;
mod model;
mod range_delete;
mod range_filter;
mod range_reduce;
mod requests;
mod retention;
mod summarized;
mod time_window;
mod write_budget;
