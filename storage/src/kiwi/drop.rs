//! Executing a time-window delete on one SST: full page drops, edge-page rewrites, and an
//! appended index block and footer.
//!
//! The filter block is not rewritten: the new index points at the filters already in the file.
//! A rewritten page keeps the filter of the page it replaces, and a tile keeps its tile filter;
//! both answer for a superset of the keys left, so they still have no false negatives (removed
//! keys only cost a wasted probe until the next compaction rebuilds the filters). Filters hold
//! hashes of keys, never keys or values.

use std::fs::OpenOptions;
use std::io::Write;

use super::window::TimeWindow;
use crate::batch::EntryKind;
use crate::error::IoContext;
use crate::sst::page::{encode_block, PageBuilder};
use crate::sst::{FileMeta, IndexBlock, PageMeta, Table, TileMeta};
use crate::{Compression, Error, Options, Result};

/// Gives the file at `path` an inode of its own if it has other hard links (a checkpoint), so
/// editing it in place cannot change the checkpoint: the file is copied and the copy renamed over
/// it. Open handles keep reading the old inode.
fn unshare(path: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    if std::fs::metadata(path).at(path)?.nlink() <= 1 {
        return Ok(());
    }
    let tmp = path.with_extension("sst.tmp");
    std::fs::copy(path, &tmp).at(&tmp)?;
    crate::fs::sync_file(&std::fs::File::open(&tmp).at(&tmp)?, &tmp)?;
    std::fs::rename(&tmp, path).at(path)?;
    match path.parent() {
        Some(dir) => crate::fs::sync_dir(dir),
        None => Ok(()),
    }
}

/// What a time-window delete did to one SST.
#[derive(Debug)]
pub(crate) struct DropOutcome {
    /// The file's new metadata; `None` if every page was dropped (the file goes away).
    pub meta: Option<FileMeta>,
    /// Pages dropped without being read.
    pub pages_dropped: u64,
    /// Pages read because they straddle the window (rewritten, dropped or kept as they were).
    pub pages_read: u64,
    /// Pages written again without their covered entries.
    pub pages_rewritten: u64,
    /// Bytes of pages read.
    pub bytes_read: u64,
    /// Bytes appended to the file (rewritten pages, index block, footer).
    pub bytes_written: u64,
    /// Entries removed.
    pub entries_removed: u64,
}

enum Fate {
    Keep,
    Drop,
    Rewrite(Vec<(bytes::Bytes, u64, EntryKind, bytes::Bytes)>),
}

