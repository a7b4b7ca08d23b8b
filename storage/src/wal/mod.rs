//! The engine-owned write-ahead log (used when the engine runs standalone, off under Raft).
//!
//! One WAL file per memtable; a record is one write batch with its first sequence number. A file
//! is deleted once the memtable it backs is flushed and the manifest has recorded that.

use std::path::Path;

use crate::batch::WriteBatch;
use crate::failpoint::{points, FailPoints};
use crate::log::{read_records, RecordWriter};
use crate::{Error, Result};

/// Appends write batches to one WAL file.
#[derive(Debug)]
pub(crate) struct Wal {
    writer: RecordWriter,
    buf: Vec<u8>,
    fail: FailPoints,
}

impl Wal {
    /// Creates WAL file `number` in `dir`.
    pub fn create(dir: &Path, number: u64, fail: FailPoints) -> Result<Self> {
        let writer = RecordWriter::create(&dir.join(crate::fs::wal_name(number)))?;
        Ok(Wal { writer, buf: Vec::new(), fail })
    }

    /// Appends a batch with its issue time (reaches the OS before returning).
    pub fn append(&mut self, batch: &WriteBatch, seq: u64, issued_at_ms: u64) -> Result<()> {
        self.buf.clear();
        batch.encode(seq, issued_at_ms, &mut self.buf);
        self.writer.append(&self.buf)
    }

    /// Fsyncs the file.
    pub fn sync(&mut self) -> Result<()> {
        self.fail.check(points::WAL_SYNC)?;
        self.writer.sync()
    }
}

/// Reads the batches of a WAL file in order (a torn tail is ignored); each comes back with its
/// issue time set.
pub(crate) fn replay(path: &Path) -> Result<Vec<(u64, WriteBatch)>> {
    let (records, _) = read_records(path)?;
    records
        .into_iter()
        .map(|r| {
            WriteBatch::decode(&r.payload)
                .ok_or_else(|| Error::corruption(path, r.offset, "undecodable write batch"))
        })
        .collect()
}
