//! Reads the records of a log file.

use std::path::Path;

use super::{checksum, len_check, HEADER_LEN};
use crate::error::IoContext;
use crate::{Error, Result};

/// One record read back from a log.
#[derive(Debug)]
pub(crate) struct Record {
    /// Byte offset of the record header.
    pub offset: u64,
    /// The payload.
    pub payload: Vec<u8>,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Reads every complete record of `path`. Returns the records and the byte length of the valid
/// prefix (where a torn tail, if any, starts).
pub(crate) fn read_records(path: &Path) -> Result<(Vec<Record>, u64)> {
    let data = std::fs::read(path).at(path)?;
    let mut records = Vec::new();
    let mut pos = 0usize;
    while pos < data.len() {
        let rest = &data[pos..];
        if rest.iter().all(|&b| b == 0) || rest.len() < HEADER_LEN {
            break; // zero-filled or cut-short tail: never acknowledged
        }
        let (crc, len, check) = (u32_at(rest, 0), u32_at(rest, 4), u32_at(rest, 8));
        if len_check(len) != check {
            return Err(Error::corruption(path, pos as u64, "record length checksum mismatch"));
        }
        let end = HEADER_LEN + len as usize;
        if end > rest.len() {
            break; // payload runs past the end: torn last record
        }
        let payload = &rest[HEADER_LEN..end];
        if checksum(len, payload) != crc {
            return Err(Error::corruption(path, pos as u64, "record checksum mismatch"));
        }
        records.push(Record { offset: pos as u64, payload: payload.to_vec() });
        pos += end;
    }
    Ok((records, pos as u64))
}

#[cfg(test)]
mod tests {
    use super::super::RecordWriter;
    use super::*;

    fn write_three(path: &Path) {
        let mut w = RecordWriter::create(path).unwrap();
        w.append(b"first").unwrap();
        w.append(b"second record").unwrap();
        w.append_torn(b"third, never acknowledged").unwrap();
    }

    #[test]
    fn torn_tail_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        write_three(&path);
        let (recs, valid) = read_records(&path).unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[1].payload, b"second record");
        assert_eq!(valid as usize, 2 * HEADER_LEN + 5 + 13);
    }

    #[test]
    fn every_flipped_byte_in_complete_records_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        write_three(&path);
        let clean = std::fs::read(&path).unwrap();
        let complete = 2 * HEADER_LEN + 5 + 13;
        for i in 0..complete {
            let mut data = clean.clone();
            data[i] ^= 0x10;
            std::fs::write(&path, &data).unwrap();
            match read_records(&path) {
                Err(Error::Corruption { .. }) => {}
                other => panic!("flip at {i}: expected corruption, got {other:?}"),
            }
        }
    }

    #[test]
    fn zero_tail_is_torn() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let mut w = RecordWriter::create(&path).unwrap();
        w.append(b"x").unwrap();
        drop(w);
        let mut data = std::fs::read(&path).unwrap();
        data.extend_from_slice(&[0u8; 100]);
        std::fs::write(&path, &data).unwrap();
        let (recs, _) = read_records(&path).unwrap();
        assert_eq!(recs.len(), 1);
    }
}
