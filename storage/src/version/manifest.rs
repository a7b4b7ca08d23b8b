//! The manifest: a log of version edits, made current by the `CURRENT` file.
//!
//! A commit appends one checksummed record and fsyncs it; the fsync is the commit point. On open
//! the manifest is replayed (ignoring a torn tail) and rewritten as a single snapshot record into a
//! new file, which `CURRENT` is atomically switched to (write temp, fsync, rename, fsync dir).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::VersionEdit;
use crate::error::IoContext;
use crate::failpoint::{points, FailPoints};
use crate::fs::{manifest_name, sync_dir};
use crate::gloran::DrMeta;
use crate::log::{read_records, RecordWriter};
use crate::sst::FileMeta;
use crate::{Error, Result};

/// State rebuilt from a manifest.
#[derive(Debug, Default)]
pub(crate) struct RecoveredManifest {
    pub number: u64,
    pub files: BTreeMap<u64, (u32, FileMeta)>,
    pub rd_files: BTreeMap<u64, (u32, DrMeta)>,
    pub next_file_id: u64,
    pub persisted_seq: u64,
    pub log_number: u64,
    pub retention: BTreeMap<Vec<u8>, u64>,
    pub range_delete_mode: Option<crate::RangeDeleteMode>,
}

impl RecoveredManifest {
    fn apply(&mut self, edit: VersionEdit, path: &Path, offset: u64) -> Result<()> {
        for (level, id) in edit.deleted {
            match self.files.remove(&id) {
                Some((l, _)) if l == level => {}
                _ => {
                    return Err(Error::corruption(
                        path,
                        offset,
                        format!("edit deletes file {id} at level {level}, which is not live"),
                    ))
                }
            }
        }
        for (level, meta) in edit.added {
            if self.files.insert(meta.id, (level, meta)).is_some() {
                return Err(Error::corruption(path, offset, "edit adds a file twice"));
            }
        }
        for (level, id) in edit.rd_deleted {
            match self.rd_files.remove(&id) {
                Some((l, _)) if l == level => {}
                _ => {
                    return Err(Error::corruption(
                        path,
                        offset,
                        format!("edit deletes range-index file {id}, which is not live"),
                    ))
                }
            }
        }
        for (level, meta) in edit.rd_added {
            if self.rd_files.insert(meta.id, (level, meta)).is_some() {
                return Err(Error::corruption(path, offset, "edit adds a range-index file twice"));
            }
        }
        if let Some(n) = edit.next_file_id {
            self.next_file_id = self.next_file_id.max(n);
        }
        if let Some(s) = edit.persisted_seq {
            self.persisted_seq = self.persisted_seq.max(s);
        }
        if let Some(l) = edit.log_number {
            self.log_number = self.log_number.max(l);
        }
        apply_retention(&mut self.retention, edit.retention);
        if edit.range_delete_mode.is_some() {
            self.range_delete_mode = edit.range_delete_mode;
        }
        Ok(())
    }

    /// The whole state as one edit (the first record of a fresh manifest).
    pub fn snapshot_edit(&self) -> VersionEdit {
        VersionEdit {
            added: self.files.values().cloned().collect(),
            deleted: Vec::new(),
            rd_added: self.rd_files.values().cloned().collect(),
            rd_deleted: Vec::new(),
            next_file_id: Some(self.next_file_id),
            persisted_seq: Some(self.persisted_seq),
            log_number: Some(self.log_number),
            retention: self.retention.iter().map(|(p, ms)| (p.clone(), Some(*ms))).collect(),
            range_delete_mode: self.range_delete_mode,
        }
    }
}

/// Applies retention changes of an edit to the rule set.
pub(crate) fn apply_retention(
    rules: &mut BTreeMap<Vec<u8>, u64>,
    changes: Vec<(Vec<u8>, Option<u64>)>,
) {
    for (prefix, ms) in changes {
        match ms {
            Some(ms) => rules.insert(prefix, ms),
            None => rules.remove(&prefix),
        };
    }
}

/// An open manifest file accepting commits.
#[derive(Debug)]
pub(crate) struct Manifest {
    writer: RecordWriter,
    fail: FailPoints,
    /// An fsync failed: whether the last records are durable is unknown.
    sync_failed: bool,
}

/// The manifest format this build reads and writes (`CURRENT` names it after the file name when
/// it is not 1).
const MANIFEST_FORMAT: u32 = 1;

