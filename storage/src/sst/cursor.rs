//! Cursor over one SST: walks tiles in key order, merging the pages of each tile.

use std::sync::Arc;

use bytes::Bytes;

use super::page::Page;
use super::Table;
use crate::batch::EntryKind;
use crate::iter::{internal_cmp, EntryCursor};
use crate::Result;

/// Cursor over the entries of one table in internal order. Inside a tile (whose pages are ordered
/// by delete key, not sort key) it merges the tile's pages.
#[derive(Debug)]
pub(crate) struct TableCursor {
    table: Arc<Table>,
    fill_cache: bool,
    tile: usize,
    pages: Vec<(Arc<Page>, usize)>,
    /// The current entry of every page with entries left, in *descending* internal order: the
    /// cursor's entry is the last. Moving on decodes one entry and re-inserts one head, so a
    /// tile of h pages costs `O(log h)` comparisons per entry, not h decodes.
    order: Vec<Head>,
    cur: Option<usize>,
    prune: Prune,
}

/// A page's current entry: its key's place in the page and its sequence number.
#[derive(Debug, Clone, Copy)]
struct Head {
    page: usize,
    key_at: usize,
    key_len: usize,
    seq: u64,
}

/// Pages a scan can skip without reading: those wholly past its end key, and (for a scan by
/// time) those whose delete-key range misses its time window. Every version of a key has the
/// same delete key, so a skipped page never hides a version the scan would return.
#[derive(Debug, Clone, Default)]
pub(crate) struct Prune {
    /// End key of the scan and whether it is inclusive.
    pub end: Option<(Vec<u8>, bool)>,
    /// Delete-key window `[lo, hi)` of the scan.
    pub time: Option<(u64, u64)>,
    /// Pages answered from their summaries instead (summarized scans).
    pub summaries: Option<Arc<dyn PageOffer>>,
}

/// Decides, for a summarized scan, whether page `page` of `table` is answered from its summary
/// (and so skipped). Asked once per page, the first time the cursor reaches its tile; a cursor
/// loads each tile once in a forward scan, so no page is answered twice.
pub(crate) trait PageOffer: Send + Sync + std::fmt::Debug {
    /// True if the page was answered from its summary.
    fn offer(&self, table: &Table, page: usize) -> bool;

    /// The summarized runs of memtable `mem` (memtable `source` of the scan's state) wholly at
    /// or after `from` that were answered from their summaries: their key ranges, in key
    /// order. Asked once per memtable cursor, at its first seek.
    fn offer_runs(
        &self,
        source: usize,
        mem: &crate::memtable::Memtable,
        from: &[u8],
    ) -> Vec<(Vec<u8>, Vec<u8>)>;
}

impl Prune {
    fn past_end(&self, key: &[u8]) -> bool {
        match &self.end {
            Some((e, true)) => key > e.as_slice(),
            Some((e, false)) => key >= e.as_slice(),
            None => false,
        }
    }

    fn skips(&self, pm: &super::PageMeta, target: Option<&[u8]>) -> bool {
        target.is_some_and(|t| pm.max_key.as_slice() < t)
            || self.past_end(&pm.min_key)
            || self.time.is_some_and(|(lo, hi)| pm.max_dkey < lo || pm.min_dkey >= hi)
    }
}

impl TableCursor {
    /// A cursor, not yet positioned. `fill_cache = false` for compaction reads.
    pub fn new(table: Arc<Table>, fill_cache: bool) -> Self {
        TableCursor {
            table,
            fill_cache,
            tile: 0,
            pages: Vec::new(),
            order: Vec::new(),
            cur: None,
            prune: Prune::default(),
        }
    }

    /// The same cursor, skipping the pages `prune` rules out (scans).
    pub fn pruned(mut self, prune: Prune) -> Self {
        self.prune = prune;
        self
    }

