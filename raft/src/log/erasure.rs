//! What deletes need of the log: knowing which entries are still on disk, ending the newest
//! segment so a purge can remove it whole, and auditing segments for values deletes cover.

use ebb_storage::audit::{scan_batches, Coverage, SourceScan};
use ebb_storage::WriteBatch;
use openraft::EntryPayload;

use super::{decode, LogStore};
use crate::error::LogError;
use crate::sm::applied::entry_seq;
use crate::types::Command;

impl LogStore {
    /// Index of the oldest entry still stored in a segment file (purged or not); every entry
    /// below it is physically gone. With no entry stored, the index the next one gets.
    pub fn first_stored(&self) -> u64 {
        let st = self.shared.state.lock();
        if let Some(s) = st.segments.iter().find(|s| s.count() > 0) {
            return s.first;
        }
        let after_purged = st.meta.purged.map_or(1, |p| p.index + 1);
        st.last.map_or(after_purged, |l| l.index + 1).max(after_purged)
    }

    /// Index of the newest entry, if any.
    pub fn last_index(&self) -> Option<u64> {
        self.shared.state.lock().last.map(|l| l.index)
    }

    /// Makes the next append start a new segment, so a purge up to the current last entry can
    /// remove every segment holding entries up to it.
    pub fn rotate(&self) {
        self.shared.state.lock().rotate_next = true;
    }

    /// Reads every stored entry (purged ones still in a segment file included) and checks the
    /// write batches they carry against `coverage`: one scan per segment file.
    pub fn audit(&self, coverage: &Coverage) -> Result<Vec<SourceScan>, LogError> {
        let st = self.shared.state.lock();
        let mut out = Vec::with_capacity(st.segments.len());
        for seg in &st.segments {
            let name = seg.path.file_name().map(|n| n.to_string_lossy().into_owned());
            let mut scan = SourceScan::new("raft log", name.unwrap_or_default(), seg.bytes());
            for index in seg.first..seg.next_index() {
                let entry = decode(&seg.read(index)?)?;
                let EntryPayload::Normal(Command::Batch(bytes)) = &entry.payload else {
                    scan.entries += 1;
                    continue;
                };
                let Some(batch) = WriteBatch::from_bytes(bytes) else {
                    scan.entries += 1;
                    continue; // applied as a no-op everywhere; holds nothing readable
                };
                let seq = entry_seq(index).map_err(|e| LogError::Corrupt(e.to_string()))?;
                scan_batches([(seq, &batch)], coverage, &mut scan);
            }
            out.push(scan);
        }
        Ok(out)
    }
}
