//! Data pages: encoding, compression, checksums and decoding.
//!
//! ```text
//! on disk  := body | codec (u8) | raw_len (u32 LE) | crc32 (u32 LE, over body, codec and raw_len)
//! raw page := entry* | entry_offset (u32 LE) * n | n (u32 LE)
//! entry    := key_len (varint) | value_len (varint) | seq (u64 LE) | kind (u8) | key | value
//! ```
//!
//! Entries in a page are in internal order (key ascending, sequence number descending), and all
//! versions of a key are in the same page.

use std::cmp::Ordering;

use bytes::Bytes;

use crate::batch::EntryKind;
use crate::coding::{get_varint, put_varint, u32_at, u64_at};
use crate::options::Compression;

/// Bytes after the body of an on-disk page.
pub(crate) const TRAILER_LEN: usize = 9;

const CODEC_NONE: u8 = 0;
const CODEC_LZ4: u8 = 1;
const CODEC_ZSTD: u8 = 2;

/// Accumulates the entries of one page.
#[derive(Debug, Default)]
pub struct PageBuilder {
    buf: Vec<u8>,
    offsets: Vec<u32>,
}

impl PageBuilder {
    /// Appends an entry (callers add entries in internal order).
    pub fn add(&mut self, key: &[u8], seq: u64, kind: EntryKind, value: &[u8]) {
        self.offsets.push(self.buf.len() as u32);
        put_varint(&mut self.buf, key.len() as u64);
        put_varint(&mut self.buf, value.len() as u64);
        self.buf.extend_from_slice(&seq.to_le_bytes());
        self.buf.push(kind as u8);
        self.buf.extend_from_slice(key);
        self.buf.extend_from_slice(value);
    }

    /// Encodes the page for disk into `out` (appending) and resets the builder.
    pub fn finish(&mut self, compression: Compression, out: &mut Vec<u8>) {
        for o in &self.offsets {
            self.buf.extend_from_slice(&o.to_le_bytes());
        }
        self.buf.extend_from_slice(&(self.offsets.len() as u32).to_le_bytes());
        encode_block(&self.buf, compression, out);
        self.buf.clear();
        self.offsets.clear();
    }
}

/// Compresses `raw` (if that saves at least 1/8) and appends body and trailer to `out`.
pub fn encode_block(raw: &[u8], compression: Compression, out: &mut Vec<u8>) {
    let start = out.len();
    let codec = match compression {
        Compression::None => CODEC_NONE,
        Compression::Lz4 => {
            let c = lz4_flex::block::compress(raw);
            if c.len() < raw.len() - raw.len() / 8 {
                out.extend_from_slice(&c);
                CODEC_LZ4
            } else {
                CODEC_NONE
            }
        }
        Compression::Zstd(level) => match zstd::bulk::compress(raw, level) {
            Ok(c) if c.len() < raw.len() - raw.len() / 8 => {
                out.extend_from_slice(&c);
                CODEC_ZSTD
            }
            _ => CODEC_NONE,
        },
    };
    if codec == CODEC_NONE {
        out.extend_from_slice(raw);
    }
    out.push(codec);
    out.extend_from_slice(&(raw.len() as u32).to_le_bytes());
    let crc = crc32fast::hash(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Verifies and decompresses an on-disk block. `Err` carries the reason. An uncompressed block
/// reuses `disk`'s allocation.
pub fn decode_block(mut disk: Vec<u8>) -> Result<Bytes, &'static str> {
    if disk.len() < TRAILER_LEN {
        return Err("block shorter than its trailer");
    }
    let crc_at = disk.len() - 4;
    let stored = u32_at(&disk, crc_at).ok_or("truncated checksum")?;
    if crc32fast::hash(&disk[..crc_at]) != stored {
        return Err("block checksum mismatch");
    }
    let codec = disk[disk.len() - TRAILER_LEN];
    let raw_len = u32_at(&disk, disk.len() - 8).ok_or("truncated length")? as usize;
    let body_len = disk.len() - TRAILER_LEN;
    let body = &disk[..body_len];
    let raw = match codec {
        CODEC_NONE => {
            disk.truncate(body_len);
            disk
        }
        CODEC_LZ4 => lz4_flex::block::decompress(body, raw_len).map_err(|_| "lz4 decode failed")?,
        CODEC_ZSTD => zstd::bulk::decompress(body, raw_len).map_err(|_| "zstd decode failed")?,
        _ => return Err("unknown codec"),
    };
    if raw.len() != raw_len {
        return Err("decoded length mismatch");
    }
    Ok(Bytes::from(raw))
}

/// A decoded page, validated on construction so accessors cannot go out of bounds.
#[derive(Debug, Clone)]
pub struct Page {
    data: Bytes,
    n: usize,
    offsets_at: usize,
}

/// A view of one entry of a page.
#[derive(Debug, Clone, Copy)]
pub struct EntryView<'a> {
    /// The key.
    pub key: &'a [u8],
    /// Sequence number.
    pub seq: u64,
    /// Put or tombstone.
    pub kind: EntryKind,
    pub(crate) value_at: usize,
    pub(crate) value_len: usize,
}

