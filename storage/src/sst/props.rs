//! File metadata stored in the SST index block and in the manifest.

use serde::{Deserialize, Serialize};

/// Properties of one SST, computed when it is written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct TableProps {
    /// Smallest sort key.
    pub smallest: Vec<u8>,
    /// Largest sort key.
    pub largest: Vec<u8>,
    /// Smallest sequence number.
    pub min_seq: u64,
    /// Largest sequence number.
    pub max_seq: u64,
    /// Smallest delete key.
    pub min_dkey: u64,
    /// Largest delete key.
    pub max_dkey: u64,
    /// Number of entries (including tombstones).
    pub entries: u64,
    /// Number of point tombstones.
    pub tombstones: u64,
    /// Sequence number of the oldest tombstone, if any (delete-age tracking).
    pub min_tombstone_seq: Option<u64>,
    /// The oldest delete whose tombstone this file holds or whose covered data may still be in it
    /// or below it (FADE; inherited through merges, never reset).
    pub oldest_delete: Option<crate::fade::DeleteStamp>,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// Delete-tile size h this file was written with.
    pub tile_pages: u32,
    /// Number of pages.
    pub pages: u32,
    /// Number of delete tiles.
    pub tiles: u32,
    /// Sum of key bytes.
    pub raw_key_bytes: u64,
    /// Sum of value bytes.
    pub raw_value_bytes: u64,
    /// Every range delete with a sequence number up to this had been applied (covered entries
    /// dropped) when the file was written.
    pub rd_applied: u64,
    /// Range-tombstone fragments stored in the file (tombstone mode).
    pub range_tombstones: u64,
    /// True if `largest` is an exclusive bound (the end of a range tombstone), so the file does
    /// not cover `largest` itself and the next file of its level may start there.
    pub largest_exclusive: bool,
}

/// An SST as the version knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileMeta {
    /// File id (the file is `{id:08}.sst`).
    pub id: u64,
    /// File size in bytes.
    pub size: u64,
    /// Properties.
    pub props: TableProps,
}

impl FileMeta {
    /// Smallest sort key.
    pub fn smallest(&self) -> &[u8] {
        &self.props.smallest
    }

    /// Largest sort key.
    pub fn largest(&self) -> &[u8] {
        &self.props.largest
    }

    /// True if every key the file covers is below `key`.
    pub fn ends_before(&self, key: &[u8]) -> bool {
        let l = self.largest();
        l < key || (self.props.largest_exclusive && l == key)
    }

    /// True if the file may hold a key of delete key `dkey` (every key's is within its range).
    pub fn may_hold_dkey(&self, dkey: u64) -> bool {
        self.props.min_dkey <= dkey && dkey <= self.props.max_dkey
    }

    /// True if the file's key range intersects `[lo, hi]` (inclusive bounds; `None` = unbounded).
    pub fn overlaps(&self, lo: Option<&[u8]>, hi: Option<&[u8]>) -> bool {
        lo.is_none_or(|lo| !self.ends_before(lo)) && hi.is_none_or(|hi| self.smallest() <= hi)
    }
}

/// Per-tile metadata: sort-key fence pointers and the tile's page range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TileMeta {
    pub first_key: Vec<u8>,
    pub last_key: Vec<u8>,
    pub first_page: u32,
    pub pages: u32,
    /// Bloom filter over every key of the tile (tiles of more than one page; `filter_len` 0:
    /// none), so a lookup of an absent key probes one filter per tile, not one per page.
    pub filter_offset: u32,
    pub filter_len: u32,
}

/// Per-page metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PageMeta {
    pub offset: u64,
    pub len: u32,
    pub entries: u32,
    pub min_key: Vec<u8>,
    pub max_key: Vec<u8>,
    pub min_dkey: u64,
    pub max_dkey: u64,
    pub filter_offset: u32,
    pub filter_len: u32,
    /// What the engine's page summarizer made of the page (format version 3).
    pub summary: Option<super::summary::PageSummary>,
}

/// Per-page metadata of format versions 1 and 2 (no summary).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PageMetaV2 {
    pub offset: u64,
    pub len: u32,
    pub entries: u32,
    pub min_key: Vec<u8>,
    pub max_key: Vec<u8>,
    pub min_dkey: u64,
    pub max_dkey: u64,
    pub filter_offset: u32,
    pub filter_len: u32,
}

impl From<PageMetaV2> for PageMeta {
    fn from(p: PageMetaV2) -> Self {
        PageMeta {
            offset: p.offset,
            len: p.len,
            entries: p.entries,
            min_key: p.min_key,
            max_key: p.max_key,
            min_dkey: p.min_dkey,
            max_dkey: p.max_dkey,
            filter_offset: p.filter_offset,
            filter_len: p.filter_len,
            summary: None,
        }
    }
}

/// A fragment of range tombstones stored in an SST (tombstone mode): keys `[lo, hi)` (empty `hi`
/// = end of the key space) covered by the deletes with sequence numbers `seqs`, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Fragment {
    pub lo: Vec<u8>,
    pub hi: Vec<u8>,
    pub seqs: Vec<u64>,
}

/// The index block of an SST.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct IndexBlock {
    pub tiles: Vec<TileMeta>,
    pub pages: Vec<PageMeta>,
    /// Range-tombstone fragments, key-sorted and disjoint (tombstone mode).
    pub range_tombstones: Vec<Fragment>,
    pub props: TableProps,
    /// Offset and length of the range filter inside the filter block (format version 2).
    pub range_filter: Option<(u32, u32)>,
}

/// The index block of format version 2 (no page summaries).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct IndexBlockV2 {
    pub tiles: Vec<TileMeta>,
    pub pages: Vec<PageMetaV2>,
    pub range_tombstones: Vec<Fragment>,
    pub props: TableProps,
    pub range_filter: Option<(u32, u32)>,
}

impl From<IndexBlockV2> for IndexBlock {
    fn from(v: IndexBlockV2) -> Self {
        IndexBlock {
            tiles: v.tiles,
            pages: v.pages.into_iter().map(PageMeta::from).collect(),
            range_tombstones: v.range_tombstones,
            props: v.props,
            range_filter: v.range_filter,
        }
    }
}

/// The index block of format version 1 (no range filter).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct IndexBlockV1 {
    pub tiles: Vec<TileMeta>,
    pub pages: Vec<PageMetaV2>,
    pub range_tombstones: Vec<Fragment>,
    pub props: TableProps,
}

impl From<IndexBlockV1> for IndexBlock {
    fn from(v: IndexBlockV1) -> Self {
        IndexBlock {
            tiles: v.tiles,
            pages: v.pages.into_iter().map(PageMeta::from).collect(),
            range_tombstones: v.range_tombstones,
            props: v.props,
            range_filter: None,
        }
    }
}
