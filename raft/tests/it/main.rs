//! Integration tests of replication: the Raft log, the state machine, replicated groups and log purges.
//!
//! One test binary per crate: every module links against the same build of the crate, so the
//! test suite links once instead of once per file.

mod cluster;
mod harness;
mod log_suite;
mod purge;
mod replica;
mod split;
