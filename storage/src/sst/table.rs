//! An open SST: footer, index and filters in memory; pages read through the page cache.

use std::fs::File;
use std::ops::Bound;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use super::fence::Fences;
use super::page::{decode_block, Page};
use super::{
    bloom, FileMeta, IndexBlock, IndexBlockV1, IndexBlockV2, FOOTER_LEN, FORMAT_VERSION, MAGIC,
};
use crate::batch::EntryKind;
use crate::cache::PageCache;
use crate::coding::{u32_at, u64_at};
use crate::error::IoContext;
use crate::filter::global::{CellCollector, Cells, GlobalSpec};
use crate::filter::rosetta::{DecodeError, Rosetta};
use crate::gloran::piece::{before_end, find, Piece, SeqList};
use crate::{Error, Result};

/// Source of [`Table`] cache ids.
static NEXT_CACHE_ID: AtomicU64 = AtomicU64::new(1);

/// A found version: sequence number, kind and value.
pub(crate) type Found = (u64, EntryKind, Bytes);

/// An open, immutable SST. When marked obsolete, the file is deleted once the last reference
/// (version, iterator or checkpoint) drops.
#[derive(Debug)]
pub(crate) struct Table {
    meta: FileMeta,
    path: PathBuf,
    file: File,
    index: IndexBlock,
    fences: Fences,
    tombstones: Vec<Piece>,
    filters: Bytes,
    /// The range filter (a view of `filters`), if the file has one.
    range_filter: Option<Rosetta>,
    /// Offset and length of the filter block and of the index block.
    blocks: [(u64, u32); 2],
    /// Page-cache key of this layout: unique per opened table, so a file whose pages were
    /// dropped (same id, new layout) never reads the old layout's cached pages.
    cache_id: u64,
    cache: Arc<PageCache>,
    /// Shared by every layout of this file (see [`Table::reopen`]): the file is deleted when the
    /// last of them drops after it was marked obsolete.
    guard: Arc<FileGuard>,
    /// The file's cells in the global range filter, once known (`None` inside: unreadable).
    cells: OnceLock<Option<Arc<Cells>>>,
}

/// Deletes an obsolete SST file once no open layout of it remains.
#[derive(Debug)]
struct FileGuard {
    path: PathBuf,
    obsolete: AtomicBool,
}

impl Drop for FileGuard {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::Acquire) {
            if let Err(e) = std::fs::remove_file(&self.path) {
                tracing::warn!(path = %self.path.display(), error = %e, "removing obsolete SST");
            }
        }
    }
}

impl Table {
    /// Opens the new layout `meta` of this table's file (after a page drop appended it). Both
    /// layouts share the file's lifetime: it is deleted only when neither is in use.
    pub fn reopen(&self, dir: &Path, meta: FileMeta) -> Result<Table> {
        let mut t = Table::open(dir, meta, self.cache.clone())?;
        t.guard = self.guard.clone();
        // A layout with pages dropped holds a subset of the keys: the old cells stay correct.
        if let Some(c) = self.cells.get() {
            let _ = t.cells.set(c.clone());
        }
        Ok(t)
    }

    /// Opens the SST file at `path` on its own, with the properties its index holds (for
    /// audits of files no manifest describes, such as a snapshot's).
    pub fn open_file(path: &Path, cache: Arc<PageCache>) -> Result<Table> {
        let bad = || Error::corruption(path, 0, "not an SST file name");
        let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(bad)?;
        let id = name.strip_suffix(".sst").and_then(|n| n.parse().ok()).ok_or_else(bad)?;
        let file = File::open(path).at(path)?;
        let size = file.metadata().at(path)?.len();
        let (index, _, _) = read_layout(&file, path, size)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        Table::open(dir, FileMeta { id, size, props: index.props }, cache)
    }

