//! Log segment files: consecutive entries as checksummed records.
//!
//! ```text
//! file:   magic "EBBRLOG1" | record*
//! record: payload length u32 LE | crc32(index ++ payload) u32 LE | index u64 LE | payload
//! ```
//!
//! A segment is named after the index of its first entry (`00000000000000000042.log`). Records
//! hold consecutive indexes. A segment is fsynced whole before the next one starts, so only the
//! newest can hold records not yet fsynced; a power cut may lose those, cut them short or leave
//! holes of zeros in them, anywhere past the last fsync. So in the newest segment the first bad
//! record ends the log (it and everything after it was never acknowledged, and is cut off on
//! open); a bad record in an older segment is corruption.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::LogError;

const MAGIC: &[u8; 8] = b"EBBRLOG1";
const HEADER: usize = 16;

/// One segment file and where its records are.
#[derive(Debug)]
pub(crate) struct Segment {
    /// Index of its first record.
    pub first: u64,
    pub path: PathBuf,
    pub file: Arc<File>,
    /// Bytes in the file.
    len: u64,
    /// Offset and total length of each record, for indexes `first..first + count`.
    records: Vec<(u64, u32)>,
}

impl Segment {
    /// The file name of the segment starting at `first`.
    pub fn file_name(first: u64) -> String {
        format!("{first:020}.log")
    }

    /// The first index of a segment file name, if it is one.
    pub fn parse_name(name: &str) -> Option<u64> {
        let digits = name.strip_suffix(".log")?;
        (digits.len() == 20).then(|| digits.parse().ok()).flatten()
    }

    /// Creates an empty segment starting at `first` in `dir`.
    pub fn create(dir: &Path, first: u64) -> Result<Segment, LogError> {
        let path = dir.join(Self::file_name(first));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(LogError::io(&path))?;
        file.write_all_at(MAGIC, 0).map_err(LogError::io(&path))?;
        sync(&file, &path)?;
        Ok(Segment {
            first,
            path,
            file: Arc::new(file),
            len: MAGIC.len() as u64,
            records: Vec::new(),
        })
    }

    /// Opens and validates a segment. A bad tail is cut off if `newest`, else it is an error.
    pub fn open(path: PathBuf, first: u64, newest: bool) -> Result<Segment, LogError> {
        let file =
            OpenOptions::new().read(true).write(true).open(&path).map_err(LogError::io(&path))?;
        let data = std::fs::read(&path).map_err(LogError::io(&path))?;
        if data.len() < MAGIC.len() || &data[..MAGIC.len()] != MAGIC {
            if newest && data.len() < MAGIC.len() {
                // Created but never written: start it again.
                file.set_len(0).map_err(LogError::io(&path))?;
                file.write_all_at(MAGIC, 0).map_err(LogError::io(&path))?;
                sync(&file, &path)?;
                let len = MAGIC.len() as u64;
                return Ok(Segment { first, path, file: Arc::new(file), len, records: Vec::new() });
            }
            // The magic's last byte is the segment format: `EBBRLOG2` is a newer build's.
            if data.len() >= MAGIC.len() && data[..MAGIC.len() - 1] == MAGIC[..MAGIC.len() - 1] {
                return Err(LogError::Corrupt(format!(
                    "{}: raft log segment format {}; this build (ebb {}) reads segment format 1",
                    path.display(),
                    char::from(data[MAGIC.len() - 1]),
                    env!("CARGO_PKG_VERSION"),
                )));
            }
            return Err(LogError::Corrupt(format!("{} is not a raft log segment", path.display())));
        }
        let mut records = Vec::new();
        let mut at = MAGIC.len();
        while at < data.len() {
            match Self::check_record(&data[at..], first + records.len() as u64) {
                Some(total) => {
                    records.push((at as u64, total as u32));
                    at += total;
                }
                None if newest => {
                    tracing::warn!(
                        segment = %path.display(),
                        offset = at,
                        dropped = data.len() - at,
                        "cutting off the unacknowledged tail of the raft log at a torn record"
                    );
                    file.set_len(at as u64).map_err(LogError::io(&path))?;
                    sync(&file, &path)?;
                    break;
                }
                None => {
                    return Err(LogError::Corrupt(format!(
                        "bad record at offset {at} of {}",
                        path.display()
                    )))
                }
            }
        }
        let len = at as u64;
        Ok(Segment { first, path, file: Arc::new(file), len, records })
    }

