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
use crate::error::ReplicaError;

/// The files of `dir` (none if it was removed meanwhile: a snapshot pruned, an engine retired).
fn files(dir: &Path) -> Result<Vec<std::path::PathBuf>, ReplicaError> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(ReplicaError::io(dir)(e)),
    };
    let mut out: Vec<_> =
        rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_file()).collect();
    out.sort();
    Ok(out)
}

/// `account(path)`, or nothing if the file was removed meanwhile.
fn each(
    paths: Vec<std::path::PathBuf>,
    account: impl Fn(&Path) -> Result<FileAccount, ReplicaError>,
) -> Result<Vec<FileAccount>, ReplicaError> {
    let mut out = Vec::new();
    for path in paths {
        match account(&path) {
            Ok(a) => out.push(a),
            Err(_) if !path.exists() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

fn name_of(p: &Path) -> String {
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// A whole file checked.
fn whole(path: &Path, kind: &'static str) -> Result<FileAccount, ReplicaError> {
    let len = std::fs::metadata(path).map_err(ReplicaError::io(path))?.len();
    Ok(account_prefix(path, kind, len)?)
}

impl Replica {
    /// Accounts for the replica's files outside its current engine directory and its Raft log:
    /// one list per directory, named relative to the replica's root.
    pub fn account_other_files(&self) -> Result<Vec<(String, Vec<FileAccount>)>, ReplicaError> {
        let mut out = Vec::new();
        let top = each(files(&self.root)?, |path| {
            if name_of(path) == "ENGINE"
                && std::fs::read_to_string(path).is_ok_and(|s| s.trim().parse::<u64>().is_ok())
            {
                whole(path, "engine generation")
            } else {
                Ok(account_unknown(path, "unknown")?)
            }
        })?;
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
/// checked whole; so are the descriptor and the watermark when they decode. A snapshot without
/// a descriptor yet (being built or received) is accounted like an engine directory.
fn account_snapshot(dir: &Path) -> Result<Vec<FileAccount>, ReplicaError> {
    let Ok(descriptor) = ShardSnapshot::at(dir).descriptor() else {
        return account_closed_engine(dir);
    };
    each(files(dir)?, |path| {
        let name = name_of(path);
        let listed = descriptor.files.iter().find(|f| f.name == name);
        match listed {
            Some(f) if checksum(path).is_ok_and(|(len, crc)| len == f.len && crc == f.crc32) => {
                whole(path, "snapshot file")
            }
            _ if name == DESCRIPTOR => whole(path, "snapshot descriptor"),
            _ if name == WATERMARK_FILE => whole(path, "snapshot watermark"),
            _ => Ok(account_unknown(path, "snapshot file (unverified)")?),
        }
    })
}

/// An engine directory no engine of this replica uses (a replaced one readers still hold, or a
/// snapshot without a descriptor): its SSTs as read through their own indexes, its logs record
/// by record, `CURRENT` when it names a manifest there; the rest (a file cut short, a range
/// index no manifest here is read for) unaccounted.
fn account_closed_engine(dir: &Path) -> Result<Vec<FileAccount>, ReplicaError> {
    each(files(dir)?, |path| {
        let name = name_of(path);
        let acc = if name.ends_with(".sst") {
            account_sst_file(path).or_else(|_| account_unknown(path, "sst (unreadable)"))?
        } else if name.ends_with(".wal")
            || name.ends_with(".ledger")
            || name.starts_with("MANIFEST-")
        {
            account_log(path, "log")?
        } else if name == "CURRENT"
            && std::fs::read_to_string(path).is_ok_and(|m| dir.join(m.trim_end()).is_file())
        {
            let len = std::fs::metadata(path).map_err(ReplicaError::io(path))?.len();
            account_prefix(path, "current", len)?
        } else {
            account_unknown(path, "unverified engine file")?
        };
        Ok(acc)
    })
}
