//! Appends records to a log file.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{checksum, len_check, HEADER_LEN};
use crate::error::IoContext;
use crate::Result;

/// Appends checksummed records to one file. Each append reaches the OS in one `write` call, so a
/// process crash never loses an acknowledged record.
#[derive(Debug)]
pub(crate) struct RecordWriter {
    file: Arc<File>,
    path: PathBuf,
    len: u64,
    buf: Vec<u8>,
}

impl RecordWriter {
    /// Creates a new, empty log file (fails if it exists).
    pub fn create(path: &Path) -> Result<Self> {
        let file = OpenOptions::new().write(true).create_new(true).open(path).at(path)?;
        Ok(RecordWriter { file: Arc::new(file), path: path.to_path_buf(), len: 0, buf: Vec::new() })
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

    /// Appends one record.
    pub fn append(&mut self, payload: &[u8]) -> Result<()> {
        self.frame(payload);
        (&*self.file).write_all(&self.buf).at(&self.path)?;
        self.len += self.buf.len() as u64;
        Ok(())
    }

    /// Appends several records in one write.
    pub fn append_all(&mut self, payloads: &[Vec<u8>]) -> Result<()> {
        let mut all = Vec::new();
        for p in payloads {
            self.frame(p);
            all.extend_from_slice(&self.buf);
        }
        (&*self.file).write_all(&all).at(&self.path)?;
        self.len += all.len() as u64;
        Ok(())
    }

    /// Writes only the first half of a record, as a crash mid-write would (fail-point use).
    pub fn append_torn(&mut self, payload: &[u8]) -> Result<()> {
        self.frame(payload);
        let half = self.buf.len() / 2;
        (&*self.file).write_all(&self.buf[..half]).at(&self.path)?;
        self.len += half as u64;
        Ok(())
    }

    /// Fsyncs the file.
    pub fn sync(&mut self) -> Result<()> {
        crate::fs::sync_data(&self.file, &self.path)
    }
}
