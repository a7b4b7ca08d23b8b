//! Audits of deletes: reading every place the engine keeps entries for values they cover.

use std::sync::{Arc, Weak};

use super::Engine;
use crate::audit::{scan_batches, Coverage, SourceScan};
use crate::error::IoContext;
use crate::memtable::MemCursor;
use crate::sst::{Table, TableCursor};
use crate::{Error, Result};

impl Engine {
    /// What the deletes `ids` (ledger ids) cover together. Fails for an id the ledger does not
    /// hold (never issued here, or forgotten after persistence: see `ledger_retention` and
    /// `ledger_max_persisted`).
    pub fn coverage(&self, ids: &[u64]) -> Result<Coverage> {
        let ledger = self.inner.deletes.ledger.lock();
        let mut deletes = Vec::with_capacity(ids.len());
        for id in ids {
            let d = ledger
                .get(*id)
                .ok_or_else(|| Error::InvalidArgument(format!("no deletion with id {id}")))?;
            deletes.push(d.clone());
        }
        Ok(Coverage::new(&deletes, self.inner.opts.delete_key.clone()))
    }

    /// Scans every memtable, every live SST (and obsolete one still open), and every WAL
    /// segment for values `coverage` covers, reading every version, shadowed or not. One
    /// [`SourceScan`] per place.
    pub fn audit(&self, coverage: &Coverage) -> Result<Vec<SourceScan>> {
        self.audit_listing(coverage, crate::audit::scan::MAX_EXAMPLES)
    }

    /// [`Engine::audit`], listing up to `limit` covered entries per place.
    pub(crate) fn audit_listing(
        &self,
        coverage: &Coverage,
        limit: usize,
    ) -> Result<Vec<SourceScan>> {
        let inner = &self.inner;
        let sv = inner.current();
        let mut out = Vec::new();
        for m in std::iter::once(&sv.mem).chain(&sv.imms) {
            let mut scan = SourceScan::new("memtable", "memtable", m.approximate_bytes() as u64)
                .with_limit(limit);
            crate::audit::scan::scan_cursor(&mut MemCursor::new(m.clone()), coverage, &mut scan)?;
            out.push(scan);
        }
        let retired: Vec<Arc<Table>> =
            inner.files.retired.lock().iter().filter_map(Weak::upgrade).collect();
        let live = sv.version.all_tables().map(|t| ("sst", t));
        for (kind, t) in live.chain(retired.iter().map(|t| ("sst (obsolete, still open)", t))) {
            let name = crate::sst::file_name(t.id());
            let mut scan = SourceScan::new(kind, name, t.meta().size).with_limit(limit);
            let mut cursor = TableCursor::new(t.clone(), false);
            crate::audit::scan::scan_cursor(&mut cursor, coverage, &mut scan)?;
            out.push(scan);
        }
        let mut wals: Vec<_> = std::fs::read_dir(&inner.dir)
            .at(&inner.dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "wal"))
            .collect();
        wals.sort();
        let newest = wals.last().cloned();
        for path in wals {
            let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            let mut scan =
                SourceScan::new("wal", name.unwrap_or_default(), bytes).with_limit(limit);
            let batches = match crate::wal::replay(&path, Some(&path) == newest.as_ref()) {
                Ok(b) => b,
                Err(e) if is_not_found(&e) => continue, // removed since listed
                Err(e) => return Err(e),
            };
            scan_batches(batches.iter().map(|(s, b)| (*s, b)), coverage, &mut scan);
            out.push(scan);
        }
        Ok(out)
    }
}

fn is_not_found(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
}
