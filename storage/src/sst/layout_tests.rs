//! KiWi+ layout invariants of written tables.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;
use proptest::prelude::*;

use super::writer::WriterOptions;
use super::{bloom, Table, TableCursor, TableWriter};
use crate::batch::EntryKind;
use crate::cache::PageCache;
use crate::filter::{RangeFilterOptions, RangeFilterSpec};
use crate::iter::EntryCursor;
use crate::options::{Compression, DeleteKeyExtractor};
use crate::Error;

type Entry = (Vec<u8>, u64, EntryKind, Vec<u8>);

fn ts_key(series: u64, ts: u64) -> Vec<u8> {
    let mut k = series.to_be_bytes().to_vec();
    k.extend_from_slice(&ts.to_be_bytes());
    k
}

fn write(dir: &std::path::Path, id: u64, h: usize, entries: &[Entry]) -> Arc<Table> {
    let opts = WriterOptions {
        summarizer: None,
        page_size: 512,
        tile_pages: h,
        bloom_bits_per_key: 10,
        compression: Compression::Lz4,
        delete_key: DeleteKeyExtractor::trailing_u64_be(),
        range_filter: Some(RangeFilterSpec::for_range(
            &RangeFilterOptions {
                key_len: 16,
                bits_per_key: 12.0,
                default_range: 64,
                range_buckets: 16,
            },
            64,
        )),
        global_cells: None,
    };
    let mut w = TableWriter::create(id, &dir.join(super::file_name(id)), opts).unwrap();
    for (k, s, kind, v) in entries {
        w.add(Bytes::from(k.clone()), *s, *kind, Bytes::from(v.clone())).unwrap();
    }
    let meta = w.finish().unwrap();
    Arc::new(Table::open(dir, meta, Arc::new(PageCache::new(1 << 20))).unwrap())
}

/// Sorted entries: many series, timestamps independent of the series, some multi-version keys.
fn entries_strategy() -> impl Strategy<Value = Vec<Entry>> {
    prop::collection::btree_map((0u64..40, 0u64..10_000), (1usize..3, 0usize..60), 1..600).prop_map(
        |m: BTreeMap<(u64, u64), (usize, usize)>| {
            let mut out = Vec::new();
            let mut seq = 1_000_000u64;
            for ((s, t), (versions, vlen)) in m {
                for v in 0..versions {
                    seq -= 1;
                    let kind = if (s + t + v as u64).is_multiple_of(7) {
                        EntryKind::Delete
                    } else {
                        EntryKind::Put
                    };
                    let val = if kind == EntryKind::Put { vec![b'v'; vlen] } else { Vec::new() };
                    out.push((ts_key(s, t), seq + 10 * (versions - v) as u64, kind, val));
                }
            }
            out
        },
    )
}

