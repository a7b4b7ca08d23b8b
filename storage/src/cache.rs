//! The bounded cache of decoded pages, shared by all tables of an engine.

use std::sync::Arc;

use quick_cache::sync::Cache;
use quick_cache::Weighter;

use crate::sst::page::Page;

/// Cache key: (table cache id, page index).
type PageKey = (u64, u32);

#[derive(Debug, Clone)]
struct PageWeighter;

impl Weighter<PageKey, Arc<Page>> for PageWeighter {
    fn weight(&self, _key: &PageKey, page: &Arc<Page>) -> u64 {
        // Decoded bytes plus the entry bookkeeping of the cache itself.
        page.size() as u64 + 96
    }
}

/// A cache of decoded pages bounded in bytes (S3-FIFO eviction).
#[derive(Debug)]
pub(crate) struct PageCache {
    cache: Option<Cache<PageKey, Arc<Page>, PageWeighter>>,
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

    /// Looks a page up.
    pub fn get(&self, table: u64, page: u32) -> Option<Arc<Page>> {
        self.cache.as_ref()?.get(&(table, page))
    }

    /// Inserts a page.
    pub fn insert(&self, table: u64, page: u32, value: Arc<Page>) {
        if let Some(c) = &self.cache {
            c.insert((table, page), value);
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
