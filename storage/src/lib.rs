//! `ebb-storage`: the LSM storage engine of one EbbDB shard replica.
//!
//! - **Writes** arrive in [`WriteBatch`]es with caller-supplied sequence numbers (under Raft,
//!   derived from the log index), go to an optional engine-owned WAL and a concurrent skiplist
//!   memtable, and are flushed to level-0 SSTs by size and by age.
//! - **SSTs** use the KiWi+ layout (see [`sst`]): delete tiles in sort-key order, pages inside a
//!   tile ordered by the delete key (time), entries inside a page by sort key; per-page Bloom
//!   filters, min/max keys and delete keys, checksums and compression. The tile size h of each
//!   level follows the KiWi+ cost model on the operations the engine counts
//!   ([`TileLayout::Tuned`], [`Engine::layout`]); each SST carries a Rosetta range filter
//!   ([`filter`]) that one-series range scans probe before opening it. A point lookup passes
//!   over files whose delete-key range does not reach the key's, so new rows merging with
//!   stored ones look only into the files of their time.
//!   RangeReduce (off by default): Level-Renaming ([`Options::level_renaming`]) and
//!   Bounded-Merge as query-driven compaction ([`Options::range_reduce`]); unlike the paper,
//!   whole files move, after the scan. GRF (off by default, [`Options::global_range_filter`]):
//!   one range filter per engine version naming the runs that may hold a one-series range,
//!   probed once per scan instead of once per file; each version carries its own filter
//!   instead of the paper's shape encoding, which needs a full-merge schedule.
//! - **Compaction** is leveled with size ratio T; the policy ([`compaction::policy`]) is a pure
//!   function of the live files, the execution separate.
//! - **Recovery**: version edits commit atomically through the manifest; on open a torn manifest
//!   tail is ignored, orphan files are removed, the WAL is replayed (its newest file ends at the
//!   first bad record: what a power cut tore was never acknowledged), and any other corruption
//!   surfaces as [`Error::Corruption`] naming the file and offset. A failed fsync poisons the
//!   engine; a full disk only fails the write or postpones the flush or compaction.
//! - **Durability**: [`SyncMode`] says when the WAL is fsynced (`Always` with group commit,
//!   `Interval`, `None`); every file and directory entry is fsynced before anything relies on
//!   it, through [`durable`], whose [`durable::PowerCut`] simulates power cuts in tests.
//!   [`disk::Reserve`] refuses writes below a free-space reserve (used by the SQL layer).
//!
//! The crate is synchronous and knows nothing of Raft, SQL or the network.
//!
//! ```
//! use ebb_storage::{Engine, Options, WriteBatch};
//! # let dir = tempfile::tempdir().unwrap();
//! let engine = Engine::open(dir.path(), Options::default())?;
//! let mut batch = WriteBatch::new();
//! batch.put("cpu,host=a", "0.5").put("cpu,host=b", "0.7");
//! engine.write(&batch, 1)?; // operations get sequence numbers 1 and 2
//! let snap = engine.snapshot();
//! engine.delete("cpu,host=a", 3)?;
//! assert_eq!(engine.get(b"cpu,host=a", None)?, None);
//! assert_eq!(engine.get(b"cpu,host=a", Some(&snap))?.as_deref(), Some(&b"0.5"[..]));
//! let live: Vec<_> = engine.scan(..b"cpu,host=z".as_slice(), None)?.collect::<Result<_, _>>()?;
//! assert_eq!(live.len(), 1);
//! engine.close()?;
//! # Ok::<(), ebb_storage::Error>(())
//! ```

pub mod audit;
mod batch;
mod cache;
mod clock;
mod coding;
pub mod compaction;
pub mod disk;
pub mod durable;
mod engine;
mod error;
pub mod fade;
pub mod failpoint;
pub mod filter;
mod fs;
pub mod gloran;
mod iter;
pub mod kiwi;
pub mod ledger;
mod log;
pub(crate) mod memtable;
mod options;
mod snapshot;
pub mod sst;
mod version;
mod wal;

pub use batch::{BatchDecodeError, BatchOp, EntryKind, WriteBatch, MAX_KEY_LEN, MAX_VALUE_LEN};
pub use clock::{Clock, ManualClock};
pub use coding::{decode_exact, ExactDecodeError};
pub use engine::{
    CompactionRecord, DeletionCheck, Engine, EngineStats, Layout, LayoutReason, LevelStats,
    LogClearance, RemainingEntry, Staged,
};
pub use error::{Error, Result};
pub use failpoint::FailPoints;
pub use iter::EngineIter;
pub use ledger::{
    DeleteRequest, Deletion, DeletionKind, DeletionStatus, RequestRecord, RequestStatus,
};
pub use memtable::budget::WriteBudget;
pub use options::{
    Compression, DeleteKeyExtractor, LayoutTuning, Options, RangeDeleteMode, RangeIndexOptions,
    SyncMode, TileLayout, TimeToDeleteKey,
};
pub use snapshot::Snapshot;
pub use sst::{FileMeta, PageSummarizer, PageTaker, RunKey, SummarizedPage, TableProps};
pub use version::VersionEdit;
