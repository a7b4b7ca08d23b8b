//! Writes an SST with the KiWi+ layout from entries in internal order.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::page::{encode_block, PageBuilder};
use super::{bloom, FileMeta, Fragment, IndexBlock, PageMeta, TableProps, TileMeta};
use crate::batch::EntryKind;
use crate::batch::MAX_KEY_LEN;
use crate::error::IoContext;
use crate::filter::global::{CellCollector, Cells, GlobalSpec};
use crate::filter::rosetta::RosettaBuilder;
use crate::filter::RangeFilterSpec;
use crate::gloran::piece::Piece;
use crate::options::{Compression, DeleteKeyExtractor};
use crate::{Error, Result};

/// Settings of one table write.
#[derive(Debug, Clone)]
pub(crate) struct WriterOptions {
    pub page_size: usize,
    pub tile_pages: usize,
    pub bloom_bits_per_key: u32,
    pub compression: Compression,
    pub delete_key: DeleteKeyExtractor,
    /// Build a range filter (Rosetta) with these parameters.
    pub range_filter: Option<RangeFilterSpec>,
    /// Collect the file's cells for the global range filter.
    pub global_cells: Option<GlobalSpec>,
    /// Summarizes each page's values (see [`super::summary`]).
    pub summarizer: Option<std::sync::Arc<dyn super::PageSummarizer>>,
}

#[derive(Debug)]
struct Pending {
    key: Bytes,
    seq: u64,
    kind: EntryKind,
    value: Bytes,
    dkey: u64,
}

impl Pending {
    fn size(&self) -> usize {
        self.key.len() + self.value.len() + 14
    }
}

/// Builds one SST. Entries must arrive in internal order (key ascending, seq descending).
#[derive(Debug)]
pub(crate) struct TableWriter {
    id: u64,
    path: PathBuf,
    file: BufWriter<File>,
    offset: u64,
    opts: WriterOptions,
    tile: Vec<Pending>,
    tile_bytes: usize,
    tiles: Vec<TileMeta>,
    pages: Vec<PageMeta>,
    filters: Vec<u8>,
    props: TableProps,
    page: PageBuilder,
    block: Vec<u8>,
    hashes: Vec<u64>,
    tombstones: Vec<Piece>,
    range_filter: Option<RosettaBuilder>,
    cells: Option<CellCollector>,
}

impl TableWriter {
    /// Creates file `path` for table `id`.
    pub fn create(id: u64, path: &Path, opts: WriterOptions) -> Result<Self> {
        let file = OpenOptions::new().write(true).create_new(true).open(path).at(path)?;
        let range_filter = opts.range_filter.and_then(RosettaBuilder::new);
        let cells = opts.global_cells.map(CellCollector::new);
        Ok(TableWriter {
            id,
            path: path.to_path_buf(),
            file: BufWriter::with_capacity(1 << 20, file),
            offset: 0,
            opts,
            tile: Vec::new(),
            tile_bytes: 0,
            tiles: Vec::new(),
            pages: Vec::new(),
            filters: Vec::new(),
            props: TableProps { min_seq: u64::MAX, min_dkey: u64::MAX, ..Default::default() },
            page: PageBuilder::default(),
            block: Vec::new(),
            hashes: Vec::new(),
            tombstones: Vec::new(),
            range_filter,
            cells,
        })
    }

    /// Key of the last entry added.
    pub fn last_key(&self) -> Option<&[u8]> {
        self.tile
            .last()
            .map(|p| p.key.as_ref())
            .or_else(|| self.tiles.last().map(|t| t.last_key.as_slice()))
    }

    /// Stores range-tombstone fragments (key-sorted, disjoint) in the file (tombstone mode). The
    /// file's key range grows to cover them.
    pub fn set_range_tombstones(&mut self, fragments: Vec<Piece>) {
        self.tombstones = fragments;
    }

    /// Smallest sequence number among the range-tombstone fragments set so far.
    pub fn range_tombstone_min_seq(&self) -> Option<u64> {
        self.tombstones.iter().flat_map(|p| p.seqs.iter().copied()).min()
    }

    /// Records the oldest delete this file holds or may hold covered data of (FADE).
    pub fn set_oldest_delete(&mut self, stamp: Option<crate::fade::DeleteStamp>) {
        self.props.oldest_delete = stamp;
    }

    /// Records the range deletes applied (see [`TableProps::rd_applied`]).
    pub fn set_rd_applied(&mut self, seq: u64) {
        self.props.rd_applied = seq;
    }

    /// Approximate file size if finished now.
    pub fn estimated_size(&self) -> u64 {
        self.offset + self.tile_bytes as u64
    }

