//! File naming and directory helpers.

use std::path::Path;

use crate::error::IoContext;
use crate::Result;

/// Kinds of files in an engine directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileKind {
    /// `{n:08}.sst`
    Table(u64),
    /// `{n:08}.wal`
    Wal(u64),
    /// `{n:08}.rdi` (a DR-tree of the range-delete index)
    RangeIndex(u64),
    /// `MANIFEST-{n:08}`
    Manifest(u64),
    /// `{n:08}.ledger` (the deletion ledger)
    Ledger(u64),
    /// `*.tmp`
    Temp,
}

/// Name of manifest `n`.
pub(crate) fn manifest_name(n: u64) -> String {
    format!("MANIFEST-{n:08}")
}

/// Name of WAL file `n`.
pub(crate) fn wal_name(n: u64) -> String {
    format!("{n:08}.wal")
}

/// Classifies a file name; `None` for files the engine does not own (left alone).
pub(crate) fn parse_name(name: &str) -> Option<FileKind> {
    if name.ends_with(".tmp") {
        return Some(FileKind::Temp);
    }
    if let Some(n) = name.strip_prefix("MANIFEST-") {
        return n.parse().ok().map(FileKind::Manifest);
    }
    let (stem, ext) = name.split_once('.')?;
    if stem.len() < 8 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n = stem.parse().ok()?;
    match ext {
        "sst" => Some(FileKind::Table(n)),
        "wal" => Some(FileKind::Wal(n)),
        "rdi" => Some(FileKind::RangeIndex(n)),
        "ledger" => Some(FileKind::Ledger(n)),
        _ => None,
    }
}

/// Fsyncs a directory so created, renamed and removed entries are durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    crate::durable::sync_dir(dir)
}

/// Fsyncs a file's data and metadata.
pub(crate) fn sync_file(file: &std::fs::File, path: &Path) -> Result<()> {
    crate::durable::sync_file(file, path)
}

/// Fsyncs a file's data (and the metadata needed to read it back, such as its length).
pub(crate) fn sync_data(file: &std::fs::File, path: &Path) -> Result<()> {
    file.sync_data().at(path)?;
    crate::durable::synced_file(file);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_roundtrip_and_foreign_files_ignored() {
        assert_eq!(parse_name(&crate::sst::file_name(12)), Some(FileKind::Table(12)));
        assert_eq!(parse_name(&wal_name(7)), Some(FileKind::Wal(7)));
        assert_eq!(parse_name(&crate::gloran::drtree::file_name(9)), Some(FileKind::RangeIndex(9)));
        assert_eq!(parse_name(&manifest_name(3)), Some(FileKind::Manifest(3)));
        assert_eq!(parse_name(&crate::ledger::file_name(4)), Some(FileKind::Ledger(4)));
        assert_eq!(parse_name("CURRENT.tmp"), Some(FileKind::Temp));
        for foreign in [".DS_Store", "._00000001.sst", "notes.txt", "LOCK", "CURRENT", "1.sst"] {
            assert_eq!(parse_name(foreign), None, "{foreign}");
        }
    }
}
