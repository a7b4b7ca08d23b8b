//! Consistent copies of the engine (Raft snapshots are made of them).

use std::path::Path;

use super::Inner;
use crate::error::IoContext;
use crate::fs::sync_dir;
use crate::version::Manifest;
use crate::{Error, Result};

impl Inner {
    /// The bytes of the write-ahead log segments that hold what is not flushed.
    pub(super) fn unflushed_log_bytes(&self) -> Result<u64> {
        let log_number = self.meta.lock().log_number;
        let segments = wal_segments(&self.dir)?.into_iter().filter(|&n| n >= log_number);
        // A segment removed meanwhile holds nothing unflushed.
        let len = |n: u64| {
            std::fs::metadata(self.dir.join(crate::fs::wal_name(n))).map_or(0, |m| m.len())
        };
        Ok(segments.map(len).sum())
    }

    /// Hard-links every live SST and range-index file into `target` and writes a manifest
    /// describing exactly them, and a copy of the deletion ledger.
    pub(super) fn checkpoint(&self, target: &Path) -> Result<u64> {
        refuse_existing(target)?;
        // What the ledger holds as persisted before the files are read: a compaction that
        // commits after the version is read and persists a delete must not make the copy say
        // its data is gone from files the copy still holds.
        let persisted = self.deletes.ledger.lock().persisted_ids();
        let (edit, version, seq) = {
            let meta = self.meta.lock();
            let version = self.current().version.clone();
            let mut edit = self.snapshot_edit(&meta, &version);
            edit.log_number = Some(0);
            (edit, version, meta.persisted_seq)
        };
        let tmp = building(target);
        let _ = std::fs::remove_dir_all(&tmp);
        crate::durable::create_dir_all(&tmp).at(&tmp)?;
        link_files(&version, &tmp)?;
        let number = edit.next_file_id.unwrap_or(1);
        Manifest::create(&tmp, number, &edit, Default::default())?;
        // The deletion ledger, so issue times (and deadlines) survive the copy.
        self.deletes.ledger.lock().write_copy_as_of(&tmp, number, &persisted, seq)?;
        publish(&tmp, target)?;
        drop(version);
        Ok(seq)
    }

    /// A checkpoint that does not wait for a flush: the SSTs hard-linked as
    /// [`Inner::checkpoint`] does, and the write-ahead log segments that hold what the memtables
    /// do, copied up to the end of what was written when it began, with the deletion ledger as
    /// of that moment. Opening the copy replays those segments. Returns the last sequence
    /// number it holds. Needs the engine's own WAL (`Options::wal`).
    pub(super) fn checkpoint_live(&self, target: &Path) -> Result<u64> {
        refuse_existing(target)?;
        let tmp = building(target);
        let _ = std::fs::remove_dir_all(&tmp);
        crate::durable::create_dir_all(&tmp).at(&tmp)?;
        // Where the log ends, and the deletes persisted then: under the writer's lock, so both
        // stop at the same write. (The ledger is copied once the files are known: a delete
        // issued after this point may be in the tables a flush wrote meanwhile.)
        let (pos, last_seq, persisted_ids) = {
            let w = self.writer.lock();
            let Some(wal) = &w.wal else {
                return Err(Error::InvalidArgument(
                    "a checkpoint without a flush needs the engine's write-ahead log".into(),
                ));
            };
            (wal.pos(), w.last_seq, self.deletes.ledger.lock().persisted_ids())
        };
        // The segments up to that one, before the manifest is read: a segment removed
        // before it is linked held only writes a flush had already persisted, so the manifest
        // read after no longer replays it. Older segments are linked (they are complete); the
        // one written to then is copied up to where it ended (a whole record), so nothing
        // appended later comes with it. No lock is held: flushes go on meanwhile.
        let wals: Vec<u64> =
            wal_segments(&self.dir)?.into_iter().filter(|&n| n <= pos.number).collect();
        for &n in &wals {
            let src = self.dir.join(crate::fs::wal_name(n));
            let dst = tmp.join(crate::fs::wal_name(n));
            if n < pos.number && std::fs::hard_link(&src, &dst).is_ok() {
                continue;
            }
            let mut input = match std::fs::File::open(&src) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err::<u64, _>(e).at(&src),
            };
            let mut output = std::fs::File::create(&dst).at(&dst)?;
            let len = if n == pos.number { pos.offset } else { u64::MAX };
            std::io::copy(&mut std::io::Read::take(&mut input, len), &mut output).at(&dst)?;
            crate::fs::sync_file(&output, &dst)?;
        }
        // A flush that committed since the position was read holds writes after it: the copy
        // then holds everything up to what that flush persisted.
        let (edit, version, log_number, persisted) = {
            let meta = self.meta.lock();
            let version = self.current().version.clone();
            let edit = self.snapshot_edit(&meta, &version);
            (edit, version, meta.log_number, meta.persisted_seq)
        };
        for n in wals.into_iter().filter(|&n| n < log_number) {
            let _ = std::fs::remove_file(tmp.join(crate::fs::wal_name(n)));
        }
        link_files(&version, &tmp)?;
        let number = edit.next_file_id.unwrap_or(1);
        Manifest::create(&tmp, number, &edit, Default::default())?;
        // Every delete the copy holds: those up to the log cut, and those a flush since put in
        // the tables it links (up to what the manifest read says is persisted); none persisted
        // after the cut is written as persisted.
        let upto = last_seq.max(persisted);
        self.deletes.ledger.lock().write_copy_as_of(&tmp, number, &persisted_ids, upto)?;
        publish(&tmp, target)?;
        drop(version);
        Ok(upto)
    }
}

