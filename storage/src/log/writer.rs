//! Appends records to a log file.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{checksum, len_check, HEADER_LEN};
use crate::error::IoContext;
use crate::{Error, Result};

/// Appends checksummed records to one file. Each append reaches the OS in one `write` call, so a
/// process crash never loses an acknowledged record.
#[derive(Debug)]
pub(crate) struct RecordWriter {
    file: Arc<File>,
    path: PathBuf,
    len: u64,
    buf: Vec<u8>,
    /// A failed append could not be undone.
    broken: bool,
}

impl RecordWriter {
    /// Creates a new, empty log file (fails if it exists).
    pub fn create(path: &Path) -> Result<Self> {
        let file = OpenOptions::new().write(true).create_new(true).open(path).at(path)?;
        Ok(RecordWriter {
            file: Arc::new(file),
            path: path.to_path_buf(),
            len: 0,
            buf: Vec::new(),
            broken: false,
        })
    }

    /// Opens an existing log to append after its first `valid_len` bytes (a torn tail beyond
    /// them is cut off).
    pub fn open_append(path: &Path, valid_len: u64) -> Result<Self> {
        let file = OpenOptions::new().write(true).open(path).at(path)?;
        file.set_len(valid_len).at(path)?;
        use std::io::Seek;
        (&file).seek(std::io::SeekFrom::Start(valid_len)).at(path)?;
        Ok(RecordWriter {
            file: Arc::new(file),
            path: path.to_path_buf(),
            len: valid_len,
            buf: Vec::new(),
            broken: false,
        })
    }

    /// Path of the file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A handle on the file, to fsync it without holding the writer.
    pub fn handle(&self) -> Arc<File> {
        self.file.clone()
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    fn frame(&mut self, payload: &[u8]) {
        let len = payload.len() as u32;
        self.buf.clear();
        self.buf.reserve(HEADER_LEN + payload.len());
        self.buf.extend_from_slice(&checksum(len, payload).to_le_bytes());
        self.buf.extend_from_slice(&len.to_le_bytes());
        self.buf.extend_from_slice(&len_check(len).to_le_bytes());
        self.buf.extend_from_slice(payload);
    }

    /// Appends one record. A failed append (a full disk) is cut back off the file, so the log
    /// stays as it was; see [`RecordWriter::is_broken`].
    pub fn append(&mut self, payload: &[u8]) -> Result<()> {
        self.frame(payload);
        let buf = std::mem::take(&mut self.buf);
        let res = self.write(&buf);
        self.buf = buf;
        res
    }

    /// Appends several records in one write (cut back off on failure, as [`RecordWriter::append`]).
    pub fn append_all(&mut self, payloads: &[Vec<u8>]) -> Result<()> {
        let mut all = Vec::new();
        for p in payloads {
            self.frame(p);
            all.extend_from_slice(&self.buf);
        }
        self.write(&all)
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        if self.broken {
            return Err(Error::Poisoned(format!(
                "{}: an earlier failed append could not be cut back off",
                self.path.display()
            )));
        }
        if let Err(e) = (&*self.file).write_all(bytes) {
            use std::io::Seek;
            let undo = self
                .file
                .set_len(self.len)
                .and_then(|_| (&*self.file).seek(std::io::SeekFrom::Start(self.len)));
            if undo.is_err() {
                self.broken = true;
            }
            return Err(Error::io(&self.path, e));
        }
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// True if a failed append could not be cut back off: what follows the last good record is
    /// unknown, so nothing more may be appended (the owner must poison itself).
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// Writes only the first half of a record, as a crash mid-write would (fail-point use).
    pub fn append_torn(&mut self, payload: &[u8]) -> Result<()> {
        self.frame(payload);
        let half = self.buf.len() / 2;
        (&*self.file).write_all(&self.buf[..half]).at(&self.path)?;
        self.len += half as u64;
        self.broken = true;
        Ok(())
    }

    /// Fsyncs the file.
    pub fn sync(&mut self) -> Result<()> {
        crate::fs::sync_data(&self.file, &self.path)
    }
}
