//! Concatenates the non-overlapping tables of one sorted level.

use std::sync::Arc;

use bytes::Bytes;

use super::EntryCursor;
use crate::batch::EntryKind;
use crate::sst::{Table, TableCursor};
use crate::Result;

/// Cursor over a sorted level: opens one table at a time.
pub(crate) struct LevelCursor {
    tables: Vec<Arc<Table>>,
    index: usize,
    cursor: Option<TableCursor>,
    fill_cache: bool,
    prune: crate::sst::Prune,
}

impl LevelCursor {
    /// A cursor over `tables` (sorted by key, non-overlapping).
    pub fn new(tables: Vec<Arc<Table>>, fill_cache: bool) -> Self {
        LevelCursor { tables, index: 0, cursor: None, fill_cache, prune: Default::default() }
    }

    /// The same cursor, skipping the pages `prune` rules out (scans).
    pub fn pruned(mut self, prune: crate::sst::Prune) -> Self {
        self.prune = prune;
        self
    }

    fn open(&mut self, index: usize, target: Option<&[u8]>) -> Result<()> {
        self.index = index;
        self.cursor = None;
        let mut i = index;
        while let Some(t) = self.tables.get(i) {
            let mut c = TableCursor::new(t.clone(), self.fill_cache).pruned(self.prune.clone());
            match target.filter(|_| i == index) {
                Some(k) => c.seek(k)?,
                None => c.seek_to_first()?,
            }
            if c.valid() {
                self.index = i;
                self.cursor = Some(c);
                return Ok(());
            }
            i += 1;
        }
        Ok(())
    }

    fn cur(&self) -> &TableCursor {
        self.cursor.as_ref().expect("valid() checked by caller")
    }
}

impl EntryCursor for LevelCursor {
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        let i = self.tables.partition_point(|t| t.meta().ends_before(target));
        self.open(i, Some(target))
    }

    fn next(&mut self) -> Result<()> {
        if let Some(c) = &mut self.cursor {
            c.next()?;
            if !c.valid() {
                self.open(self.index + 1, None)?;
            }
        }
        Ok(())
    }

    fn valid(&self) -> bool {
        self.cursor.as_ref().is_some_and(|c| c.valid())
    }

    fn key(&self) -> &[u8] {
        self.cur().key()
    }

    fn seq(&self) -> u64 {
        self.cur().seq()
    }

    fn kind(&self) -> EntryKind {
        self.cur().kind()
    }

    fn value(&self) -> Bytes {
        self.cur().value()
    }

    fn value_ref(&self) -> &[u8] {
        self.cur().value_ref()
    }

    fn key_bytes(&self) -> Bytes {
        self.cur().key_bytes()
    }
}
