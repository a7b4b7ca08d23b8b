//! GLORAN: one global index of range deletes per engine, so point lookups stay fast however many
//! range deletes there are.
//!
//! A range delete `[lo, hi)` at sequence number `s` deletes every entry `(k, e)` with
//! `lo <= k < hi` and `e < s`; it never enters the memtable or the SSTs as a tombstone. Instead:
//!
//! - the active memtable's `buffer` holds the range deletes written while it is active, as a
//!   key-disjoint skyline (`piece`); it is flushed with the memtable as a DR-tree at index
//!   level 0, so [`crate::Engine::persisted_seq`] covers range deletes exactly as it covers puts;
//! - on disk the **LSM-DRtree** keeps one `drtree` file per level below level 0 (level 0 holds
//!   one per flush), merged level into level by a streaming combine that keeps the skyline
//!   key-disjoint ("max seq wins", one sequence number per snapshot stripe);
//! - `eve` answers most lookups of live entries from memory, without touching the index.
//!
//! A point lookup consults the index only for the newest visible version it found, sources from
//! newest to oldest (memtable buffers, then index levels); the first source with a covering delete
//! visible at the read's snapshot decides. Compaction drops entries covered by range deletes and
//! records how far it applied them; range deletes that can no longer match anything are garbage
//! collected (the GC rule is stated in `engine/ranges.rs`).

pub(crate) mod buffer;
pub(crate) mod drtree;
pub(crate) mod eve;
pub(crate) mod piece;

pub use drtree::{DrMeta, DrProps};
pub use piece::Piece;

/// What one source of range deletes says about an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probe {
    /// A range delete visible to the reader, newer than the entry, covers it.
    Deleted,
    /// The newest visible covering delete is older than the entry (older sources are older
    /// still): the entry is live.
    Live,
    /// This source holds no visible delete covering the key; ask older sources.
    Unknown,
}