    /// The total length of a valid record with index `index` at the start of `b`.
    fn check_record(b: &[u8], index: u64) -> Option<usize> {
        let head = b.get(..HEADER)?;
        let len = u32::from_le_bytes(head[..4].try_into().ok()?) as usize;
        let crc = u32::from_le_bytes(head[4..8].try_into().ok()?);
        let total = HEADER.checked_add(len)?;
        let body = b.get(8..total)?;
        let found = u64::from_le_bytes(body[..8].try_into().ok()?);
        (crc32fast::hash(body) == crc && found == index).then_some(total)
    }

    /// Number of records.
    pub fn count(&self) -> u64 {
        self.records.len() as u64
    }

    /// Index the next appended record must have.
    pub fn next_index(&self) -> u64 {
        self.first + self.count()
    }

    /// Bytes in the file.
    pub fn bytes(&self) -> u64 {
        self.len
    }

    /// True if it holds `index`.
    pub fn contains(&self, index: u64) -> bool {
        index >= self.first && index < self.next_index()
    }

    /// Appends encoded records (built by [`encode_record`]) for `count` consecutive indexes
    /// starting at [`Segment::next_index`]. Not durable until the file is synced.
    pub fn append(&mut self, buf: &[u8], lens: &[u32]) -> Result<(), LogError> {
        self.file.write_all_at(buf, self.len).map_err(LogError::io(&self.path))?;
        let mut at = self.len;
        for &l in lens {
            self.records.push((at, l));
            at += u64::from(l);
        }
        self.len = at;
        Ok(())
    }

    /// The length of record `index` (header included), without reading it; `index` must be
    /// in the segment.
    pub fn record_len(&self, index: u64) -> u32 {
        self.records[(index - self.first) as usize].1
    }

    /// The payload of the record of `index` (which it must contain).
    pub fn read(&self, index: u64) -> Result<Vec<u8>, LogError> {
        let (at, total) = self.records[(index - self.first) as usize];
        let mut b = vec![0u8; total as usize];
        self.file.read_exact_at(&mut b, at).map_err(LogError::io(&self.path))?;
        if Self::check_record(&b, index) != Some(total as usize) {
            return Err(LogError::Corrupt(format!(
                "record {index} in {} fails its checksum",
                self.path.display()
            )));
        }
        b.drain(..HEADER);
        Ok(b)
    }

    /// Removes the records from `index` on (`index` within or just past the segment).
    pub fn truncate(&mut self, index: u64) -> Result<(), LogError> {
        let keep = index.saturating_sub(self.first) as usize;
        if keep >= self.records.len() {
            return Ok(());
        }
        let at = self.records[keep].0;
        self.file.set_len(at).map_err(LogError::io(&self.path))?;
        sync(&self.file, &self.path)?;
        self.records.truncate(keep);
        self.len = at;
        Ok(())
    }
}