/// Applies `w` to `table`; `Ok(None)` if no entry of the table is covered. The file is extended
/// in place (fsynced); the caller commits the returned metadata.
pub(crate) fn drop_window(
    table: &Table,
    w: &TimeWindow,
    opts: &Options,
) -> Result<Option<DropOutcome>> {
    let meta = table.meta();
    let p = &meta.props;
    if p.max_dkey < w.t_lo
        || p.min_dkey >= w.t_hi
        || p.min_seq >= w.seq
        || p.largest.as_slice() < w.lo.as_slice()
        || (!w.hi.is_empty() && p.smallest.as_slice() >= w.hi.as_slice())
    {
        return Ok(None);
    }
    let ix = table.index();
    let all_older = p.max_seq < w.seq;
    let mut out = DropOutcome {
        meta: None,
        pages_dropped: 0,
        pages_read: 0,
        pages_rewritten: 0,
        bytes_read: 0,
        bytes_written: 0,
        entries_removed: 0,
    };
    let mut fates = Vec::with_capacity(ix.pages.len());
    for (i, pm) in ix.pages.iter().enumerate() {
        let fate = if w.misses_page(pm) {
            Fate::Keep
        } else if all_older && w.contains_page(pm) {
            out.pages_dropped += 1;
            out.entries_removed += u64::from(pm.entries);
            Fate::Drop
        } else {
            out.pages_read += 1;
            out.bytes_read += u64::from(pm.len);
            let page = table.load_page(i, false)?;
            let mut kept = Vec::with_capacity(page.len());
            for j in 0..page.len() {
                let e = page.entry(j);
                if e.seq < w.seq && w.covers(e.key, opts.delete_key.extract(e.key)) {
                    continue;
                }
                kept.push((page.key_bytes(j), e.seq, e.kind, page.value(&e)));
            }
            out.entries_removed += (page.len() - kept.len()) as u64;
            match kept.len() {
                0 => Fate::Drop,
                n if n == page.len() => Fate::Keep,
                _ => Fate::Rewrite(kept),
            }
        };
        fates.push(fate);
    }
    if out.entries_removed == 0 {
        return Ok(None);
    }
    let path = table.path().to_path_buf();
    unshare(&path)?;
    // Bytes past the committed size are an earlier attempt cut short (a full disk): cut off.
    let f = OpenOptions::new().write(true).open(&path).at(&path)?;
    if f.metadata().at(&path)?.len() > meta.size {
        f.set_len(meta.size).at(&path)?;
    }
    let mut f = f;
    std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(meta.size)).at(&path)?;
    let mut file = std::io::BufWriter::new(f);
    let mut offset = meta.size;
    let mut pages: Vec<PageMeta> = Vec::new();
    let mut tiles: Vec<TileMeta> = Vec::new();
    let mut builder = PageBuilder::default();
    let mut block = Vec::new();
    let (mut entries, mut min_d, mut max_d) = (0u64, u64::MAX, 0u64);
    for t in &ix.tiles {
        let first_page = pages.len() as u32;
        let range = t.first_page as usize..(t.first_page + t.pages) as usize;
        for (i, fate) in range.clone().zip(&fates[range]) {
            let mut pm = ix.pages[i].clone();
            match fate {
                Fate::Drop => continue,
                Fate::Keep => {}
                Fate::Rewrite(kept) => {
                    let (mut lo_d, mut hi_d) = (u64::MAX, 0u64);
                    for (key, seq, kind, value) in kept {
                        builder.add(key, *seq, *kind, value);
                        let d = opts.delete_key.extract(key);
                        (lo_d, hi_d) = (lo_d.min(d), hi_d.max(d));
                    }
                    block.clear();
                    builder.finish(opts.compression, &mut block);
                    file.write_all(&block).at(&path)?;
                    pm = PageMeta {
                        offset,
                        len: block.len() as u32,
                        entries: kept.len() as u32,
                        min_key: kept[0].0.to_vec(),
                        max_key: kept[kept.len() - 1].0.to_vec(),
                        min_dkey: lo_d,
                        max_dkey: hi_d,
                        summary: crate::sst::summary::summarize(
                            opts.page_summary.as_ref(),
                            kept.iter().map(|(k, s, kind, v)| (k.as_ref(), *s, *kind, v.as_ref())),
                        ),
                        ..pm
                    };
                    offset += block.len() as u64;
                    out.pages_rewritten += 1;
                }
            }
            entries += u64::from(pm.entries);
            (min_d, max_d) = (min_d.min(pm.min_dkey), max_d.max(pm.max_dkey));
            pages.push(pm);
        }
        let tile_pages = &pages[first_page as usize..];
        if tile_pages.is_empty() {
            continue; // every page of the tile dropped: the tile disappears from the fences
        }
        // Tile pages are delete-key ordered, so the key bounds come from every page.
        let first_key = tile_pages.iter().map(|p| &p.min_key).min().cloned().unwrap_or_default();
        let last_key = tile_pages.iter().map(|p| &p.max_key).max().cloned().unwrap_or_default();
        let n = pages.len() as u32 - first_page;
        tiles.push(TileMeta { first_key, last_key, first_page, pages: n, ..t.clone() });
    }
    if pages.is_empty() && ix.range_tombstones.is_empty() {
        return Ok(Some(out)); // nothing left: the caller deletes the file
    }
    let mut props = p.clone();
    let scale = |x: u64| (x as u128 * entries as u128 / p.entries.max(1) as u128) as u64;
    props.raw_key_bytes = scale(p.raw_key_bytes);
    props.raw_value_bytes = scale(p.raw_value_bytes);
    props.tombstones = p.tombstones.min(entries); // an upper bound
    props.entries = entries;
    props.pages = pages.len() as u32;
    props.tiles = tiles.len() as u32;
    if !pages.is_empty() {
        props.min_dkey = min_d;
        props.max_dkey = max_d;
    }
    if ix.range_tombstones.is_empty() {
        // Tighter bounds: no deleted key stays named in the metadata.
        props.smallest = tiles.first().map(|t| t.first_key.clone()).unwrap_or_default();
        props.largest = tiles.last().map(|t| t.last_key.clone()).unwrap_or_default();
    }
    let index = IndexBlock {
        tiles,
        pages,
        range_tombstones: ix.range_tombstones.clone(),
        props: props.clone(),
        // Still sound: dropped keys only make it answer "maybe" more often.
        range_filter: ix.range_filter,
    };
    let raw = postcard::to_stdvec(&index)
        .map_err(|e| Error::InvalidArgument(format!("index encoding failed: {e}")))?;
    let index_offset = offset;
    block.clear();
    encode_block(&raw, Compression::Lz4, &mut block);
    file.write_all(&block).at(&path)?;
    let index_len = block.len() as u32;
    offset += u64::from(index_len);
    let footer = crate::sst::encode_footer((index_offset, index_len), table.filter_block());
    file.write_all(&footer).at(&path)?;
    offset += footer.len() as u64;
    file.flush().at(&path)?;
    crate::fs::sync_file(file.get_ref(), &path)?;
    out.bytes_written = offset - meta.size;
    out.meta = Some(FileMeta { id: meta.id, size: offset, props });
    Ok(Some(out))
}