    fn load_tile(&mut self, t: usize, target: Option<&[u8]>) -> Result<()> {
        self.tile = t;
        self.pages.clear();
        self.order.clear();
        self.cur = None;
        let Some(tile) = self.table.index().tiles.get(t) else { return Ok(()) };
        let (first, n) = (tile.first_page as usize, tile.pages as usize);
        let summaries = self.prune.summaries.clone();
        for p in first..first + n {
            let pm = &self.table.index().pages[p];
            if self.prune.skips(pm, target) {
                continue;
            }
            // Only a page wholly at or past the seek target: an answered page is never read.
            if let Some(s) = &summaries {
                if target.is_none_or(|t| pm.min_key.as_slice() >= t) && s.offer(&self.table, p) {
                    continue;
                }
            }
            let page = self.table.load_page(p, self.fill_cache)?;
            let pos = target.map_or(0, |k| page.lower_bound(k, u64::MAX));
            self.pages.push((page, pos));
        }
        self.pick();
        Ok(())
    }

    /// The head of page `i`, if it has entries left.
    fn head(&self, i: usize) -> Option<Head> {
        let (page, pos) = &self.pages[i];
        (*pos < page.len()).then(|| {
            let e = page.entry(*pos);
            Head { page: i, key_at: e.value_at - e.key.len(), key_len: e.key.len(), seq: e.seq }
        })
    }

    fn key_of(&self, h: &Head) -> &[u8] {
        self.pages[h.page].0.bytes_at(h.key_at, h.key_len)
    }

    /// Orders the heads of every page (after a tile is loaded).
    fn pick(&mut self) {
        let mut order: Vec<Head> = (0..self.pages.len()).filter_map(|i| self.head(i)).collect();
        order.sort_by(|a, b| internal_cmp(self.key_of(b), b.seq, self.key_of(a), a.seq));
        self.order = order;
        self.cur = self.order.last().map(|h| h.page);
    }

    /// Moves the current page on by one entry.
    fn advance(&mut self) {
        let Some(h) = self.order.pop() else { return };
        self.pages[h.page].1 += 1;
        if let Some(n) = self.head(h.page) {
            let key = self.key_of(&n);
            // Descending: every head before the insertion point sorts after the new one.
            let at = self.order.partition_point(|x| {
                internal_cmp(self.key_of(x), x.seq, key, n.seq) == std::cmp::Ordering::Greater
            });
            self.order.insert(at, n);
        }
        self.cur = self.order.last().map(|h| h.page);
    }

    fn skip_empty_tiles(&mut self) -> Result<()> {
        while self.cur.is_none() && self.tile + 1 < self.table.tile_count() {
            if self.prune.past_end(&self.table.index().tiles[self.tile + 1].first_key) {
                return Ok(()); // every later tile lies past the end of the scan
            }
            self.load_tile(self.tile + 1, None)?;
        }
        Ok(())
    }

    /// Positions at the first entry of the table.
    pub fn seek_to_first(&mut self) -> Result<()> {
        self.load_tile(0, None)?;
        self.skip_empty_tiles()
    }

    fn current(&self) -> (&Page, usize) {
        let (page, pos) = &self.pages[self.cur.unwrap_or(0)];
        (page, *pos)
    }
}

impl EntryCursor for TableCursor {
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        let tiles = &self.table.index().tiles;
        let t = tiles.partition_point(|t| t.first_key.as_slice() <= target).saturating_sub(1);
        self.load_tile(t, Some(target))?;
        self.skip_empty_tiles()
    }

    fn next(&mut self) -> Result<()> {
        if self.cur.is_some() {
            self.advance();
            self.skip_empty_tiles()?;
        }
        Ok(())
    }

    fn valid(&self) -> bool {
        self.cur.is_some()
    }

    fn key(&self) -> &[u8] {
        self.order.last().map_or(&[], |h| self.key_of(h))
    }

    fn seq(&self) -> u64 {
        self.order.last().map_or(0, |h| h.seq)
    }

    fn kind(&self) -> EntryKind {
        let (p, i) = self.current();
        p.entry(i).kind
    }

    fn value(&self) -> Bytes {
        let (p, i) = self.current();
        p.value(&p.entry(i))
    }

    fn value_ref(&self) -> &[u8] {
        let (p, i) = self.current();
        p.value_ref(&p.entry(i))
    }

    fn key_bytes(&self) -> Bytes {
        let (p, i) = self.current();
        p.key_bytes(i)
    }
}
