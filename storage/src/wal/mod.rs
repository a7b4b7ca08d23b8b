//! The engine-owned write-ahead log (used when the engine runs standalone, off under Raft).
//!
//! One WAL file per memtable; a record is one write batch with its first sequence number. A file
//! is deleted once the memtable it backs is flushed and the manifest has recorded that. When a
//! memtable is sealed its WAL is fsynced, so only the newest WAL can lose a tail in a power cut.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::batch::WriteBatch;
use crate::failpoint::{points, FailPoints};
use crate::log::{read_records, OnBad, RecordWriter};
use crate::{Error, Result};

/// Appends write batches to one WAL file.
#[derive(Debug)]
pub(crate) struct Wal {
    number: u64,
    writer: RecordWriter,
    buf: Vec<u8>,
    fail: FailPoints,
}

/// Where a WAL ends: its number and length. Later positions compare greater.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct WalPos {
    pub number: u64,
    pub offset: u64,
}

impl Wal {
    /// Creates WAL file `number` in `dir`, its directory entry durable.
    pub fn create(dir: &Path, number: u64, fail: FailPoints) -> Result<Self> {
        let path = dir.join(crate::fs::wal_name(number));
        let writer = RecordWriter::create(&path)?;
        if let Err(e) = crate::fs::sync_dir(dir) {
            // Not used: it must not look like the newest WAL to the next open.
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        Ok(Wal { number, writer, buf: Vec::new(), fail })
    }

    /// Appends a batch with its issue time (reaches the OS before returning).
    pub fn append(&mut self, batch: &WriteBatch, seq: u64, issued_at_ms: u64) -> Result<()> {
        self.buf.clear();
        batch.encode(seq, issued_at_ms, &mut self.buf);
        self.writer.append(&self.buf)
    }

    /// True if a failed append could not be undone (the engine must poison itself).
    pub fn is_broken(&self) -> bool {
        self.writer.is_broken()
    }

    /// The end of what was appended.
    pub fn pos(&self) -> WalPos {
        WalPos { number: self.number, offset: self.writer.len() }
    }

    /// A handle to fsync everything appended so far without holding the WAL.
    pub fn sync_handle(&self) -> SyncHandle {
        SyncHandle {
            file: self.writer.handle(),
            path: self.writer.path().to_path_buf(),
            fail: self.fail.clone(),
        }
    }

    /// Fsyncs the file.
    pub fn sync(&self) -> Result<()> {
        self.sync_handle().sync()
    }
}

/// Fsyncs a WAL file from outside its writer.
#[derive(Debug)]
pub(crate) struct SyncHandle {
    file: Arc<File>,
    path: PathBuf,
    fail: FailPoints,
}

impl SyncHandle {
    /// Fsyncs the file's data.
    pub fn sync(&self) -> Result<()> {
        self.fail.check(points::WAL_SYNC)?;
        crate::fs::sync_data(&self.file, &self.path)
    }
}

/// Reads the batches of a WAL file in order (a torn tail is ignored); each comes back with its
/// issue time set. In the newest WAL, whose tail may not have been fsynced, a bad record ends
/// the log; older WALs were fsynced whole when sealed, so there it is corruption.
pub(crate) fn replay(path: &Path, newest: bool) -> Result<Vec<(u64, WriteBatch)>> {
    let on_bad = if newest { OnBad::EndsLog } else { OnBad::Refuse };
    let (records, _) = read_records(path, on_bad)?;
    records
        .into_iter()
        .map(|r| {
            WriteBatch::decode(&r.payload)
                .map_err(|e| Error::corruption(path, r.offset, format!("WAL record: {e}")))
        })
        .collect()
}
