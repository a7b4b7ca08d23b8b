//! Version edits: the atomic unit of change to the set of live files.

use serde::{Deserialize, Serialize};

use crate::gloran::DrMeta;
use crate::sst::FileMeta;

/// One manifest record. The first record of a manifest lists every live file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionEdit {
    /// Files added, with their level.
    pub added: Vec<(u32, FileMeta)>,
    /// Files removed: (level, file id).
    pub deleted: Vec<(u32, u64)>,
    /// Range-index (DR-tree) files added, with their index level.
    pub rd_added: Vec<(u32, DrMeta)>,
    /// Range-index files removed: (index level, file id).
    pub rd_deleted: Vec<(u32, u64)>,
    /// Next unused file number.
    pub next_file_id: Option<u64>,
    /// Highest sequence number whose effects are all in SSTs.
    pub persisted_seq: Option<u64>,
    /// WAL files numbered below this are no longer needed.
    pub log_number: Option<u64>,
    /// Retention rules set (`Some(ms)`) or removed (`None`), per key prefix.
    pub retention: Vec<(Vec<u8>, Option<u64>)>,
    /// The range-delete mode the engine was created with (0 GLORAN, 1 tombstones).
    pub range_delete_mode: Option<u8>,
}

impl VersionEdit {
    /// Encodes the edit as a manifest payload.
    pub(crate) fn encode(&self) -> Vec<u8> {
        // Serialising plain data structures into a Vec cannot fail.
        postcard::to_stdvec(self).unwrap_or_default()
    }

    /// Decodes a manifest payload.
    pub(crate) fn decode(buf: &[u8]) -> Option<Self> {
        postcard::from_bytes(buf).ok()
    }
}