    /// Adds an entry.
    pub fn add(&mut self, key: Bytes, seq: u64, kind: EntryKind, value: Bytes) -> Result<()> {
        let new_key = self.last_key() != Some(key.as_ref());
        let tile_limit = self.opts.page_size * self.opts.tile_pages;
        if new_key && self.tile_bytes >= tile_limit {
            self.flush_tile()?;
        }
        if let Some(f) = &mut self.range_filter {
            f.add(&key);
        }
        if let Some(c) = &mut self.cells {
            c.add(&key);
        }
        let dkey = self.opts.delete_key.extract(&key);
        let p = &mut self.props;
        if p.entries == 0 {
            p.smallest = key.to_vec();
        }
        p.entries += 1;
        p.min_seq = p.min_seq.min(seq);
        p.max_seq = p.max_seq.max(seq);
        p.min_dkey = p.min_dkey.min(dkey);
        p.max_dkey = p.max_dkey.max(dkey);
        p.raw_key_bytes += key.len() as u64;
        p.raw_value_bytes += value.len() as u64;
        if kind == EntryKind::Delete {
            p.tombstones += 1;
            p.min_tombstone_seq = Some(p.min_tombstone_seq.map_or(seq, |s| s.min(seq)));
        }
        let e = Pending { key, seq, kind, value, dkey };
        self.tile_bytes += e.size();
        self.tile.push(e);
        Ok(())
    }

    /// Cuts the buffered tile into at most h pages ordered by delete key, each sorted by key.
    fn flush_tile(&mut self) -> Result<()> {
        if self.tile.is_empty() {
            return Ok(());
        }
        let mut tile = std::mem::take(&mut self.tile);
        let first_key = tile[0].key.to_vec();
        let last_key = tile[tile.len() - 1].key.to_vec();
        let h = self.opts.tile_pages;
        if h > 1 {
            // Stable: versions of a key (same D) stay adjacent and in internal order.
            tile.sort_by_key(|e| e.dkey);
        }
        let target = self.tile_bytes.div_ceil(h).max(1);
        let first_page = self.pages.len() as u32;
        let mut start = 0;
        while start < tile.len() {
            let mut end = start;
            let mut bytes = 0;
            while end < tile.len() {
                let boundary = end == start || tile[end].key != tile[end - 1].key;
                let pages_left = h - (self.pages.len() - first_page as usize);
                if boundary && bytes >= target && pages_left > 1 {
                    break;
                }
                bytes += tile[end].size();
                end += 1;
            }
            let chunk = &mut tile[start..end];
            if h > 1 {
                chunk.sort_by(|a, b| crate::iter::internal_cmp(&a.key, a.seq, &b.key, b.seq));
            }
            self.write_page(start, end, &tile)?;
            start = end;
        }
        let pages = self.pages.len() as u32 - first_page;
        let (mut filter_offset, mut filter_len) = (0, 0);
        if pages > 1 {
            self.hashes.clear();
            let mut keys: Vec<&[u8]> = tile.iter().map(|e| e.key.as_ref()).collect();
            keys.sort_unstable();
            keys.dedup();
            self.hashes.extend(keys.iter().map(|k| bloom::key_hash(k)));
            filter_offset = self.filters.len() as u32;
            bloom::build(&self.hashes, self.opts.bloom_bits_per_key, &mut self.filters);
            filter_len = self.filters.len() as u32 - filter_offset;
        }
        self.tiles.push(TileMeta {
            first_key,
            last_key,
            first_page,
            pages,
            filter_offset,
            filter_len,
        });
        self.tile_bytes = 0;
        Ok(())
    }

    fn write_page(&mut self, start: usize, end: usize, tile: &[Pending]) -> Result<()> {
        let chunk = &tile[start..end];
        self.hashes.clear();
        let (mut min_d, mut max_d) = (u64::MAX, 0);
        for (i, e) in chunk.iter().enumerate() {
            self.page.add(&e.key, e.seq, e.kind, &e.value);
            if i == 0 || e.key != chunk[i - 1].key {
                self.hashes.push(bloom::key_hash(&e.key));
            }
            min_d = min_d.min(e.dkey);
            max_d = max_d.max(e.dkey);
        }
        let filter_offset = self.filters.len() as u32;
        bloom::build(&self.hashes, self.opts.bloom_bits_per_key, &mut self.filters);
        self.block.clear();
        self.page.finish(self.opts.compression, &mut self.block);
        self.file.write_all(&self.block).at(&self.path)?;
        let summary = super::summary::summarize(
            self.opts.summarizer.as_ref(),
            chunk.iter().map(|e| (e.key.as_ref(), e.seq, e.kind, e.value.as_ref())),
        );
        self.pages.push(PageMeta {
            offset: self.offset,
            len: self.block.len() as u32,
            entries: chunk.len() as u32,
            min_key: chunk[0].key.to_vec(),
            max_key: chunk[chunk.len() - 1].key.to_vec(),
            min_dkey: min_d,
            max_dkey: max_d,
            filter_offset,
            filter_len: self.filters.len() as u32 - filter_offset,
            summary,
        });
        self.offset += self.block.len() as u64;
        Ok(())
    }

