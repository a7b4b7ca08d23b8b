//! The iterator returned by `Engine::scan`: newest visible version per key, tombstones hidden.

use std::ops::Bound;

use bytes::Bytes;

use super::{EntryCursor, MergeCursor};
use crate::batch::EntryKind;
use crate::engine::RangeCheck;
use crate::Result;

/// Streams `(key, value)` pairs of a key range as of a snapshot, in key order. It pins the files
/// and memtables it reads, so compaction cannot delete them under it.
///
/// As an [`Iterator`] it yields owned [`Bytes`]; [`EngineIter::next_ref`] lends the current pair
/// instead, which costs no allocation or reference count per entry.
pub struct EngineIter {
    merged: MergeCursor,
    snapshot: u64,
    start: Bound<Vec<u8>>,
    end: Bound<Vec<u8>>,
    started: bool,
    /// `merged` sits on the entry last returned, whose key is `key`.
    positioned: bool,
    done: bool,
    /// Key of the entry last returned (or being examined).
    key: Vec<u8>,
    ranges: RangeCheck,
    time: Option<((u64, u64), crate::DeleteKeyExtractor)>,
}

impl EngineIter {
    pub(crate) fn new(
        merged: MergeCursor,
        snapshot: u64,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
        ranges: RangeCheck,
    ) -> Self {
        EngineIter {
            merged,
            snapshot,
            start,
            end,
            started: false,
            positioned: false,
            done: false,
            key: Vec::new(),
            ranges,
            time: None,
        }
    }

    /// Keeps only keys whose delete key lies in the window.
    pub(crate) fn with_time(
        mut self,
        time: Option<((u64, u64), crate::DeleteKeyExtractor)>,
    ) -> Self {
        self.time = time;
        self
    }

    fn outside_time(&self, key: &[u8]) -> bool {
        self.time.as_ref().is_some_and(|((lo, hi), d)| !(*lo..*hi).contains(&d.extract(key)))
    }

    fn past_end(&self, key: &[u8]) -> bool {
        match &self.end {
            Bound::Included(e) => key > e.as_slice(),
            Bound::Excluded(e) => key >= e.as_slice(),
            Bound::Unbounded => false,
        }
    }

    /// Moves `merged` past every remaining version of `key`.
    fn skip_key(merged: &mut MergeCursor, key: &[u8]) -> Result<()> {
        while merged.valid() && merged.key() == key {
            merged.next()?;
        }
        Ok(())
    }

    /// Positions `merged` on the next live entry; false at the end.
    fn advance(&mut self) -> Result<bool> {
        if !self.started {
            self.started = true;
            match &self.start {
                Bound::Included(k) => self.merged.seek(&k.clone())?,
                Bound::Excluded(k) => {
                    let k = k.clone();
                    self.merged.seek(&k)?;
                    Self::skip_key(&mut self.merged, &k)?;
                }
                Bound::Unbounded => self.merged.seek(&[])?,
            }
        } else if self.positioned {
            self.positioned = false;
            Self::skip_key(&mut self.merged, &self.key)?;
        }
        while self.merged.valid() {
            if self.past_end(self.merged.key()) {
                return Ok(false);
            }
            let seq = self.merged.seq();
            if seq > self.snapshot {
                self.merged.next()?;
                continue;
            }
            // The newest visible version of its key.
            self.key.clear();
            self.key.extend_from_slice(self.merged.key());
            if self.merged.kind() == EntryKind::Put
                && !self.outside_time(&self.key)
                && !self.ranges.deleted(&self.key, seq, self.snapshot)?
            {
                self.positioned = true;
                return Ok(true);
            }
            Self::skip_key(&mut self.merged, &self.key)?;
        }
        Ok(false)
    }

    fn step(&mut self) -> Option<Result<()>> {
        if self.done {
            return None;
        }
        match self.advance() {
            Ok(true) => Some(Ok(())),
            Ok(false) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }

    /// The next live `(key, value)` pair, borrowed until the next call.
    pub fn next_ref(&mut self) -> Option<Result<(&[u8], &[u8])>> {
        match self.step()? {
            Ok(()) => Some(Ok((&self.key, self.merged.value_ref()))),
            Err(e) => Some(Err(e)),
        }
    }
}

impl Iterator for EngineIter {
    type Item = Result<(Bytes, Bytes)>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.step()? {
            Ok(()) => Some(Ok((self.merged.key_bytes(), self.merged.value()))),
            Err(e) => Some(Err(e)),
        }
    }
}
