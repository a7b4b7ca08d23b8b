//! EbbDB backups.
//!
//! A backup set is a consistent copy of every shard's engine (a checkpoint per shard, taken at
//! or after the moment the backup started) kept in a directory or S3-compatible object
//! storage ([`Destination`]). Files are stored as immutable objects named by the BLAKE3 hash
//! of their content ([`store`]), so a file already at the destination is never copied again:
//! SST and range-index files never change, so each backup after the first copies only what is
//! new. Every object is checked against its hash whenever it is read (restore, verify), and a
//! set's manifest carries its own checksum ([`set`]).
//!
//! A set may be encrypted ([`crypto`]): each object with a key of its own, the objects' keys
//! sealed in the manifest with the set's key, which EbbDB keeps outside the store
//! ([`crypto::KeyDir`]) and destroys with the set.
//!
//! This crate knows nothing of engines or clusters: the server takes the checkpoints, names
//! the parts and applies deletions to sets; here are the store, the manifests, the transfers,
//! the throttle and pruning.

pub mod crypto;
pub mod error;
pub mod journal;
mod local;
pub mod lock;
pub mod progress;
pub mod prune;
pub mod set;
pub mod store;
pub mod throttle;
pub mod transfer;
pub mod uri;

pub use error::{BackupError, Result};
pub use journal::JournalEntry;
pub use lock::{Lock, LockKind};
pub use progress::{Progress, ProgressSnapshot};
pub use set::{BackupSet, FileEntry, LogPosition, ObjectRef, Part, Purged, SetKind};
pub use store::BackupStore;
pub use throttle::Throttle;
pub use uri::Destination;
