//! Sorted string tables with the KiWi+ layout.
//!
//! A file is a sequence of *delete tiles* in sort-key order. A tile holds up to `h` pages; the
//! pages of a tile are ordered by the delete key `D` (time), and the entries inside a page are
//! ordered by the sort key `S`. So the sort-key ranges of pages in one tile overlap, but their
//! delete-key ranges do not: a time-window delete can drop whole pages without reading them.
//! `h = 1` is the classic layout (pages in sort-key order).
//!
//! ```text
//! +--------------------------------------------------------------------------------------+
//! | tile 0 (S in [a, c))              | tile 1 (S in [c, f))              | ...           |
//! |  page 0    page 1    page 2       |  page 3    page 4    page 5       |               |
//! |  D 0..9    D 10..19  D 20..31     |  D 0..14   D 15..22  D 23..40     |               |
//! |  S sorted  S sorted  S sorted     |  S sorted  S sorted  S sorted     |               |
//! +--------------------------------------------------------------------------------------+
//! | filter block: a Bloom filter on S per page and per tile of h > 1 pages, and the file's |
//! |   range filter (Rosetta, see `crate::filter`) (checksummed)                          |
//! | index block: tiles (S fence pointers: first and last key, page range) and pages       |
//! |   (offset, length, entry count, min/max S, min/max D, filter slice, summary), file    |
//! |   properties                                                                          |
//! | footer (40 bytes): index offset/len, filter offset/len, format version, magic, crc32  |
//! +--------------------------------------------------------------------------------------+
//! ```
//!
//! Every page, the filter block and the index block end in a trailer `codec | raw_len | crc32`
//! (see the `page` module); the footer has its own checksum. All versions of a key sit in one page, and a
//! key never spans two tiles, so a point lookup finds the tile by its fence pointers, probes the
//! tile's Bloom filter (one probe, whatever h is), then the filter of each of the tile's pages,
//! and searches at most the pages that answer "maybe".

pub(crate) mod bloom;
mod cursor;
mod fence;
#[doc(hidden)]
pub mod internals;
pub(crate) mod page;
mod props;
pub(crate) mod summary;
mod table;
pub(crate) mod writer;

pub(crate) use cursor::{PageOffer, Prune, TableCursor};
pub use props::{FileMeta, TableProps};
pub(crate) use props::{Fragment, IndexBlock, IndexBlockV1, IndexBlockV2, PageMeta, TileMeta};
pub use summary::{PageSummarizer, PageTaker, RunKey, SummarizedPage};
pub(crate) use table::Table;
pub(crate) use writer::TableWriter;

/// Magic number at the end of every SST.
pub(crate) const MAGIC: u64 = 0x4542_4253_5354_0001; // "EBBSST" v1
/// Current SST format version: 2 adds the range filter (Rosetta) to the filter block, 3 the
/// page summaries to the index block. Files of versions 1 and 2 are still read (without
/// them).
pub(crate) const FORMAT_VERSION: u32 = 3;
/// Footer length in bytes.
pub(crate) const FOOTER_LEN: usize = 40;

/// The footer: index and filter block locations, format version, magic, checksum.
pub(crate) fn encode_footer(index: (u64, u32), filter: (u64, u32)) -> Vec<u8> {
    let mut footer = Vec::with_capacity(FOOTER_LEN);
    footer.extend_from_slice(&index.0.to_le_bytes());
    footer.extend_from_slice(&index.1.to_le_bytes());
    footer.extend_from_slice(&filter.0.to_le_bytes());
    footer.extend_from_slice(&filter.1.to_le_bytes());
    footer.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    footer.extend_from_slice(&MAGIC.to_le_bytes());
    let crc = crc32fast::hash(&footer);
    footer.extend_from_slice(&crc.to_le_bytes());
    footer
}

/// Name of the SST file with id `id`.
pub(crate) fn file_name(id: u64) -> String {
    format!("{id:08}.sst")
}

#[cfg(test)]
mod layout_tests;
