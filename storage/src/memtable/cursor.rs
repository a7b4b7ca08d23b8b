//! An owned cursor over a memtable.

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::{KeyBuf, MemKey, MemValue, Memtable};
use crate::batch::EntryKind;
use crate::iter::EntryCursor;
use crate::sst::PageOffer;
use crate::Result;

/// Entries copied per refill.
const CHUNK: usize = 64;

/// One entry of a chunk: where its key and value sit in the chunk's buffer.
#[derive(Debug, Clone, Copy)]
struct Slot {
    seq: u64,
    kind: EntryKind,
    key_at: usize,
    value_at: usize,
    end: usize,
}

/// Cursor over an `Arc<Memtable>`. It copies the skiplist in chunks of [`CHUNK`] entries, so it
/// owns its state without borrowing the map and stays valid while writers insert concurrently.
/// A chunk's keys and values are copied back to back into one buffer: reading it costs no
/// per-entry allocation or reference count, and `key_bytes` / `value` hand out slices of it.
#[derive(Debug)]
pub(crate) struct MemCursor {
    mem: Arc<Memtable>,
    slots: Vec<Slot>,
    data: Bytes,
    /// The last entry's full key, to resume after it.
    last: Option<MemKey>,
    pos: usize,
    exhausted: bool,
    /// For a summarized scan: what answers runs from their summaries, and the memtable's
    /// place in the state.
    offer: Option<(Arc<dyn PageOffer>, usize)>,
    /// Key ranges of the runs answered from their summaries, passed over.
    skip: VecDeque<(Vec<u8>, Vec<u8>)>,
}

impl MemCursor {
    /// A cursor, not yet positioned (call `seek`).
    pub fn new(mem: Arc<Memtable>) -> Self {
        MemCursor {
            mem,
            slots: Vec::with_capacity(CHUNK),
            data: Bytes::new(),
            last: None,
            pos: 0,
            exhausted: true,
            offer: None,
            skip: VecDeque::new(),
        }
    }

    /// The same cursor, offering `offer` the memtable's summarized runs at its first seek (it
    /// is memtable `source` of the state); the runs taken are passed over.
    pub fn summarized(mut self, offer: Arc<dyn PageOffer>, source: usize) -> Self {
        self.offer = Some((offer, source));
        self
    }

    fn fill(&mut self, from: Bound<&MemKey>) {
        let mut data = BytesMut::with_capacity(self.data.len().max(4096));
        let slots = &mut self.slots;
        slots.clear();
        let (_, more) = self.mem.chunk(from, CHUNK, &mut self.skip, |k: &MemKey, v: &MemValue| {
            let key_at = data.len();
            data.extend_from_slice(&k.key);
            let value_at = data.len();
            data.extend_from_slice(&v.value);
            slots.push(Slot { seq: k.seq, kind: v.kind, key_at, value_at, end: data.len() });
        });
        self.last = slots
            .last()
            .map(|s| MemKey { key: KeyBuf::from_slice(&data[s.key_at..s.value_at]), seq: s.seq });
        self.pos = 0;
        self.exhausted = !more;
        self.data = data.freeze();
    }

    fn slot(&self) -> Slot {
        self.slots[self.pos]
    }
}

impl EntryCursor for MemCursor {
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        // Offered once: only runs wholly at or past the first target (scans go forward).
        if let Some((offer, source)) = self.offer.take() {
            self.skip = offer.offer_runs(source, &self.mem, target).into();
        }
        let probe = MemKey { key: KeyBuf::from_slice(target), seq: u64::MAX };
        self.fill(Bound::Included(&probe));
        Ok(())
    }

    fn next(&mut self) -> Result<()> {
        self.pos += 1;
        if self.pos >= self.slots.len() && !self.exhausted {
            if let Some(last) = self.last.take() {
                self.fill(Bound::Excluded(&last));
            }
        }
        Ok(())
    }

    fn valid(&self) -> bool {
        self.pos < self.slots.len()
    }

    fn key(&self) -> &[u8] {
        let s = self.slot();
        &self.data[s.key_at..s.value_at]
    }

    fn seq(&self) -> u64 {
        self.slots[self.pos].seq
    }

    fn kind(&self) -> EntryKind {
        self.slots[self.pos].kind
    }

    fn value(&self) -> Bytes {
        let s = self.slot();
        self.data.slice(s.value_at..s.end)
    }

    fn value_ref(&self) -> &[u8] {
        let s = self.slot();
        &self.data[s.value_at..s.end]
    }

    fn key_bytes(&self) -> Bytes {
        let s = self.slot();
        self.data.slice(s.key_at..s.value_at)
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
