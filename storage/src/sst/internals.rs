//! Building blocks exposed for the micro-benchmarks only; not a stable API.

pub use super::bloom::{build as bloom_build, key_hash, may_contain as bloom_may_contain};
pub use super::page::{decode_block, encode_block, EntryView, Page, PageBuilder};
pub use crate::memtable::{MemValue, Memtable};

/// Decoded pages, and the `(offset, len)` regions the layout does not read.
pub type SstContents = (Vec<bytes::Bytes>, Vec<(u64, u64)>);

/// Every page an SST's current layout reads, decoded (decompressed),
/// and the byte regions of the file it does not read (holes left by page drops). For
/// tests that look for deleted bytes on disk.
pub fn sst_contents(dir: &std::path::Path, meta: &super::FileMeta) -> crate::Result<SstContents> {
    let cache = std::sync::Arc::new(crate::cache::PageCache::new(0));
    let table = super::Table::open(dir, meta.clone(), cache)?;
    let mut blocks = Vec::new();
    for i in 0..table.index().pages.len() {
        blocks.push(table.load_page(i, false)?.data().clone());
    }
    let unread = crate::kiwi::punch::gaps(&table.referenced_regions(), meta.size);
    Ok((blocks, unread))
}