    /// Writes the filter block, index block and footer, fsyncs, and returns the file's metadata.
    #[cfg(test)]
    pub fn finish(self) -> Result<FileMeta> {
        self.finish_with_cells().map(|(meta, _)| meta)
    }

    /// Like `finish`, also returning the cells collected for the global range filter.
    pub fn finish_with_cells(mut self) -> Result<(FileMeta, Option<Cells>)> {
        if self.props.entries == 0 && self.tombstones.is_empty() {
            return Err(Error::InvalidArgument("cannot finish an empty table".into()));
        }
        let had_entries = self.props.entries > 0;
        self.props.largest = self.last_key().unwrap_or_default().to_vec();
        self.flush_tile()?;
        if !had_entries {
            self.props.min_seq = u64::MAX;
        }
        for f in &self.tombstones {
            let p = &mut self.props;
            if !had_entries && p.range_tombstones == 0 {
                p.smallest = f.lo.to_vec();
                p.largest = Vec::new();
            }
            p.smallest = p.smallest.clone().min(f.lo.to_vec());
            // A tombstone's end is exclusive: past the last entry, it makes the bound exclusive.
            let hi = if f.hi.is_empty() { vec![0xFF; MAX_KEY_LEN + 1] } else { f.hi.to_vec() };
            if hi > p.largest || (p.entries == 0 && p.range_tombstones == 0) {
                p.largest = hi;
                p.largest_exclusive = true;
            }
            let (lo_seq, hi_seq) = (*f.seqs.last().unwrap_or(&0), f.max_seq());
            p.min_seq = p.min_seq.min(lo_seq);
            p.max_seq = p.max_seq.max(hi_seq);
            p.min_tombstone_seq = Some(p.min_tombstone_seq.map_or(lo_seq, |s| s.min(lo_seq)));
            p.range_tombstones += 1;
        }
        if self.props.min_dkey == u64::MAX {
            self.props.min_dkey = 0;
        }
        let mut range_filter = None;
        if let Some(encoded) = self.range_filter.take().and_then(RosettaBuilder::finish) {
            let at = self.filters.len();
            if let (Ok(off), Ok(len)) = (u32::try_from(at), u32::try_from(encoded.len())) {
                self.filters.extend_from_slice(&encoded);
                range_filter = Some((off, len));
            }
        }
        let filter_offset = self.offset;
        self.block.clear();
        encode_block(&self.filters, Compression::None, &mut self.block);
        self.file.write_all(&self.block).at(&self.path)?;
        let filter_len = self.block.len() as u32;
        self.offset += filter_len as u64;

        self.props.created_at_ms = now_ms();
        self.props.tile_pages = self.opts.tile_pages as u32;
        self.props.pages = self.pages.len() as u32;
        self.props.tiles = self.tiles.len() as u32;
        let index = IndexBlock {
            tiles: std::mem::take(&mut self.tiles),
            pages: std::mem::take(&mut self.pages),
            range_tombstones: self
                .tombstones
                .iter()
                .map(|f| Fragment { lo: f.lo.to_vec(), hi: f.hi.to_vec(), seqs: f.seqs.to_vec() })
                .collect(),
            props: self.props.clone(),
            range_filter,
        };
        let raw = postcard::to_stdvec(&index)
            .map_err(|e| Error::InvalidArgument(format!("index encoding failed: {e}")))?;
        let index_offset = self.offset;
        self.block.clear();
        encode_block(&raw, Compression::Lz4, &mut self.block);
        self.file.write_all(&self.block).at(&self.path)?;
        let index_len = self.block.len() as u32;
        self.offset += index_len as u64;

        let footer = super::encode_footer((index_offset, index_len), (filter_offset, filter_len));
        self.file.write_all(&footer).at(&self.path)?;
        self.offset += footer.len() as u64;
        self.file.flush().at(&self.path)?;
        crate::fs::sync_file(self.file.get_ref(), &self.path)?;
        let cells = self.cells.take().map(CellCollector::finish);
        Ok((FileMeta { id: self.id, size: self.offset, props: self.props }, cells))
    }

    /// Path being written.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