    /// Opens and validates the SST described by `meta` in `dir`.
    pub fn open(dir: &Path, meta: FileMeta, cache: Arc<PageCache>) -> Result<Table> {
        let path = dir.join(super::file_name(meta.id));
        let file = File::open(&path).at(&path)?;
        let size = file.metadata().at(&path)?.len();
        let corrupt = |off: u64, why: &str| Error::corruption(&path, off, why);
        if size != meta.size {
            return Err(corrupt(0, &format!("file size {size} != recorded size {}", meta.size)));
        }
        let (index, filters, blocks) = read_layout(&file, &path, size)?;
        let corrupt = |off: u64, why: &str| Error::corruption(&path, off, why);
        let index_off = blocks[1].0;
        if index.props != meta.props {
            return Err(corrupt(index_off, "file properties differ from the manifest"));
        }
        let fences = Fences::new(&index.tiles);
        let tombstones: Vec<Piece> = index
            .range_tombstones
            .iter()
            .map(|f| Piece {
                lo: Bytes::copy_from_slice(&f.lo),
                hi: Bytes::copy_from_slice(&f.hi),
                seqs: SeqList::from_slice(&f.seqs),
            })
            .collect();
        let ordered = tombstones.windows(2).all(|w| !w[0].hi.is_empty() && w[0].hi <= w[1].lo);
        let sane = tombstones.iter().all(|p| {
            !p.seqs.is_empty() && p.seqs.windows(2).all(|w| w[0] > w[1]) && before_end(&p.lo, &p.hi)
        });
        if !ordered || !sane {
            return Err(corrupt(index_off, "range-tombstone fragments out of order"));
        }
        let range_filter = match index.range_filter {
            None => None,
            Some((off, len)) => {
                let (off, len) = (off as usize, len as usize);
                let bytes = filters.slice(off..off + len); // bounds checked by `validate_index`
                match Rosetta::decode(bytes) {
                    Ok(f) => Some(f),
                    Err(DecodeError::OldVersion) => None,
                    Err(why) => return Err(corrupt(blocks[0].0, &format!("range filter: {why}"))),
                }
            }
        };
        Ok(Table {
            meta,
            path: path.clone(),
            file,
            index,
            fences,
            tombstones,
            filters,
            range_filter,
            blocks,
            cache_id: NEXT_CACHE_ID.fetch_add(1, Ordering::Relaxed),
            cache,
            guard: Arc::new(FileGuard { path: path.clone(), obsolete: AtomicBool::new(false) }),
            cells: OnceLock::new(),
        })
    }

    /// The file's metadata.
    pub fn meta(&self) -> &FileMeta {
        &self.meta
    }

    /// File id.
    pub fn id(&self) -> u64 {
        self.meta.id
    }

    /// Memory held by this table's filters, fence pointers and page index (not its cached pages).
    pub fn memory_bytes(&self) -> usize {
        let pages: usize =
            self.index.pages.iter().map(|p| p.min_key.len() + p.max_key.len() + 80).sum::<usize>()
                + self
                    .index
                    .pages
                    .iter()
                    .filter_map(|p| p.summary.as_ref())
                    .map(|s| s.data.len() + 40)
                    .sum::<usize>();
        let tiles: usize =
            self.index.tiles.iter().map(|t| t.first_key.len() + t.last_key.len() + 56).sum();
        let cells = self.cells.get().and_then(Option::as_ref).map_or(0, |c| c.memory_bytes());
        self.filters.len() + self.fences.memory_bytes() + pages + tiles + cells
    }

    /// Records the cells the writer collected (before the table is shared).
    pub fn set_cells(&self, cells: Cells) {
        let _ = self.cells.set(Some(Arc::new(cells)));
    }

    /// The file's cells for the global range filter, read from its keys the first time if the
    /// writer did not record them; `None` if the file cannot be read.
    pub fn cells(self: &Arc<Self>, spec: GlobalSpec) -> Option<Arc<Cells>> {
        self.cells
            .get_or_init(|| match self.read_cells(spec) {
                Ok(c) => Some(Arc::new(c)),
                Err(e) => {
                    tracing::warn!(file = self.id(), error = %e, "reading keys for the global filter");
                    None
                }
            })
            .clone()
    }

    fn read_cells(self: &Arc<Self>, spec: GlobalSpec) -> Result<Cells> {
        use crate::iter::EntryCursor;
        let mut collector = CellCollector::new(spec);
        let mut cursor = super::TableCursor::new(self.clone(), false);
        cursor.seek(&[])?;
        while cursor.valid() {
            collector.add(cursor.key());
            cursor.next()?;
        }
        Ok(collector.finish())
    }

