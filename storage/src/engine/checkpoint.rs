//! Consistent copies of the engine (Raft snapshots are made of them).

use std::path::Path;

use super::Inner;
use crate::error::IoContext;
use crate::fs::sync_dir;
use crate::version::Manifest;
use crate::{Error, Result};

impl Inner {
    /// Hard-links every live SST and range-index file into `target` and writes a manifest
    /// describing exactly them, and a copy of the deletion ledger.
    pub(super) fn checkpoint(&self, target: &Path) -> Result<u64> {
        if target.exists() {
            return Err(Error::InvalidArgument(format!(
                "checkpoint target {} already exists",
                target.display()
            )));
        }
        let (edit, version, seq) = {
            let meta = self.meta.lock();
            let version = self.current().version.clone();
            let mut edit = self.snapshot_edit(&meta, &version);
            edit.log_number = Some(0);
            (edit, version, meta.persisted_seq)
        };
        let tmp = target.with_extension("checkpoint.tmp");
        let _ = std::fs::remove_dir_all(&tmp);
        crate::durable::create_dir_all(&tmp).at(&tmp)?;
        let tables = version.all_tables().map(|t| (t.path(), crate::sst::file_name(t.id())));
        let trees =
            version.all_trees().map(|t| (t.path(), crate::gloran::drtree::file_name(t.id())));
        for (src, name) in tables.chain(trees) {
            let dst = tmp.join(&name);
            if std::fs::hard_link(src, &dst).is_err() {
                std::fs::copy(src, &dst).at(&dst)?;
                crate::fs::sync_file(&std::fs::File::open(&dst).at(&dst)?, &dst)?;
            }
        }
        let number = edit.next_file_id.unwrap_or(1);
        Manifest::create(&tmp, number, &edit, Default::default())?;
        // The deletion ledger, so issue times (and deadlines) survive the copy.
        self.deletes.ledger.lock().write_copy(&tmp, number)?;
        sync_dir(&tmp)?;
        std::fs::rename(&tmp, target).at(target)?;
        if let Some(parent) = target.parent() {
            sync_dir(parent)?;
        }
        drop(version);
        Ok(seq)
    }
}
