//! Version edits: the atomic unit of change to the set of live files.

use serde::{Deserialize, Serialize};

use crate::gloran::DrMeta;
use crate::sst::FileMeta;
use crate::RangeDeleteMode;

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
    /// The range-delete mode the engine was created with.
    pub range_delete_mode: Option<RangeDeleteMode>,
}

impl VersionEdit {
    /// Encodes the edit as a manifest payload.
    pub(crate) fn encode(&self) -> Vec<u8> {
        // Serialising plain data structures into a Vec cannot fail.
        postcard::to_stdvec(self).unwrap_or_default()
    }

    /// Decodes a manifest payload; an edit with fields this build does not know is refused.
    pub(crate) fn decode(buf: &[u8]) -> Result<Self, crate::ExactDecodeError> {
        crate::decode_exact(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Manifests written when the mode was recorded as a byte (0 GLORAN, 1 tombstones) read as
    /// the same modes, and are written the same way.
    #[test]
    fn range_delete_mode_keeps_its_encoding() {
        #[derive(Serialize)]
        struct Old {
            added: Vec<(u32, FileMeta)>,
            deleted: Vec<(u32, u64)>,
            rd_added: Vec<(u32, DrMeta)>,
            rd_deleted: Vec<(u32, u64)>,
            next_file_id: Option<u64>,
            persisted_seq: Option<u64>,
            log_number: Option<u64>,
            retention: Vec<(Vec<u8>, Option<u64>)>,
            range_delete_mode: Option<u8>,
        }
        let modes = [
            (None, None),
            (Some(0), Some(RangeDeleteMode::Gloran)),
            (Some(1), Some(RangeDeleteMode::Tombstones)),
        ];
        for (code, mode) in modes {
            let old = Old {
                added: Vec::new(),
                deleted: vec![(1, 7)],
                rd_added: Vec::new(),
                rd_deleted: Vec::new(),
                next_file_id: Some(9),
                persisted_seq: Some(3),
                log_number: None,
                retention: vec![(b"t".to_vec(), Some(5))],
                range_delete_mode: code,
            };
            let bytes = postcard::to_stdvec(&old).expect("encode");
            let edit = VersionEdit::decode(&bytes).expect("decodes");
            assert_eq!(edit.range_delete_mode, mode);
            assert_eq!(edit.encode(), bytes, "{mode:?}");
        }
    }

    /// An edit with bytes after it (fields a newer build appended) is refused, not truncated.
    #[test]
    fn fields_of_a_newer_build_are_refused() {
        let edit = VersionEdit { next_file_id: Some(4), ..VersionEdit::default() };
        let mut bytes = edit.encode();
        assert_eq!(VersionEdit::decode(&bytes).expect("decodes"), edit);
        bytes.push(1);
        let err = VersionEdit::decode(&bytes).unwrap_err();
        assert!(matches!(err, crate::ExactDecodeError::Trailing(1)), "{err}");
        assert!(err.to_string().contains("a newer build wrote it"), "{err}");
    }
}
