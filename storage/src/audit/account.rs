//! Accounting for every byte of every file in an engine's directory. An audit that reads files
//! through their indexes never sees bytes no index references: a region of an SST a time-window
//! drop no longer reads but has not punched yet, a WAL tail past its last whole record, a file
//! no version names. [`crate::Engine::account`] reads every file whole and sorts each byte range into
//! *checked* (referenced by a live structure, and decoded and verified: SST pages and blocks,
//! log records, range-index files, `CURRENT`), *zero* (a punched hole, or never written) or
//! *unaccounted* (anything else, reported with its offset), so an audit can fail on stale bytes
//! whatever holds them.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;

use crate::error::IoContext;
use crate::log::{read_records, OnBad};
use crate::sst::Table;
use crate::Result;

/// How one file's bytes are accounted for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileAccount {
    /// File name (relative to the directory accounted).
    pub name: String,
    /// What the file is: `sst`, `range index`, `wal`, `manifest`, `ledger`, `current`, `lock`,
    /// `temporary`, `unknown`.
    pub kind: &'static str,
    /// File length.
    pub bytes: u64,
    /// Bytes referenced by a live structure, decoded and verified.
    pub checked: u64,
    /// Bytes that read as zero (punched holes, unwritten space).
    pub zero: u64,
    /// `(offset, len)` of every other run of bytes.
    pub unaccounted: Vec<(u64, u64)>,
}

impl FileAccount {
    pub(crate) fn new(name: &str, kind: &'static str, bytes: u64) -> FileAccount {
        FileAccount {
            name: name.to_string(),
            kind,
            bytes,
            checked: 0,
            zero: 0,
            unaccounted: vec![],
        }
    }

    /// Bytes neither checked nor zero.
    pub fn unaccounted_bytes(&self) -> u64 {
        self.unaccounted.iter().map(|(_, l)| l).sum()
    }
}

/// Sorts the bytes of `regions` of `path` into zero and unaccounted runs.
pub(crate) fn account_unreferenced(
    path: &Path,
    regions: &[(u64, u64)],
    acc: &mut FileAccount,
) -> Result<()> {
    if regions.is_empty() {
        return Ok(());
    }
    let mut f = std::fs::File::open(path).at(path)?;
    let mut buf = vec![0u8; 64 << 10];
    for &(off, len) in regions {
        f.seek(SeekFrom::Start(off)).at(path)?;
        let mut at = off;
        let end = off + len;
        let mut run: Option<u64> = None; // start of the current non-zero run
        while at < end {
            let want = ((end - at) as usize).min(buf.len());
            let n = f.read(&mut buf[..want]).at(path)?;
            if n == 0 {
                break; // the file shrank since it was measured
            }
            for (i, b) in buf[..n].iter().enumerate() {
                let pos = at + i as u64;
                match (run, *b == 0) {
                    (None, false) => run = Some(pos),
                    (Some(s), true) => {
                        acc.unaccounted.push((s, pos - s));
                        run = None;
                    }
                    _ => {}
                }
            }
            at += n as u64;
        }
        if let Some(s) = run {
            acc.unaccounted.push((s, at - s));
        }
        let nonzero: u64 =
            acc.unaccounted.iter().filter(|(o, _)| *o >= off && *o < end).map(|(_, l)| l).sum();
        acc.zero += (at - off) - nonzero;
    }
    Ok(())
}

/// Accounts an SST that `table` reads: its referenced regions are checked (each page read and
/// verified; blocks and footer were verified when it opened), the rest must be zero.
pub(crate) fn account_table(table: &Table, name: &str, len: u64) -> Result<FileAccount> {
    let mut acc = FileAccount::new(name, "sst", len);
    for i in 0..table.index().pages.len() {
        table.load_page(i, false)?;
    }
    let regions = table.referenced_regions();
    acc.checked = regions.iter().map(|(_, l)| l).sum();
    let unread = crate::kiwi::punch::gaps(&regions, len);
    account_unreferenced(table.path(), &unread, &mut acc)?;
    Ok(acc)
}

/// Accounts an SST file no engine has open (a snapshot's): opened, then as [`account_table`].
pub fn account_sst_file(path: &Path) -> Result<FileAccount> {
    let cache = Arc::new(crate::cache::PageCache::new(0));
    let table = Table::open_file(path, cache)?;
    let len = std::fs::metadata(path).at(path)?.len();
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    account_table(&table, &name, len)
}

/// Accounts a file of checksummed records (WAL, manifest, ledger, Raft log segment): the whole
/// records from its start are checked, the rest must be zero.
pub fn account_log(path: &Path, kind: &'static str) -> Result<FileAccount> {
    let (_, valid) = read_records(path, OnBad::EndsLog)?;
    account_prefix(path, kind, valid)
}

/// Accounts a file whose first `checked` bytes a caller has read and verified (a log of its own
/// format): the rest must be zero.
pub fn account_prefix(path: &Path, kind: &'static str, checked: u64) -> Result<FileAccount> {
    let len = std::fs::metadata(path).at(path)?.len();
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut acc = FileAccount::new(&name, kind, len);
    acc.checked = checked.min(len);
    account_unreferenced(path, &[(acc.checked, len - acc.checked)], &mut acc)?;
    Ok(acc)
}

/// Accounts a file nothing references: every non-zero byte is unaccounted.
pub fn account_unknown(path: &Path, kind: &'static str) -> Result<FileAccount> {
    let len = std::fs::metadata(path).at(path)?.len();
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut acc = FileAccount::new(&name, kind, len);
    account_unreferenced(path, &[(0, len)], &mut acc)?;
    Ok(acc)
}
