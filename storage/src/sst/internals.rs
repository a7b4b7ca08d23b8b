//! Building blocks exposed for the micro-benchmarks only; not a stable API.

pub use super::bloom::{build as bloom_build, key_hash, may_contain as bloom_may_contain};
pub use super::page::{decode_block, encode_block, EntryView, Page, PageBuilder};
pub use crate::memtable::{MemValue, Memtable};
