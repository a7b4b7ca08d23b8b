//! Checksummed record logs, shared by the write-ahead log and the manifest.
//!
//! ```text
//! record := crc32 (u32 LE, over len and payload) | len (u32 LE) | crc32(len) (u32 LE) | payload
//! ```
//!
//! A reader accepts a torn tail: an incomplete last record (header cut short, or a valid header
//! whose payload runs past the end of the file), or a zero-filled tail, is ignored: it was never
//! acknowledged. Anything else that fails a check (a length that does not match its own checksum, a
//! payload checksum mismatch) is corruption and is reported with its offset, so a flipped bit can
//! never silently cut a log short.

mod reader;
mod writer;

pub(crate) use reader::{read_records, OnBad};
pub(crate) use writer::RecordWriter;

/// Bytes of a record header.
pub(crate) const HEADER_LEN: usize = 12;

pub(crate) fn checksum(len: u32, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&len.to_le_bytes());
    h.update(payload);
    h.finalize()
}

pub(crate) fn len_check(len: u32) -> u32 {
    crc32fast::hash(&len.to_le_bytes())
}
