//! The bounded cache of decoded pages, shared by all tables and range-index files of an engine.

use std::sync::Arc;

use crate::gloran::Piece;

use quick_cache::sync::Cache;
use quick_cache::Weighter;

use crate::sst::page::Page;

/// Cache key: (file id, page index). File ids are unique across SSTs and range-index files.
type PageKey = (u64, u32);

/// A cached block.
#[derive(Debug, Clone)]
enum Block {
    Data(Arc<Page>),
    Pieces(Arc<Vec<Piece>>, usize),
}

#[derive(Debug, Clone)]
struct PageWeighter;

impl Weighter<PageKey, Block> for PageWeighter {
    fn weight(&self, _key: &PageKey, block: &Block) -> u64 {
        // Decoded bytes plus the entry bookkeeping of the cache itself.
        96 + match block {
            Block::Data(p) => p.size() as u64,
            Block::Pieces(_, bytes) => *bytes as u64,
        }
    }
}

/// A cache of decoded pages bounded in bytes (S3-FIFO eviction).
#[derive(Debug)]
pub(crate) struct PageCache {
    cache: Option<Cache<PageKey, Block, PageWeighter>>,
}

impl PageCache {
    /// A cache holding at most `capacity_bytes` of pages; 0 disables caching.
    pub fn new(capacity_bytes: usize) -> Self {
        if capacity_bytes == 0 {
            return PageCache { cache: None };
        }
        let items = (capacity_bytes / 4096).max(16);
        PageCache { cache: Some(Cache::with_weighter(items, capacity_bytes as u64, PageWeighter)) }
    }

    /// Looks a data page up.
    pub fn get(&self, table: u64, page: u32) -> Option<Arc<Page>> {
        match self.cache.as_ref()?.get(&(table, page))? {
            Block::Data(p) => Some(p),
            Block::Pieces(..) => None,
        }
    }

    /// Inserts a data page.
    pub fn insert(&self, table: u64, page: u32, value: Arc<Page>) {
        if let Some(c) = &self.cache {
            c.insert((table, page), Block::Data(value));
        }
    }

    /// Looks a decoded range-index leaf up.
    pub fn get_pieces(&self, file: u64, leaf: u32) -> Option<Arc<Vec<Piece>>> {
        match self.cache.as_ref()?.get(&(file, leaf))? {
            Block::Pieces(p, _) => Some(p),
            Block::Data(_) => None,
        }
    }

    /// Inserts a decoded range-index leaf of `bytes` encoded size.
    pub fn insert_pieces(&self, file: u64, leaf: u32, pieces: Arc<Vec<Piece>>, bytes: usize) {
        if let Some(c) = &self.cache {
            c.insert((file, leaf), Block::Pieces(pieces, bytes));
        }
    }

    /// Bytes currently cached.
    pub fn used_bytes(&self) -> u64 {
        self.cache.as_ref().map_or(0, |c| c.weight())
    }

    /// Configured capacity in bytes.
    pub fn capacity_bytes(&self) -> u64 {
        self.cache.as_ref().map_or(0, |c| c.capacity())
    }
}