impl Page {
    /// Validates a raw page.
    pub fn new(data: Bytes) -> Result<Self, &'static str> {
        let len = data.len();
        let n = u32_at(&data, len.checked_sub(4).ok_or("page too short")?)
            .ok_or("page too short")? as usize;
        let offsets_at =
            len.checked_sub(4 + n.checked_mul(4).ok_or("bad count")?).ok_or("bad entry count")?;
        let page = Page { data, n, offsets_at };
        let mut prev_end = 0usize;
        for i in 0..n {
            let off = page.offset(i);
            if off != prev_end {
                return Err("entry offsets not contiguous");
            }
            let e = page.try_entry(i).ok_or("entry out of bounds")?;
            prev_end = e.value_at + e.value_len;
        }
        if prev_end != offsets_at {
            return Err("entries do not fill the page");
        }
        Ok(page)
    }

    /// The decoded page bytes.
    pub fn data(&self) -> &Bytes {
        &self.data
    }

    /// Bytes of decoded data (for cache accounting).
    pub fn size(&self) -> usize {
        self.data.len()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.n
    }

    /// True if the page has no entries.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    #[inline]
    fn offset(&self, i: usize) -> usize {
        u32_at(&self.data, self.offsets_at + i * 4).unwrap_or(u32::MAX) as usize
    }

    fn try_entry(&self, i: usize) -> Option<EntryView<'_>> {
        let d = &self.data[..self.offsets_at];
        let mut pos = self.offset(i);
        let klen = get_varint(d, &mut pos)? as usize;
        let vlen = get_varint(d, &mut pos)? as usize;
        let seq = u64_at(d, pos)?;
        let kind = EntryKind::from_u8(*d.get(pos + 8)?)?;
        let key_at = pos + 9;
        let value_at = key_at.checked_add(klen)?;
        let end = value_at.checked_add(vlen)?;
        if end > d.len() {
            return None;
        }
        Some(EntryView { key: &d[key_at..value_at], seq, kind, value_at, value_len: vlen })
    }

    /// Entry `i` (`i < len()`; the page was validated).
    #[inline]
    pub fn entry(&self, i: usize) -> EntryView<'_> {
        self.try_entry(i).unwrap_or(EntryView {
            key: &[],
            seq: 0,
            kind: EntryKind::Delete,
            value_at: 0,
            value_len: 0,
        })
    }

    /// Bytes `at..at + len` of the page (a key located by an earlier [`Page::entry`]).
    #[inline]
    pub(crate) fn bytes_at(&self, at: usize, len: usize) -> &[u8] {
        &self.data[at..at + len]
    }

    /// Value bytes of an entry, shared with the page.
    pub fn value(&self, e: &EntryView<'_>) -> Bytes {
        self.data.slice(e.value_at..e.value_at + e.value_len)
    }

    /// Value bytes of an entry, borrowed from the page.
    pub fn value_ref(&self, e: &EntryView<'_>) -> &[u8] {
        &self.data[e.value_at..e.value_at + e.value_len]
    }

    /// Key bytes of entry `i`, shared with the page.
    pub fn key_bytes(&self, i: usize) -> Bytes {
        let e = self.entry(i);
        let at = e.value_at - e.key.len();
        self.data.slice(at..e.value_at)
    }

    /// Index of the first entry at or after `(key, seq)` in internal order.
    pub fn lower_bound(&self, key: &[u8], seq: u64) -> usize {
        let (mut lo, mut hi) = (0, self.n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let e = self.entry(mid);
            if crate::iter::internal_cmp(e.key, e.seq, key, seq) == Ordering::Less {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(compression: Compression) -> Vec<u8> {
        let mut b = PageBuilder::default();
        for i in 0..50u32 {
            b.add(&i.to_be_bytes(), 100 - i as u64, EntryKind::Put, &[i as u8; 40]);
        }
        let mut out = Vec::new();
        b.finish(compression, &mut out);
        out
    }

    #[test]
    fn roundtrip_all_codecs() {
        for c in [Compression::None, Compression::Lz4, Compression::Zstd(3)] {
            let disk = sample(c);
            let page = Page::new(decode_block(disk.clone()).unwrap()).unwrap();
            assert_eq!(page.len(), 50);
            let e = page.entry(7);
            assert_eq!(e.key, 7u32.to_be_bytes());
            assert_eq!(e.seq, 93);
            assert_eq!(page.value(&e).as_ref(), &[7u8; 40]);
            assert_eq!(page.lower_bound(&7u32.to_be_bytes(), u64::MAX), 7);
            assert_eq!(page.lower_bound(&7u32.to_be_bytes(), 10), 8);
        }
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let disk = sample(Compression::Lz4);
        for i in 0..disk.len() {
            let mut d = disk.clone();
            d[i] ^= 0x01;
            assert!(decode_block(d).is_err(), "flip at {i} not detected");
        }
    }
}
