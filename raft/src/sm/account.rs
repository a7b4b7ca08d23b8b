//! Every byte of every file of a replica besides its current engine and its Raft log (which
//! account for themselves): the generation file, snapshots stored or being received (each file
//! checked whole against its descriptor's length and CRC-32), and engine directories a snapshot
//! install replaced that readers still hold (their SSTs and logs checked as files of their own).
//! Anything else is unaccounted (see [`ebb_storage::audit::FileAccount`]).

use std::path::Path;

use ebb_storage::audit::{
    account_log, account_prefix, account_sst_file, account_unknown, FileAccount,
};

use super::erasure::{subdirs, WATERMARK_FILE};
use super::replica::engine_dir_name;
use super::snapshot::{checksum, ShardSnapshot, DESCRIPTOR};
use super::Replica;
use crate::error::ShardError;

fn files(dir: &Path) -> Result<Vec<std::path::PathBuf>, ShardError> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .map_err(ShardError::io(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    out.sort();
    Ok(out)
}

fn name_of(p: &Path) -> String {
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// A whole file checked.
fn whole(path: &Path, kind: &'static str) -> Result<FileAccount, ShardError> {
    let len = std::fs::metadata(path).map_err(ShardError::io(path))?.len();
    Ok(account_prefix(path, kind, len)?)
}

impl Replica {
    /// Accounts for the replica's files outside its current engine directory and its Raft log:
    /// one list per directory, named relative to the replica's root.
    pub fn account_other_files(&self) -> Result<Vec<(String, Vec<FileAccount>)>, ShardError> {
        let mut out = Vec::new();
        let mut top = Vec::new();
        for path in files(&self.root)? {
            let acc = if name_of(&path) == "ENGINE"
                && std::fs::read_to_string(&path).is_ok_and(|s| s.trim().parse::<u64>().is_ok())
            {
                whole(&path, "engine generation")?
            } else {
                account_unknown(&path, "unknown")?
            };
            top.push(acc);
        }
        out.push((String::new(), top));
        for parent in ["snapshots", "incoming"] {
            for dir in subdirs(&self.root.join(parent)) {
                let rel = format!("{parent}/{}", name_of(&dir));
                out.push((rel, account_snapshot(&dir)?));
            }
        }
        let current = engine_dir_name(*self.generation.lock());
        for dir in subdirs(&self.root) {
            let name = name_of(&dir);
            if name.starts_with("engine-") && name != current {
                out.push((name, account_closed_engine(&dir)?));
            }
        }
        Ok(out)
    }
}

/// A snapshot directory: every file its descriptor lists, with the listed length and CRC-32, is
/// checked whole; so are the descriptor and the watermark when they decode.
fn account_snapshot(dir: &Path) -> Result<Vec<FileAccount>, ShardError> {
    let descriptor = ShardSnapshot::at(dir).descriptor().ok();
    let mut out = Vec::new();
    for path in files(dir)? {
        let name = name_of(&path);
        let listed = descriptor.as_ref().and_then(|d| d.files.iter().find(|f| f.name == name));
        let acc = match listed {
            Some(f) if checksum(&path).is_ok_and(|(len, crc)| len == f.len && crc == f.crc32) => {
                whole(&path, "snapshot file")?
            }
            _ if name == DESCRIPTOR && descriptor.is_some() => whole(&path, "snapshot descriptor")?,
            _ if name == WATERMARK_FILE => whole(&path, "snapshot watermark")?,
            _ => account_unknown(&path, "snapshot file (unverified)")?,
        };
        out.push(acc);
    }
    Ok(out)
}

/// An engine directory no engine of this replica uses any more (readers still hold it): its
/// SSTs as read through their own indexes, its logs record by record; the rest unaccounted.
fn account_closed_engine(dir: &Path) -> Result<Vec<FileAccount>, ShardError> {
    let mut out = Vec::new();
    for path in files(dir)? {
        let name = name_of(&path);
        let acc = if name.ends_with(".sst") {
            account_sst_file(&path)?
        } else if name.ends_with(".wal")
            || name.ends_with(".ledger")
            || name.starts_with("MANIFEST-")
        {
            account_log(&path, "log")?
        } else {
            account_unknown(&path, "replaced engine file")?
        };
        out.push(acc);
    }
    Ok(out)
}