/// Where a checkpoint into `target` is built before it is published: `target`'s whole name
/// and `.checkpoint.tmp`. (Replacing an extension instead would give targets that differ only
/// after a dot, such as backup parts `20261201T010654.072Z-1` and `-3`, one directory, and one
/// checkpoint would remove or publish the other's.)
fn building(target: &Path) -> std::path::PathBuf {
    let mut name = target.file_name().map(std::ffi::OsString::from).unwrap_or_default();
    name.push(".checkpoint.tmp");
    target.with_file_name(name)
}

/// The numbers of the write-ahead log segments in `dir`.
fn wal_segments(dir: &Path) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).at(dir)? {
        let e = e.at(dir)?;
        if let Some(crate::fs::FileKind::Wal(n)) =
            e.file_name().to_str().and_then(crate::fs::parse_name)
        {
            out.push(n);
        }
    }
    Ok(out)
}

fn refuse_existing(target: &Path) -> Result<()> {
    if target.exists() {
        return Err(Error::InvalidArgument(format!(
            "checkpoint target {} already exists",
            target.display()
        )));
    }
    Ok(())
}

/// Hard-links (or copies, across file systems) every SST and range-index file of `version`
/// into `tmp`.
fn link_files(version: &crate::version::Version, tmp: &Path) -> Result<()> {
    let tables = version.all_tables().map(|t| (t.path(), crate::sst::file_name(t.id())));
    let trees = version.all_trees().map(|t| (t.path(), crate::gloran::drtree::file_name(t.id())));
    for (src, name) in tables.chain(trees) {
        let dst = tmp.join(&name);
        if std::fs::hard_link(src, &dst).is_err() {
            std::fs::copy(src, &dst).at(&dst)?;
            crate::fs::sync_file(&std::fs::File::open(&dst).at(&dst)?, &dst)?;
        }
    }
    Ok(())
}

/// Makes the finished copy in `tmp` durable as `target`.
fn publish(tmp: &Path, target: &Path) -> Result<()> {
    sync_dir(tmp)?;
    std::fs::rename(tmp, target).at(target)?;
    if let Some(parent) = target.parent() {
        sync_dir(parent)?;
    }
    Ok(())
}
