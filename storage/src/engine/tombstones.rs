//! The RocksDB-style baseline for range deletes (`RangeDeleteMode::Tombstones`): fragmented range
//! tombstones in memtables and in every SST, checked by every lookup in every file it touches,
//! applied and carried down by compaction, dropped at the bottommost level.

use super::SuperVersion;
use crate::gloran::piece::{combine, find, Piece, SeqList};
use crate::sst::Table;

/// All covering sequence numbers of `key` in `fragments`, newest first.
pub(crate) fn covering_all(fragments: &[Piece], key: &[u8]) -> SeqList {
    find(fragments, key).map(|p| p.seqs.clone()).unwrap_or_default()
}

/// The tombstones of a compaction's inputs, merged with every sequence number kept.
pub(crate) fn merged_inputs(tables: &[&std::sync::Arc<Table>]) -> Vec<Piece> {
    let lists: Vec<&[Piece]> = tables.iter().map(|t| t.tombstones()).collect();
    combine(&lists, None, 0)
}

/// True if a range tombstone visible at `t` and newer than `seq` covers `key`, looking at every
/// memtable and every file that may hold the key, as RocksDB's lookups do.
pub(crate) fn tombstone_deleted(sv: &SuperVersion, key: &[u8], seq: u64, t: u64) -> bool {
    let mut max = 0u64;
    for m in std::iter::once(&sv.mem).chain(&sv.imms) {
        max = max.max(m.ranges.visible(key, t).unwrap_or(0));
    }
    for table in &sv.version.levels[0] {
        if table.meta().overlaps(Some(key), Some(key)) {
            max = max.max(table.covering_tombstone(key, t).unwrap_or(0));
        }
    }
    for level in 1..sv.version.levels.len() {
        if let Some(table) = sv.version.file_for(level, key) {
            max = max.max(table.covering_tombstone(key, t).unwrap_or(0));
        }
    }
    max > seq
}
