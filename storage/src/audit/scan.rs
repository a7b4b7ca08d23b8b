//! Scanning places that hold entries for values a [`Coverage`] covers.

use std::path::Path;
use std::sync::Arc;

use super::Coverage;
use crate::batch::{BatchOp, EntryKind, WriteBatch};
use crate::cache::PageCache;
use crate::error::IoContext;
use crate::iter::EntryCursor;
use crate::sst::{Table, TableCursor};
use crate::Result;

/// How many covered entries a scan lists by default (it counts them all).
pub const MAX_EXAMPLES: usize = 20;

/// A covered value still stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Its key.
    pub key: Vec<u8>,
    /// Its sequence number (below the covering delete's).
    pub seq: u64,
}

/// What scanning one place found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceScan {
    /// What kind of place: `memtable`, `sst`, `wal`, `raft log`, `snapshot sst`.
    pub kind: String,
    /// Which one (a file name or path).
    pub name: String,
    /// Bytes the place holds (file size; memory for a memtable).
    pub bytes: u64,
    /// Entries read.
    pub entries: u64,
    /// Covered values found.
    pub found: u64,
    /// The first of them.
    pub examples: Vec<Finding>,
    /// How many to list.
    limit: usize,
}

impl SourceScan {
    /// An empty scan of `name`.
    pub fn new(kind: &str, name: impl Into<String>, bytes: u64) -> SourceScan {
        SourceScan {
            kind: kind.to_string(),
            name: name.into(),
            bytes,
            entries: 0,
            found: 0,
            examples: Vec::new(),
            limit: MAX_EXAMPLES,
        }
    }

    /// Lists up to `limit` covered entries (instead of [`MAX_EXAMPLES`]).
    pub fn with_limit(mut self, limit: usize) -> SourceScan {
        self.limit = limit;
        self
    }

    /// Counts one entry read, and checks it.
    pub fn check(&mut self, coverage: &Coverage, key: &[u8], seq: u64, kind: EntryKind) {
        self.entries += 1;
        if kind == EntryKind::Put && coverage.covers(key, seq) {
            self.found += 1;
            if self.examples.len() < self.limit {
                self.examples.push(Finding { key: key.to_vec(), seq });
            }
        }
    }
}

/// Reads, in every key range of `coverage`, every version `cursor` holds (shadowed or not).
pub(crate) fn scan_cursor(
    cursor: &mut dyn EntryCursor,
    coverage: &Coverage,
    out: &mut SourceScan,
) -> Result<()> {
    let mut done_to: Option<Vec<u8>> = None;
    for (lo, hi) in coverage.key_ranges() {
        // Ranges may overlap: start where the last one stopped if that is further.
        let start = match &done_to {
            Some(d) if d.as_slice() > lo => d.clone(),
            _ => lo.to_vec(),
        };
        if hi.is_some_and(|h| start.as_slice() >= h) {
            continue;
        }
        cursor.seek(&start)?;
        while cursor.valid() && hi.is_none_or(|h| cursor.key() < h) {
            out.check(coverage, cursor.key(), cursor.seq(), cursor.kind());
            cursor.next()?;
        }
        done_to = match hi {
            None => return Ok(()),
            Some(h) => Some(h.to_vec()),
        };
    }
    Ok(())
}

/// Scans the SST file at `path` (opened on its own, as a snapshot's files are) under `kind`.
pub fn scan_sst_file(path: &Path, kind: &str, coverage: &Coverage) -> Result<SourceScan> {
    let table = Arc::new(Table::open_file(path, Arc::new(PageCache::new(0)))?);
    let mut out = SourceScan::new(kind, path.display().to_string(), table.meta().size);
    scan_cursor(&mut TableCursor::new(table, false), coverage, &mut out)?;
    Ok(out)
}

/// Checks every put of `batches` (each with its first sequence number) against `coverage`.
pub fn scan_batches<'a>(
    batches: impl IntoIterator<Item = (u64, &'a WriteBatch)>,
    coverage: &Coverage,
    out: &mut SourceScan,
) {
    for (seq, batch) in batches {
        for (i, op) in batch.ops().iter().enumerate() {
            let s = seq + i as u64;
            match op {
                BatchOp::Put { key, .. } => out.check(coverage, key, s, EntryKind::Put),
                BatchOp::Delete { key } => out.check(coverage, key, s, EntryKind::Delete),
                _ => out.entries += 1,
            }
        }
    }
}

/// The bytes of the file at `path`, followed, for an SST, by every entry of its pages
/// decompressed (`key value` pairs as stored), so a search for a value in the result finds it
/// whether or not the page holding it was compressed.
pub fn plaintext(path: &Path) -> Result<Vec<u8>> {
    let mut out = std::fs::read(path).at(path)?;
    if path.extension().is_some_and(|e| e == "sst") {
        let table = Arc::new(Table::open_file(path, Arc::new(PageCache::new(0)))?);
        let mut c = TableCursor::new(table, false);
        c.seek_to_first()?;
        while c.valid() {
            out.extend_from_slice(c.key());
            out.push(b' ');
            out.extend_from_slice(c.value_ref());
            out.push(b'\n');
            c.next()?;
        }
    }
    Ok(out)
}
