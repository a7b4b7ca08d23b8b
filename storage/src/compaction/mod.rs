//! Leveled compaction. The policy ([`policy`]) is a pure function from the live files to a task;
//! the executor (`executor`) runs a task. Keeping them apart lets the policy be unit-tested and
//! simulated without touching disk.

pub(crate) mod executor;
pub mod index_policy;
pub mod policy;
pub(crate) mod retention;

pub use policy::{CompactionReason, CompactionTask};
