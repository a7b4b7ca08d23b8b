//! An owned cursor over a memtable.

use std::ops::Bound;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::{KeyBuf, MemKey, MemValue, Memtable};
use crate::batch::EntryKind;
use crate::iter::EntryCursor;
use crate::Result;

/// Entries copied per refill (cheap: keys and values are shared `Bytes`).
const CHUNK: usize = 64;

/// Cursor over an `Arc<Memtable>`. It reads the skiplist in chunks, so it owns its state without
/// borrowing the map and stays valid while writers insert concurrently.
#[derive(Debug)]
pub(crate) struct MemCursor {
    mem: Arc<Memtable>,
    buf: Vec<(MemKey, MemValue)>,
    /// The keys of `buf` back to back, so `key_bytes` hands out slices of one allocation per
    /// chunk instead of copying every key into an allocation of its own.
    keys: Bytes,
    /// Where key `i` of `buf` starts in `keys` (one more entry than `buf`: the end).
    offsets: Vec<usize>,
    pos: usize,
    exhausted: bool,
}

impl MemCursor {
    /// A cursor, not yet positioned (call `seek`).
    pub fn new(mem: Arc<Memtable>) -> Self {
        MemCursor {
            mem,
            buf: Vec::new(),
            keys: Bytes::new(),
            offsets: Vec::new(),
            pos: 0,
            exhausted: true,
        }
    }

    fn fill(&mut self, from: Bound<&MemKey>) {
        self.mem.chunk(from, CHUNK, &mut self.buf);
        self.pos = 0;
        self.exhausted = self.buf.len() < CHUNK;
        let total = self.buf.iter().map(|(k, _)| k.key.len()).sum();
        let mut arena = BytesMut::with_capacity(total);
        self.offsets.clear();
        for (k, _) in &self.buf {
            self.offsets.push(arena.len());
            arena.extend_from_slice(&k.key);
        }
        self.offsets.push(arena.len());
        self.keys = arena.freeze();
    }
}

impl EntryCursor for MemCursor {
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        let probe = MemKey { key: KeyBuf::from_slice(target), seq: u64::MAX };
        self.fill(Bound::Included(&probe));
        Ok(())
    }

    fn next(&mut self) -> Result<()> {
        self.pos += 1;
        if self.pos >= self.buf.len() && !self.exhausted {
            if let Some((last, _)) = self.buf.last().cloned() {
                self.fill(Bound::Excluded(&last));
            }
        }
        Ok(())
    }

    fn valid(&self) -> bool {
        self.pos < self.buf.len()
    }

    fn key(&self) -> &[u8] {
        &self.buf[self.pos].0.key
    }

    fn seq(&self) -> u64 {
        self.buf[self.pos].0.seq
    }

    fn kind(&self) -> EntryKind {
        self.buf[self.pos].1.kind
    }

    fn value(&self) -> Bytes {
        self.buf[self.pos].1.value.clone()
    }

    fn key_bytes(&self) -> Bytes {
        self.keys.slice(self.offsets[self.pos]..self.offsets[self.pos + 1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_walks_across_chunks_in_order() {
        let m = Arc::new(Memtable::new(0, 1 << 16));
        for i in 0..500u32 {
            for s in 0..2u64 {
                m.insert(&i.to_be_bytes(), s + 1, EntryKind::Put, Bytes::new());
            }
        }
        let mut c = MemCursor::new(m);
        c.seek(&10u32.to_be_bytes()).unwrap();
        let mut n = 0;
        let mut prev: Option<(Vec<u8>, u64)> = None;
        while c.valid() {
            let cur = (c.key().to_vec(), c.seq());
            if let Some(p) = &prev {
                assert!(crate::iter::internal_cmp(&p.0, p.1, &cur.0, cur.1).is_lt());
            }
            prev = Some(cur);
            n += 1;
            c.next().unwrap();
        }
        assert_eq!(n, 490 * 2);
    }
}
