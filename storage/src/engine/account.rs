//! [`Engine::account`]: every byte of every file in the engine's directory accounted for (see
//! [`crate::audit::FileAccount`]).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::Engine;
use crate::audit::account::{account_log, account_table, account_unknown, FileAccount};
use crate::error::IoContext;
use crate::fs::{parse_name, FileKind};
use crate::sst::Table;
use crate::Result;

/// How often [`Engine::account`] looks again at a file that did not add up (one being written
/// or replaced meanwhile).
const RECHECKS: usize = 5;

impl Engine {
    /// Accounts for every byte of every file in the engine's directory (see the module docs).
    /// Files that change while they are read (a flush or compaction installing its output, the
    /// WAL being appended) are looked at again; a file still unaccounted after that is
    /// reported.
    pub fn account(&self) -> Result<Vec<FileAccount>> {
        let dir = self.inner.dir.clone();
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .at(&dir)?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .collect();
        names.sort();
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            let mut acc = None;
            for attempt in 0..=RECHECKS {
                if attempt > 0 {
                    std::thread::sleep(Duration::from_millis(100 << attempt));
                }
                match self.account_file(&dir, &name) {
                    Ok(None) => break, // removed meanwhile
                    Ok(Some(a)) if a.unaccounted.is_empty() => {
                        acc = Some(a);
                        break;
                    }
                    Ok(Some(a)) => acc = Some(a),
                    Err(_) if !dir.join(&name).exists() => {
                        acc = None;
                        break;
                    }
                    Err(e) if attempt == RECHECKS => return Err(e),
                    Err(_) => {}
                }
            }
            out.extend(acc);
        }
        Ok(out)
    }

    /// One file's account; `None` if it no longer exists.
    fn account_file(&self, dir: &Path, name: &str) -> Result<Option<FileAccount>> {
        let path = dir.join(name);
        let len = match std::fs::metadata(&path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(crate::Error::io(&path, e)),
        };
        let inner = &self.inner;
        let acc = match parse_name(name) {
            Some(FileKind::Table(id)) => {
                let sv = inner.current();
                let mut open: HashMap<u64, Arc<Table>> =
                    sv.version.all_tables().map(|t| (t.id(), t.clone())).collect();
                for t in inner.files.retired.lock().iter().filter_map(std::sync::Weak::upgrade) {
                    open.entry(t.id()).or_insert(t);
                }
                match open.get(&id) {
                    Some(t) => account_table(t, name, len)?,
                    None => account_unknown(&path, "sst")?,
                }
            }
            Some(FileKind::RangeIndex(id)) => {
                let sv = inner.current();
                let tree = sv.version.all_trees().find(|t| t.id() == id).cloned();
                match tree {
                    Some(t) => {
                        // Written once and read whole: every byte is a page or the footer.
                        t.pieces()?;
                        let mut acc = FileAccount::new(name, "range index", len);
                        acc.checked = len;
                        acc
                    }
                    None => account_unknown(&path, "range index")?,
                }
            }
            Some(FileKind::Wal(_)) => account_log(&path, "wal")?,
            Some(FileKind::Ledger(_)) => account_log(&path, "ledger")?,
            Some(FileKind::Manifest(n)) if crate::version::Manifest::is_current(dir, n) => {
                account_log(&path, "manifest")?
            }
            Some(FileKind::Manifest(_)) => account_unknown(&path, "manifest (not current)")?,
            Some(FileKind::Temp) => account_unknown(&path, "temporary")?,
            None if name == "CURRENT" => {
                let mut acc = FileAccount::new(name, "current", len);
                let text = std::fs::read_to_string(&path).at(&path)?;
                match parse_name(text.trim_end()) {
                    Some(FileKind::Manifest(_)) if dir.join(text.trim_end()).exists() => {
                        acc.checked = len
                    }
                    _ => acc.unaccounted.push((0, len)),
                }
                acc
            }
            None if name == "LOCK" => account_unknown(&path, "lock")?,
            None => account_unknown(&path, "unknown")?,
        };
        Ok(Some(acc))
    }
}