    /// What the file's range filter says of `[lo, hi]`: `Some(false)` if the file holds no key
    /// there, `Some(true)` if it may; `None` if it has no filter or the filter cannot answer
    /// for such a range (not inside one head).
    pub fn may_hold(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> Option<bool> {
        let f = self.range_filter.as_ref()?;
        f.answers(lo, hi).then(|| f.may_overlap(lo, hi))
    }

    /// Bytes of the pages whose key range meets `[lo, hi]` (an estimate of the file's data in
    /// the range, from the index alone).
    pub fn range_bytes(&self, lo: &[u8], hi: &[u8]) -> u64 {
        let pages = self.index.pages.iter();
        pages
            .filter(|p| p.max_key.as_slice() >= lo && p.min_key.as_slice() <= hi)
            .map(|p| u64::from(p.len))
            .sum()
    }

    /// True if the file has a range filter.
    #[cfg(test)]
    pub fn has_range_filter(&self) -> bool {
        self.range_filter.is_some()
    }

    /// Range-tombstone fragments stored in this file (tombstone mode).
    pub fn tombstones(&self) -> &[Piece] {
        &self.tombstones
    }

    /// Newest range tombstone of this file covering `key` that a reader at `t` sees.
    pub fn covering_tombstone(&self, key: &[u8], t: u64) -> Option<u64> {
        find(&self.tombstones, key)?.visible(t)
    }

    /// Number of delete tiles.
    pub fn tile_count(&self) -> usize {
        self.index.tiles.len()
    }

    /// The index block (tiles and pages).
    pub fn index(&self) -> &IndexBlock {
        &self.index
    }

    /// Offset and length of the filter block.
    pub fn filter_block(&self) -> (u64, u32) {
        self.blocks[0]
    }

    /// Byte regions `(offset, len)` of the file this table reads (pages, filter and index blocks,
    /// footer), sorted. After a page drop the file also holds regions no version reads.
    pub fn referenced_regions(&self) -> Vec<(u64, u64)> {
        let mut r: Vec<(u64, u64)> =
            self.index.pages.iter().map(|p| (p.offset, u64::from(p.len))).collect();
        r.extend(self.blocks.iter().map(|&(o, l)| (o, u64::from(l))));
        r.push((self.meta.size - FOOTER_LEN as u64, FOOTER_LEN as u64));
        r.sort_unstable();
        r
    }

    /// Marks the file for deletion when the last reference drops.
    pub fn mark_obsolete(&self) {
        self.guard.obsolete.store(true, Ordering::Release);
    }

    /// Reads, verifies and decodes page `i`, through the cache.
    pub fn load_page(&self, i: usize, fill_cache: bool) -> Result<Arc<Page>> {
        if let Some(p) = self.cache.get(self.cache_id, i as u32) {
            return Ok(p);
        }
        let pm = self.index.pages.get(i).ok_or_else(|| {
            Error::corruption(&self.path, 0, format!("page {i} referenced but absent"))
        })?;
        let mut buf = vec![0u8; pm.len as usize];
        self.file.read_exact_at(&mut buf, pm.offset).at(&self.path)?;
        let corrupt =
            |why: &str| Error::corruption(&self.path, pm.offset, format!("page {i}: {why}"));
        let page = Page::new(decode_block(buf).map_err(corrupt)?).map_err(corrupt)?;
        if page.len() != pm.entries as usize {
            return Err(corrupt("entry count differs from index"));
        }
        let page = Arc::new(page);
        if fill_cache {
            self.cache.insert(self.cache_id, i as u32, page.clone());
        }
        Ok(page)
    }

    /// The smallest key of the table at or after `lo` (a page whose key range reaches past
    /// `lo` on both sides is searched, through the page cache).
    pub fn first_key_from(&self, lo: &[u8]) -> Result<Option<Vec<u8>>> {
        let ix = &self.index;
        let first = ix.tiles.partition_point(|t| t.last_key.as_slice() < lo);
        for t in &ix.tiles[first..] {
            let mut best: Option<Vec<u8>> = None;
            for p in t.first_page as usize..(t.first_page + t.pages) as usize {
                let pm = &ix.pages[p];
                if pm.max_key.as_slice() < lo || best.as_ref().is_some_and(|b| pm.min_key >= *b) {
                    continue;
                }
                let key = if pm.min_key.as_slice() >= lo {
                    pm.min_key.clone()
                } else {
                    let page = self.load_page(p, true)?;
                    let at = page.lower_bound(lo, u64::MAX);
                    match at < page.len() {
                        true => page.entry(at).key.to_vec(),
                        false => continue,
                    }
                };
                if best.as_ref().is_none_or(|b| key < *b) {
                    best = Some(key);
                }
            }
            if best.is_some() {
                return Ok(best);
            }
        }
        Ok(None)
    }

    /// Index of the tile whose key range may hold `key`.
    pub fn tile_for(&self, key: &[u8]) -> Option<usize> {
        self.fences.tile_for(key)
    }

    /// Newest version of `key` with sequence number `<= snapshot`. `hash` is
    /// [`bloom::key_hash`] of `key`.
    pub fn get(&self, key: &[u8], hash: u64, snapshot: u64) -> Result<Option<Found>> {
        let Some(t) = self.tile_for(key) else { return Ok(None) };
        let tile = &self.index.tiles[t];
        if tile.filter_len > 0 {
            let f = tile.filter_offset as usize;
            if !bloom::may_contain(&self.filters[f..f + tile.filter_len as usize], hash) {
                return Ok(None);
            }
        }
        let first = tile.first_page as usize;
        for p in first..first + tile.pages as usize {
            let pm = &self.index.pages[p];
            // With one page per tile the page bounds are the tile's, already checked.
            if tile.pages > 1 && (key < pm.min_key.as_slice() || key > pm.max_key.as_slice()) {
                continue;
            }
            let f = pm.filter_offset as usize;
            if !bloom::may_contain(&self.filters[f..f + pm.filter_len as usize], hash) {
                continue;
            }
            let page = self.load_page(p, true)?;
            let i = page.lower_bound(key, snapshot);
            if i < page.len() {
                let e = page.entry(i);
                if e.key == key {
                    return Ok(Some((e.seq, e.kind, page.value(&e))));
                }
            }
            if i > 0 && page.entry(i - 1).key == key {
                return Ok(None); // the key lives here, only in versions newer than the snapshot
            }
        }
        Ok(None)
    }
}

/// Structural checks of a decoded index block, so later lookups cannot index out of bounds. A
/// failed check is a corruption of `path` at `index_off`, the index block's offset.
fn validate_index(
    ix: &IndexBlock,
    data_end: u64,
    blocks: &[(u64, u32)],
    filters_len: usize,
    path: &Path,
    index_off: u64,
) -> Result<()> {
    let bad = |why: std::fmt::Arguments<'_>| {
        Err(Error::corruption(path, index_off, format!("index block: {why}")))
    };
    // Pages are contiguous when written; a page drop leaves holes and appends rewritten pages
    // after the filter block, so only bounds and disjointness (from each other and from the
    // filter and index blocks) are checked.
    let mut spans: Vec<(u64, u64)> = Vec::with_capacity(ix.pages.len() + blocks.len());
    spans.extend(blocks.iter().map(|&(o, l)| (o, o + u64::from(l))));
    for (i, p) in ix.pages.iter().enumerate() {
        let end = p.offset.checked_add(p.len as u64).filter(|&e| e <= data_end);
        let Some(end) = end else { return bad(format_args!("page {i} out of bounds")) };
        spans.push((p.offset, end));
        if p.filter_offset as usize + p.filter_len as usize > filters_len {
            return bad(format_args!("page {i} filter out of bounds"));
        }
        if p.min_key > p.max_key || p.min_dkey > p.max_dkey {
            return bad(format_args!("page {i} has inverted bounds"));
        }
        if p.summary.as_ref().is_some_and(|s| s.min_seq > s.max_seq) {
            return bad(format_args!("page {i} summary has inverted sequence numbers"));
        }
    }
    spans.sort_unstable();
    if spans.windows(2).any(|w| w[0].1 > w[1].0) {
        return bad(format_args!("pages overlap"));
    }
    let mut next_page = 0u32;
    for (i, t) in ix.tiles.iter().enumerate() {
        if t.first_page != next_page || t.pages == 0 {
            return bad(format_args!("tile {i} page range not contiguous"));
        }
        next_page = t.first_page + t.pages;
        if next_page as usize > ix.pages.len() || t.first_key > t.last_key {
            return bad(format_args!("tile {i} out of bounds"));
        }
        if t.filter_offset as usize + t.filter_len as usize > filters_len {
            return bad(format_args!("tile {i} filter out of bounds"));
        }
        if i > 0 && ix.tiles[i - 1].last_key >= t.first_key {
            return bad(format_args!("tile {i} overlaps its predecessor"));
        }
    }
    if next_page as usize != ix.pages.len() {
        return bad(format_args!("pages not covered by tiles"));
    }
    if let Some((off, len)) = ix.range_filter {
        if off as usize + len as usize > filters_len {
            return bad(format_args!("range filter out of bounds"));
        }
    }
    Ok(())
}

