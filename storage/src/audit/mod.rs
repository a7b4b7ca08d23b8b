//! Physical verification of deletes: scanning stored bytes for values a set of deletes covers.
//!
//! A delete is *persisted* once no memtable, live file, WAL segment (or, for a replica, Raft log
//! segment or snapshot) still holds a value it covers. The ledger records when that happened;
//! an audit checks the claim independently by reading every such place and reporting what it
//! read and what it found ([`SourceScan`]). Zero found everywhere is the pass.
//!
//! - [`Coverage`]: the key x sequence space a set of deletes covers.
//! - [`SourceScan`]: what one place held: entries and bytes read, covered values found.
//! - [`crate::Engine::audit`] scans an engine's memtables, live SSTs and WAL; [`scan_sst_file`]
//!   and [`scan_batches`] serve callers with files of their own (snapshots, a Raft log).
//! - [`FileAccount`]: every byte of a file sorted into checked, zero and unaccounted runs
//!   ([`crate::Engine::account`] for an engine's directory; [`account_sst_file`] and
//!   [`account_log`] for callers with files of their own).
//! - [`plaintext`]: a file's bytes with every SST page decompressed, for checks that look for
//!   known values in raw bytes.

pub(crate) mod account;
mod coverage;
pub(crate) mod scan;

pub use account::{account_log, account_prefix, account_sst_file, account_unknown, FileAccount};
pub use coverage::Coverage;
pub use scan::{plaintext, scan_batches, scan_sst_file, Finding, SourceScan, MAX_EXAMPLES};