/// Appends the record of `(index, payload)` to `out`; returns its total length.
pub(crate) fn encode_record(index: u64, payload: &[u8], out: &mut Vec<u8>) -> u32 {
    let start = out.len();
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&index.to_le_bytes());
    out.extend_from_slice(payload);
    let crc = crc32fast::hash(&out[start + 8..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    (out.len() - start) as u32
}

/// Fsyncs a segment file (recorded for simulated power cuts).
pub(crate) fn sync(file: &File, path: &Path) -> Result<(), LogError> {
    file.sync_all().map_err(LogError::io(path))?;
    ebb_storage::durable::synced_file(file);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn append(s: &mut Segment, index: u64, payload: &[u8]) {
        let mut buf = Vec::new();
        let l = encode_record(index, payload, &mut buf);
        s.append(&buf, &[l]).expect("append");
    }

    #[test]
    fn records_round_trip_and_torn_tails_are_cut() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = Segment::create(dir.path(), 7).expect("create");
        for i in 7..12u64 {
            append(&mut s, i, format!("entry {i}").as_bytes());
        }
        assert_eq!(s.read(9).expect("read"), b"entry 9");
        let path = s.path.clone();
        let full = s.bytes();
        drop(s);
        // A torn last record: the file ends in the middle of it.
        let f = OpenOptions::new().write(true).open(&path).expect("open");
        f.set_len(full - 3).expect("cut");
        let s = Segment::open(path.clone(), 7, false);
        assert!(matches!(s, Err(LogError::Corrupt(_))), "an older segment must not be repaired");
        let s = Segment::open(path.clone(), 7, true).expect("repair");
        assert_eq!((s.first, s.count()), (7, 4));
        assert_eq!(s.read(10).expect("read"), b"entry 10");
        drop(s);
        // A hole of zeros in the newest segment (blocks never written before a power cut)
        // ends the log there, even with records after it.
        let clean = std::fs::read(&path).expect("read file");
        let second = MAGIC.len() + (HEADER + 7);
        let mut holed = clean.clone();
        holed[second..second + 5].fill(0);
        std::fs::write(&path, &holed).expect("write");
        assert!(matches!(Segment::open(path.clone(), 7, false), Err(LogError::Corrupt(_))));
        let s = Segment::open(path.clone(), 7, true).expect("cut at the hole");
        assert_eq!(s.count(), 1);
        drop(s);
        std::fs::write(&path, &clean).expect("write");
        // A flipped byte inside a record of an older segment is corruption.
        let mut data = std::fs::read(&path).expect("read file");
        data[MAGIC.len() + HEADER + 2] ^= 1;
        std::fs::write(&path, &data).expect("write");
        assert!(matches!(Segment::open(path, 7, false), Err(LogError::Corrupt(_))));
    }

    /// A segment a newer build wrote is refused, naming the file and both formats, even as the
    /// newest segment (whose bad tail would otherwise be cut).
    #[test]
    fn a_newer_segment_format_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = Segment::create(dir.path(), 1).expect("create");
        append(&mut s, 1, b"entry");
        let path = s.path.clone();
        drop(s);
        let mut data = std::fs::read(&path).expect("read file");
        data[MAGIC.len() - 1] = b'2';
        std::fs::write(&path, &data).expect("write");
        let Err(LogError::Corrupt(why)) = Segment::open(path.clone(), 1, true) else {
            panic!("a newer segment was opened");
        };
        assert!(why.contains(&format!("{}: raft log segment format 2;", path.display())), "{why}");
        assert!(why.ends_with("reads segment format 1"), "{why}");
        assert_eq!(
            std::fs::read(&path).expect("read file"),
            data,
            "the file must be left as it is"
        );
    }

    #[test]
    fn truncate_drops_the_tail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = Segment::create(dir.path(), 1).expect("create");
        for i in 1..=5u64 {
            append(&mut s, i, &[i as u8; 10]);
        }
        s.truncate(3).expect("truncate");
        assert_eq!(s.next_index(), 3);
        append(&mut s, 3, b"new");
        let path = s.path.clone();
        drop(s);
        let s = Segment::open(path, 1, true).expect("open");
        assert_eq!(s.count(), 3);
        assert_eq!(s.read(3).expect("read"), b"new");
        assert_eq!(Segment::parse_name(&Segment::file_name(42)), Some(42));
        assert_eq!(Segment::parse_name("42.log"), None);
    }
}
