//! Cursors over internal entries and the merged, snapshot-filtered iterator users see.
//!
//! Internal order is key ascending, then sequence number descending, so the first entry of a key
//! is its newest version.

mod level;
mod merge;
mod user;

use bytes::Bytes;

pub(crate) use level::LevelCursor;
pub(crate) use merge::MergeCursor;
pub use user::EngineIter;

use crate::batch::EntryKind;
use crate::Result;

/// A cursor over internal entries in internal order.
pub(crate) trait EntryCursor: Send {
    /// Positions at the first entry whose key is `>= target`.
    fn seek(&mut self, target: &[u8]) -> Result<()>;
    /// Advances to the next entry.
    fn next(&mut self) -> Result<()>;
    /// True while positioned on an entry.
    fn valid(&self) -> bool;
    /// Key of the current entry.
    fn key(&self) -> &[u8];
    /// Sequence number of the current entry.
    fn seq(&self) -> u64;
    /// Kind of the current entry.
    fn kind(&self) -> EntryKind;
    /// Value of the current entry (empty for tombstones).
    fn value(&self) -> Bytes;
    /// Value of the current entry, borrowed until the cursor moves.
    fn value_ref(&self) -> &[u8];
    /// Key of the current entry as shared bytes.
    fn key_bytes(&self) -> Bytes {
        Bytes::copy_from_slice(self.key())
    }
}

/// Compares two internal entries: key ascending, then sequence number descending.
#[inline]
pub(crate) fn internal_cmp(ak: &[u8], aseq: u64, bk: &[u8], bseq: u64) -> std::cmp::Ordering {
    ak.cmp(bk).then(bseq.cmp(&aseq))
}
