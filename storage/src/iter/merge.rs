//! Merges several cursors into one in internal order.

use bytes::Bytes;

use super::{internal_cmp, EntryCursor};
use crate::batch::EntryKind;
use crate::Result;

/// A k-way merge of cursors. Sources are few (memtables, level-0 files, one cursor per deeper
/// level), so the minimum is found by a linear scan.
pub(crate) struct MergeCursor {
    children: Vec<Box<dyn EntryCursor>>,
    cur: Option<usize>,
}

impl MergeCursor {
    /// Merges `children`.
    pub fn new(children: Vec<Box<dyn EntryCursor>>) -> Self {
        MergeCursor { children, cur: None }
    }

    fn pick(&mut self) {
        let mut best: Option<usize> = None;
        for (i, c) in self.children.iter().enumerate() {
            if !c.valid() {
                continue;
            }
            best = match best {
                Some(b) => {
                    let o = &self.children[b];
                    if internal_cmp(c.key(), c.seq(), o.key(), o.seq()).is_lt() {
                        Some(i)
                    } else {
                        Some(b)
                    }
                }
                None => Some(i),
            };
        }
        self.cur = best;
    }

    fn current(&self) -> &dyn EntryCursor {
        self.children[self.cur.unwrap_or(0)].as_ref()
    }
}

impl EntryCursor for MergeCursor {
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        for c in &mut self.children {
            c.seek(target)?;
        }
        self.pick();
        Ok(())
    }

    fn next(&mut self) -> Result<()> {
        if let Some(c) = self.cur {
            self.children[c].next()?;
            self.pick();
        }
        Ok(())
    }

    fn valid(&self) -> bool {
        self.cur.is_some()
    }

    fn key(&self) -> &[u8] {
        self.current().key()
    }

    fn seq(&self) -> u64 {
        self.current().seq()
    }

    fn kind(&self) -> EntryKind {
        self.current().kind()
    }

    fn value(&self) -> Bytes {
        self.current().value()
    }

    fn value_ref(&self) -> &[u8] {
        self.current().value_ref()
    }

    fn key_bytes(&self) -> Bytes {
        self.current().key_bytes()
    }
}