impl Manifest {
    /// Reads the manifest named by `CURRENT`. `None` if the directory has no `CURRENT`.
    pub fn recover(dir: &Path) -> Result<Option<RecoveredManifest>> {
        let current = dir.join("CURRENT");
        let name = match std::fs::read_to_string(&current) {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(&current, e)),
        };
        let name = name.strip_suffix('\n').unwrap_or(&name);
        // `MANIFEST-n` is format 1; a later format is written `MANIFEST-n vN`.
        let (name, format) = match name.split_once(" v") {
            Some((n, v)) => (n, v.parse::<u32>().ok()),
            None => (name, Some(MANIFEST_FORMAT)),
        };
        match format {
            Some(MANIFEST_FORMAT) => {}
            Some(found) => {
                let ours = MANIFEST_FORMAT..=MANIFEST_FORMAT;
                return Err(Error::unsupported_format(&current, "manifest", found, ours));
            }
            None => return Err(Error::corruption(&current, 0, "CURRENT does not name a manifest")),
        }
        let number = name
            .strip_prefix("MANIFEST-")
            .and_then(|n| n.parse::<u64>().ok())
            .filter(|_| !name.contains('/'))
            .ok_or_else(|| Error::corruption(&current, 0, "CURRENT does not name a manifest"))?;
        let path = dir.join(manifest_name(number));
        if !path.exists() {
            return Err(Error::corruption(
                &current,
                0,
                format!("{name} named by CURRENT is missing"),
            ));
        }
        let (records, _) = read_records(&path, crate::log::OnBad::Refuse)?;
        if records.is_empty() {
            return Err(Error::corruption(&path, 0, "manifest has no complete record"));
        }
        let mut state = RecoveredManifest { number, ..Default::default() };
        for rec in records {
            let edit = VersionEdit::decode(&rec.payload)
                .map_err(|e| Error::corruption(&path, rec.offset, format!("version edit {e}")))?;
            state.apply(edit, &path, rec.offset)?;
        }
        Ok(Some(state))
    }

    /// Creates manifest `number` holding `snapshot`, and makes it current.
    pub fn create(
        dir: &Path,
        number: u64,
        snapshot: &VersionEdit,
        fail: FailPoints,
    ) -> Result<Self> {
        let path = dir.join(manifest_name(number));
        let mut writer = RecordWriter::create(&path)?;
        writer.append(&snapshot.encode())?;
        writer.sync()?;
        // Its entry is durable before `CURRENT` names it.
        sync_dir(dir)?;
        set_current(dir, number)?;
        Ok(Manifest { writer, fail, sync_failed: false })
    }

    /// True if `CURRENT` in `dir` names manifest `number`.
    pub fn is_current(dir: &Path, number: u64) -> bool {
        std::fs::read_to_string(dir.join("CURRENT"))
            .is_ok_and(|s| s.trim_end() == manifest_name(number))
    }

    /// Bytes written to this manifest.
    pub fn size(&self) -> u64 {
        self.writer.len()
    }

    /// Durably appends `edit`. An error here must poison the engine: the edit may or may not
    /// survive a crash.
    pub fn commit(&mut self, edit: &VersionEdit) -> Result<()> {
        let payload = edit.encode();
        if self.fail.fires(points::MANIFEST_TORN_WRITE) {
            self.writer.append_torn(&payload)?;
            return Err(Error::Injected(points::MANIFEST_TORN_WRITE));
        }
        self.writer.append(&payload)?;
        let synced = self.writer.sync();
        self.sync_failed |= synced.is_err();
        synced
    }

    /// True if every commit either succeeded or left the manifest as it was before it (a write
    /// that failed on a full disk and was cut back off): commits may go on.
    pub fn is_intact(&self) -> bool {
        !self.sync_failed && !self.writer.is_broken()
    }

    /// Path of the manifest file.
    pub fn path(&self) -> PathBuf {
        self.writer.path().to_path_buf()
    }
}

/// Atomically points `CURRENT` at manifest `number`.
fn set_current(dir: &Path, number: u64) -> Result<()> {
    let tmp = dir.join("CURRENT.tmp");
    let content = format!("{}\n", manifest_name(number));
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp).at(&tmp)?;
        f.write_all(content.as_bytes()).at(&tmp)?;
        crate::fs::sync_file(&f, &tmp)?;
    }
    let current = dir.join("CURRENT");
    std::fs::rename(&tmp, &current).at(&current)?;
    sync_dir(dir)
}
