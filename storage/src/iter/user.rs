//! The iterator returned by `Engine::scan`: newest visible version per key, tombstones hidden.

use std::ops::Bound;

use bytes::Bytes;

use super::{EntryCursor, MergeCursor};
use crate::batch::EntryKind;
use crate::engine::RangeCheck;
use crate::Result;

/// Streams `(key, value)` pairs of a key range as of a snapshot, in key order. It pins the files
/// and memtables it reads, so compaction cannot delete them under it.
pub struct EngineIter {
    merged: MergeCursor,
    snapshot: u64,
    start: Bound<Vec<u8>>,
    end: Bound<Vec<u8>>,
    started: bool,
    done: bool,
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
        EngineIter { merged, snapshot, start, end, started: false, done: false, ranges, time: None }
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

    fn skip_key(&mut self, key: &[u8]) -> Result<()> {
        while self.merged.valid() && self.merged.key() == key {
            self.merged.next()?;
        }
        Ok(())
    }

    fn advance(&mut self) -> Result<Option<(Bytes, Bytes)>> {
        if !self.started {
            self.started = true;
            match &self.start {
                Bound::Included(k) => self.merged.seek(&k.clone())?,
                Bound::Excluded(k) => {
                    let k = k.clone();
                    self.merged.seek(&k)?;
                    self.skip_key(&k)?;
                }
                Bound::Unbounded => self.merged.seek(&[])?,
            }
        }
        while self.merged.valid() {
            if self.past_end(self.merged.key()) {
                return Ok(None);
            }
            if self.merged.seq() > self.snapshot {
                self.merged.next()?;
                continue;
            }
            let key = self.merged.key_bytes();
            let seq = self.merged.seq();
            let found = match self.merged.kind() {
                EntryKind::Put => Some((key.clone(), self.merged.value())),
                EntryKind::Delete => None,
            };
            self.skip_key(&key)?;
            if found.is_some() && self.outside_time(&key) {
                continue;
            }
            if found.is_some() && self.ranges.deleted(&key, seq, self.snapshot)? {
                continue;
            }
            if found.is_some() {
                return Ok(found);
            }
        }
        Ok(None)
    }
}

impl Iterator for EngineIter {
    type Item = Result<(Bytes, Bytes)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.advance() {
            Ok(Some(kv)) => Some(Ok(kv)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}