fn read_all(t: &Arc<Table>) -> Vec<Entry> {
    let mut c = TableCursor::new(t.clone(), false);
    c.seek_to_first().unwrap();
    let mut out = Vec::new();
    while c.valid() {
        out.push((c.key().to_vec(), c.seq(), c.kind(), c.value().to_vec()));
        c.next().unwrap();
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    /// Tiles are in key order with correct fences; pages of a tile are ordered by delete key and
    /// sorted by key inside; all versions of a key share one page; the cursor returns the input.
    #[test]
    fn kiwi_invariants(entries in entries_strategy(), h in 1usize..9) {
        let dir = tempfile::tempdir().unwrap();
        let t = write(dir.path(), 1, h, &entries);
        let ix = t.index();
        let dkey = DeleteKeyExtractor::trailing_u64_be();
        let mut seen_keys = std::collections::HashSet::new();
        for (ti, tile) in ix.tiles.iter().enumerate() {
            prop_assert!(tile.pages as usize <= h, "tile {ti} has {} pages > h = {h}", tile.pages);
            let mut tile_min: Option<Vec<u8>> = None;
            let mut tile_max: Option<Vec<u8>> = None;
            let mut prev_max_d: Option<u64> = None;
            for p in tile.first_page..tile.first_page + tile.pages {
                let pm = &ix.pages[p as usize];
                let page = t.load_page(p as usize, false).unwrap();
                let mut keys_here = Vec::new();
                for i in 0..page.len() {
                    let e = page.entry(i);
                    if i > 0 {
                        let prev = page.entry(i - 1);
                        prop_assert!(crate::iter::internal_cmp(prev.key, prev.seq, e.key, e.seq).is_lt());
                    }
                    let d = dkey.extract(e.key);
                    prop_assert!(pm.min_dkey <= d && d <= pm.max_dkey);
                    prop_assert!(pm.min_key.as_slice() <= e.key && e.key <= pm.max_key.as_slice());
                    if i == 0 || page.entry(i - 1).key != e.key {
                        keys_here.push(e.key.to_vec());
                    }
                }
                if let Some(prev) = prev_max_d {
                    prop_assert!(prev <= pm.min_dkey, "pages of tile {ti} not ordered by delete key");
                }
                prev_max_d = Some(pm.max_dkey);
                for k in keys_here {
                    prop_assert!(seen_keys.insert(k.clone()), "a key's versions span pages");
                    tile_min = Some(tile_min.map_or(k.clone(), |m: Vec<u8>| m.min(k.clone())));
                    tile_max = Some(tile_max.map_or(k.clone(), |m: Vec<u8>| m.max(k.clone())));
                }
            }
            prop_assert_eq!(tile_min.as_ref(), Some(&tile.first_key), "fence pointer of tile {}", ti);
            prop_assert_eq!(tile_max.as_ref(), Some(&tile.last_key));
            if ti > 0 {
                prop_assert!(ix.tiles[ti - 1].last_key < tile.first_key);
            }
        }
        prop_assert_eq!(read_all(&t), entries.clone());
        // The range filter never hides a key of a one-series range.
        prop_assert!(t.has_range_filter());
        for (k, _, _, _) in entries.iter().step_by(3) {
            let (s, ts) = (u64::from_be_bytes(k[..8].try_into().unwrap()), u64::from_be_bytes(k[8..].try_into().unwrap()));
            let (lo, hi) = (ts_key(s, ts.saturating_sub(5)), ts_key(s, ts + 5));
            prop_assert_eq!(t.may_hold(Bound::Included(&lo), Bound::Excluded(&hi)), Some(true));
            prop_assert_eq!(t.may_hold(Bound::Included(k), Bound::Included(k)), Some(true));
        }
        // Point lookups at the newest version and at a snapshot below it.
        for (k, s, kind, v) in entries.iter().step_by(5) {
            let got = t.get(k, bloom::key_hash(k), *s).unwrap().unwrap();
            prop_assert_eq!((got.0, got.1, got.2.to_vec()), (*s, *kind, v.clone()));
            prop_assert!(t.get(k, bloom::key_hash(k), 0).unwrap().is_none());
        }
    }

    /// h = 1 is the classic layout: one page per tile, pages in key order.
    #[test]
    fn h1_is_the_classic_layout(entries in entries_strategy()) {
        let dir = tempfile::tempdir().unwrap();
        let t = write(dir.path(), 1, 1, &entries);
        let ix = t.index();
        prop_assert_eq!(ix.tiles.len(), ix.pages.len());
        for (i, tile) in ix.tiles.iter().enumerate() {
            prop_assert_eq!(tile.pages, 1);
            prop_assert_eq!(&ix.pages[i].min_key, &tile.first_key);
            prop_assert_eq!(&ix.pages[i].max_key, &tile.last_key);
        }
        for w in ix.pages.windows(2) {
            prop_assert!(w[0].max_key < w[1].min_key);
        }
    }
}

#[test]
fn tiles_cluster_by_time_so_old_pages_hold_only_old_data() {
    // High cardinality: 1024 series with 4 points each. With h = 1 every page holds a few whole
    // series and so spans all timestamps; with h = 8 a tile's pages partition its time range, so
    // each tile has pages holding only the oldest points, droppable without being read.
    let mut entries = Vec::new();
    for s in 0..1024u64 {
        for ts in [0u64, 20, 40, 60] {
            entries.push((ts_key(s, ts), 100, EntryKind::Put, vec![b'x'; 20]));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let kiwi = write(dir.path(), 1, 8, &entries);
    let classic = write(dir.path(), 2, 1, &entries);
    let droppable = |t: &Arc<Table>| t.index().pages.iter().filter(|p| p.max_dkey < 20).count();
    assert_eq!(droppable(&classic), 0, "classic pages each span all timestamps");
    assert!(droppable(&kiwi) >= kiwi.index().tiles.len(), "every KiWi tile has an all-old page");
}

/// A file of format version 1 (no range filter) is still read, with the same entries.
#[test]
fn format_version_1_files_are_read() {
    use std::io::Write;
    let mut entries: Vec<Entry> =
        (0..500u64).map(|i| (ts_key(i % 7, i), 10, EntryKind::Put, vec![b'x'; 30])).collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let dir = tempfile::tempdir().unwrap();
    let t = write(dir.path(), 1, 4, &entries);
    assert!(t.has_range_filter());
    let empty = (ts_key(3, 1_000_000), ts_key(3, 1_000_010));
    assert_eq!(t.may_hold(Bound::Included(&empty.0), Bound::Included(&empty.1)), Some(false));
    // Ranges across heads (series) get no answer.
    let across = (ts_key(3, 0), ts_key(4, 0));
    assert_eq!(t.may_hold(Bound::Included(&across.0), Bound::Included(&across.1)), None);
    // Rewrite the index without the range filter, behind a version 1 footer.
    let mut ix = t.index().clone();
    ix.range_filter = None;
    let v1 = super::IndexBlockV1 {
        tiles: ix.tiles,
        pages: ix
            .pages
            .into_iter()
            .map(|p| super::props::PageMetaV2 {
                offset: p.offset,
                len: p.len,
                entries: p.entries,
                min_key: p.min_key,
                max_key: p.max_key,
                min_dkey: p.min_dkey,
                max_dkey: p.max_dkey,
                filter_offset: p.filter_offset,
                filter_len: p.filter_len,
            })
            .collect(),
        range_tombstones: ix.range_tombstones,
        props: ix.props,
    };
    let path = t.path().to_path_buf();
    let size = std::fs::metadata(&path).unwrap().len();
    let mut block = Vec::new();
    super::page::encode_block(&postcard::to_stdvec(&v1).unwrap(), Compression::Lz4, &mut block);
    let (filter_off, filter_len) = t.filter_block();
    let mut footer = Vec::new();
    footer.extend_from_slice(&size.to_le_bytes());
    footer.extend_from_slice(&(block.len() as u32).to_le_bytes());
    footer.extend_from_slice(&filter_off.to_le_bytes());
    footer.extend_from_slice(&filter_len.to_le_bytes());
    footer.extend_from_slice(&1u32.to_le_bytes());
    footer.extend_from_slice(&super::MAGIC.to_le_bytes());
    let crc = crc32fast::hash(&footer);
    footer.extend_from_slice(&crc.to_le_bytes());
    drop(t);
    let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(&block).unwrap();
    f.write_all(&footer).unwrap();
    drop(f);
    let old = Arc::new(Table::open_file(&path, Arc::new(PageCache::new(1 << 20))).unwrap());
    assert!(!old.has_range_filter());
    assert_eq!(old.may_hold(Bound::Included(&empty.0), Bound::Included(&empty.1)), None);
    assert_eq!(read_all(&old), entries);
    // An unknown future version is refused.
    let mut bytes = std::fs::read(&path).unwrap();
    let n = bytes.len();
    bytes[n - 16..n - 12].copy_from_slice(&9u32.to_le_bytes());
    let crc = crc32fast::hash(&bytes[n - 40..n - 4]);
    bytes[n - 4..].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let err = Table::open_file(&path, Arc::new(PageCache::new(1 << 20))).unwrap_err();
    assert!(matches!(err, Error::UnsupportedFormat { found: 9, .. }), "{err:?}");
    let text = err.to_string();
    let named = format!("{}: table format 9; this build (ebb ", path.display());
    assert!(text.starts_with(&named) && text.ends_with("reads table formats 1-3"), "{text}");
}