impl Table {
    /// Path of the file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A file's index block, filter block, and the offset and length of both (filter first).
type Layout = (IndexBlock, Bytes, [(u64, u32); 2]);

/// Reads and checks the footer, filter block and index block of the SST `file` of `size` bytes.
fn read_layout(file: &File, path: &Path, size: u64) -> Result<Layout> {
    let corrupt = |off: u64, why: &str| Error::corruption(path, off, why);
    if size < FOOTER_LEN as u64 {
        return Err(corrupt(0, "file shorter than footer"));
    }
    let foot_at = size - FOOTER_LEN as u64;
    let mut footer = [0u8; FOOTER_LEN];
    file.read_exact_at(&mut footer, foot_at).at(path)?;
    let bad_footer = || corrupt(foot_at, "malformed footer");
    if u32_at(&footer, 36) != Some(crc32fast::hash(&footer[..36])) {
        return Err(corrupt(foot_at, "footer checksum mismatch"));
    }
    if u64_at(&footer, 28) != Some(MAGIC) {
        return Err(corrupt(foot_at, "bad magic number"));
    }
    let version = u32_at(&footer, 24).ok_or_else(bad_footer)?;
    if !(1..=FORMAT_VERSION).contains(&version) {
        return Err(Error::unsupported_format(path, "table", version, 1..=FORMAT_VERSION));
    }
    let index_off = u64_at(&footer, 0).ok_or_else(bad_footer)?;
    let index_len = u32_at(&footer, 8).ok_or_else(bad_footer)?;
    let filter_off = u64_at(&footer, 12).ok_or_else(bad_footer)?;
    let filter_len = u32_at(&footer, 20).ok_or_else(bad_footer)?;
    let read_block = |off: u64, len: u32, what: &str| -> Result<Bytes> {
        if off.checked_add(len as u64).is_none_or(|end| end > foot_at) {
            return Err(corrupt(foot_at, &format!("{what} block out of bounds")));
        }
        let mut buf = vec![0u8; len as usize];
        file.read_exact_at(&mut buf, off).at(path)?;
        decode_block(buf).map_err(|why| corrupt(off, &format!("{what} block: {why}")))
    };
    let filters = read_block(filter_off, filter_len, "filter")?;
    let raw_index = read_block(index_off, index_len, "index")?;
    let undecodable =
        |e: postcard::Error| corrupt(index_off, &format!("index block undecodable: {e}"));
    let index: IndexBlock = match version {
        1 => postcard::from_bytes::<IndexBlockV1>(&raw_index).map_err(undecodable)?.into(),
        2 => postcard::from_bytes::<IndexBlockV2>(&raw_index).map_err(undecodable)?.into(),
        _ => postcard::from_bytes(&raw_index).map_err(undecodable)?,
    };
    let blocks = [(filter_off, filter_len), (index_off, index_len)];
    validate_index(&index, foot_at, &blocks, filters.len(), path, index_off)?;
    Ok((index, filters, blocks))
}
