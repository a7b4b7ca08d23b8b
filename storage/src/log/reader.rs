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

/// What a reader does with a record that fails its checks and is not a torn tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnBad {
    /// Report corruption (a log whose every record was fsynced when written: the manifest).
    Refuse,
    /// End the log there (the newest file of a log whose records are fsynced in groups: the
    /// records of a group not yet fsynced when the power went may be lost, partly written or
    /// have holes of zeros, and none of them, nor anything after them, was acknowledged).
    EndsLog,
}

/// Reads every complete record of `path`. Returns the records and the byte length of the valid
/// prefix (where a torn tail, if any, starts). A torn tail ends the log: a record cut short, or
/// a header of zeros (blocks allocated but never written); other bad records are handled as
/// `on_bad` says.
pub(crate) fn read_records(path: &Path, on_bad: OnBad) -> Result<(Vec<Record>, u64)> {
    let data = std::fs::read(path).at(path)?;
    let mut records = Vec::new();
    let mut pos = 0usize;
    while pos < data.len() {
        let rest = &data[pos..];
        if rest.len() < HEADER_LEN || rest[..HEADER_LEN].iter().all(|&b| b == 0) {
            break; // cut short, or a hole of zeros: never acknowledged
        }
        let (crc, len, check) = (u32_at(rest, 0), u32_at(rest, 4), u32_at(rest, 8));
        let end = HEADER_LEN.saturating_add(len as usize);
        let bad = if len_check(len) != check {
            Some("record length checksum mismatch")
        } else if end > rest.len() {
            break; // payload runs past the end: torn last record
        } else if checksum(len, &rest[HEADER_LEN..end]) != crc {
            Some("record checksum mismatch")
        } else {
            None
        };
        if let Some(why) = bad {
            if on_bad == OnBad::EndsLog {
                tracing::warn!(
                    path = %path.display(),
                    offset = pos,
                    dropped = rest.len(),
                    "{why}: the log ends here (a write cut short by a crash)"
                );
                break;
            }
            return Err(Error::corruption(path, pos as u64, why));
        }
        records.push(Record { offset: pos as u64, payload: rest[HEADER_LEN..end].to_vec() });
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
        let (recs, valid) = read_records(&path, OnBad::Refuse).unwrap();
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
            match read_records(&path, OnBad::Refuse) {
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
        let (recs, _) = read_records(&path, OnBad::Refuse).unwrap();
        assert_eq!(recs.len(), 1);
    }
}
