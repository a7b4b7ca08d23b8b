//! DR-tree files: one immutable, packed tree of key-disjoint pieces per file.
//!
//! ```text
//! file       := leaf page* | index block | footer (24 bytes)
//! leaf page  := block(piece*)                  (block = body | codec | raw_len | crc32, as SSTs)
//! piece      := lo_len varint | lo | hi_len varint | hi | n varint | seq (u64 LE) * n
//! index      := block(postcard(DrIndex))       leaves (offset, length, key extent, min/max seq)
//!                                              and internal levels bottom-up, fanout D
//! footer     := index offset (u64) | index length (u32) | magic (u64) | crc32 (u32)
//! ```
//!
//! Pieces are key-disjoint, so every internal entry's key extent is disjoint from its siblings'
//! and a probe follows at most one child per tree level. Internal levels are small (about
//! 2 x pieces / D entries) and pinned in memory; leaves are read through the page cache. Each
//! internal entry also carries the min/max sequence number below it, so a probe for an entry newer
//! than everything below a node stops there.

mod tree;
mod writer;

use serde::{Deserialize, Serialize};

use super::piece::{Piece, SeqList};
use crate::coding::{get_varint, put_varint, u64_at};

pub(crate) use tree::DrTree;
pub(crate) use writer::DrWriter;

/// Magic number at the end of every DR-tree file.
pub(crate) const MAGIC: u64 = 0x4542_4244_5254_0001; // "EBBDRT" v1
/// Footer length.
pub(crate) const FOOTER_LEN: usize = 24;

/// Name of range-index file `id`.
pub(crate) fn file_name(id: u64) -> String {
    format!("{id:08}.rdi")
}

/// Properties of one DR-tree file.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DrProps {
    /// Number of pieces.
    pub pieces: u64,
    /// Smallest covering sequence number.
    pub min_seq: u64,
    /// Largest covering sequence number.
    pub max_seq: u64,
    /// Lower key of the first piece.
    pub smallest: Vec<u8>,
    /// Upper key of the last piece (empty = end of the key space).
    pub largest_hi: Vec<u8>,
    /// Tree height (internal levels above the leaves).
    pub height: u32,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_at_ms: u64,
}

/// A DR-tree file as the version knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrMeta {
    /// File id (the file is `{id:08}.rdi`).
    pub id: u64,
    /// File size in bytes.
    pub size: u64,
    /// Properties.
    pub props: DrProps,
}

/// One entry of a tree level: the key extent and sequence range of a child (a leaf page at the
/// bottom, a node of the level below otherwise).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct NodeEntry {
    pub lo: Vec<u8>,
    pub hi: Vec<u8>,
    pub min_seq: u64,
    pub max_seq: u64,
    /// Leaf entries: byte offset of the page. Internal entries: index of the first child.
    pub child: u64,
    /// Leaf entries: page length in bytes. Internal entries: number of children.
    pub len: u32,
}

/// The index block: `levels[0]` describes the leaf pages, `levels[i]` groups `levels[i - 1]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DrIndex {
    pub levels: Vec<Vec<NodeEntry>>,
    pub props: DrProps,
}

pub(crate) fn encode_piece(p: &Piece, out: &mut Vec<u8>) {
    put_varint(out, p.lo.len() as u64);
    out.extend_from_slice(&p.lo);
    put_varint(out, p.hi.len() as u64);
    out.extend_from_slice(&p.hi);
    put_varint(out, p.seqs.len() as u64);
    for s in &p.seqs {
        out.extend_from_slice(&s.to_le_bytes());
    }
}

/// Decodes the pieces of a leaf page; `None` if malformed.
pub(crate) fn decode_pieces(raw: &bytes::Bytes) -> Option<Vec<Piece>> {
    let mut pos = 0;
    let mut out = Vec::new();
    let take = |pos: &mut usize, n: usize| -> Option<bytes::Bytes> {
        let end = pos.checked_add(n)?;
        (end <= raw.len()).then(|| {
            let b = raw.slice(*pos..end);
            *pos = end;
            b
        })
    };
    while pos < raw.len() {
        let n = get_varint(raw, &mut pos)? as usize;
        let lo = take(&mut pos, n)?;
        let n = get_varint(raw, &mut pos)? as usize;
        let hi = take(&mut pos, n)?;
        let n = get_varint(raw, &mut pos)? as usize;
        if n == 0 || n > 1 << 16 {
            return None;
        }
        let mut seqs = SeqList::new();
        for _ in 0..n {
            seqs.push(u64_at(raw, pos)?);
            pos += 8;
        }
        if !seqs.windows(2).all(|w| w[0] > w[1]) {
            return None;
        }
        out.push(Piece { lo, hi, seqs });
    }
    Some(out)
}

#[cfg(test)]
mod tests;
