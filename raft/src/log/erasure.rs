//! What deletes need of the log: knowing which entries are still on disk, ending the newest
//! segment so a purge can remove it whole, and auditing segments for values deletes cover.

use ebb_storage::audit::{
    account_prefix, account_unknown, scan_batches, Coverage, FileAccount, SourceScan,
};
use ebb_storage::WriteBatch;
use openraft::EntryPayload;

use super::{decode, LogStore};
use crate::error::LogError;
use crate::sm::applied::entry_seq;

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
                let EntryPayload::Normal(cmd) = &entry.payload else {
                    scan.entries += 1;
                    continue;
                };
                let Some(Ok(bytes)) = cmd.batch_bytes() else {
                    scan.entries += 1;
                    continue; // no batch, or one applied as a no-op everywhere
                };
                let batch = match WriteBatch::decode_bytes(&bytes) {
                    Ok(batch) => batch,
                    // A newer build's batch may hold data this build cannot see: not skipped.
                    Err(e) if e.is_newer_format() => {
                        return Err(LogError::Corrupt(format!("entry {index}: {e}")))
                    }
                    Err(_) => {
                        scan.entries += 1;
                        continue; // applied as a no-op everywhere; holds nothing readable
                    }
                };
                let seq = entry_seq(index).map_err(|e| LogError::Corrupt(e.to_string()))?;
                scan_batches([(seq, &batch)], coverage, &mut scan);
            }
            out.push(scan);
        }
        Ok(out)
    }

    /// Accounts for every byte of every file in the log's directory: each segment's records
    /// are read and verified and the rest of the segment must be zero; the log's meta file is
    /// checked when it decodes; any other file is unaccounted (see
    /// [`ebb_storage::audit::FileAccount`]).
    pub fn account(&self) -> Result<Vec<FileAccount>, LogError> {
        let storage = |e: ebb_storage::Error| LogError::Corrupt(e.to_string());
        let mut out = Vec::new();
        let mut known = std::collections::HashSet::new();
        {
            let st = self.shared.state.lock();
            for seg in &st.segments {
                for index in seg.first..seg.next_index() {
                    seg.read(index)?;
                }
                known.insert(seg.path.clone());
                out.push(account_prefix(&seg.path, "raft log", seg.bytes()).map_err(storage)?);
            }
        }
        let dir = self.dir().to_path_buf();
        let mut others: Vec<_> = std::fs::read_dir(&dir)
            .map_err(LogError::io(&dir))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && !known.contains(p))
            .collect();
        others.sort();
        for path in others {
            let meta = path.file_name().is_some_and(|n| n == super::meta::FILE);
            let acc = if meta && super::meta::Meta::load(&dir).is_ok() {
                let len = std::fs::metadata(&path).map_err(LogError::io(&path))?.len();
                account_prefix(&path, "raft log meta", len)
            } else {
                account_unknown(&path, "unknown")
            };
            match acc {
                Ok(a) => out.push(a),
                Err(_) if !path.exists() => {} // a segment purged meanwhile
                Err(e) => return Err(storage(e)),
            }
        }
        Ok(out)
    }
}
