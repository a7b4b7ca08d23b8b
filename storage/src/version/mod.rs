//! The set of live SSTs per level, and how it changes.

mod edit;
mod manifest;

use std::collections::HashMap;
use std::sync::Arc;

pub use edit::VersionEdit;
pub(crate) use manifest::{Manifest, RecoveredManifest};

use crate::sst::{FileMeta, Table};

/// An immutable snapshot of the live files. Level 0 is ordered newest first (files may overlap);
/// deeper levels are ordered by key and do not overlap.
#[derive(Debug, Clone, Default)]
pub(crate) struct Version {
    pub levels: Vec<Vec<Arc<Table>>>,
}

impl Version {
    /// An empty version with `n` levels.
    pub fn new(n: usize) -> Self {
        Version { levels: vec![Vec::new(); n] }
    }

    /// File metadata per level (the input of the compaction policy).
    pub fn metas(&self) -> Vec<Vec<&FileMeta>> {
        self.levels.iter().map(|l| l.iter().map(|t| t.meta()).collect()).collect()
    }

    /// Every live table.
    pub fn all_tables(&self) -> impl Iterator<Item = &Arc<Table>> {
        self.levels.iter().flatten()
    }

    /// Index of the file at sorted `level >= 1` whose range may hold `key`.
    pub fn file_for(&self, level: usize, key: &[u8]) -> Option<&Arc<Table>> {
        let files = &self.levels[level];
        let i = files.partition_point(|t| t.meta().largest() < key);
        files.get(i).filter(|t| t.meta().smallest() <= key)
    }

    /// A new version with `edit` applied. `opened` holds the tables for the added files.
    pub fn apply(&self, edit: &VersionEdit, opened: &HashMap<u64, Arc<Table>>) -> Version {
        let mut levels = self.levels.clone();
        for &(level, id) in &edit.deleted {
            levels[level as usize].retain(|t| t.id() != id);
        }
        for (level, meta) in &edit.added {
            if let Some(t) = opened.get(&meta.id) {
                levels[*level as usize].push(t.clone());
            }
        }
        for (i, files) in levels.iter_mut().enumerate() {
            if i == 0 {
                files.sort_by_key(|t| std::cmp::Reverse(t.meta().props.max_seq));
            } else {
                files.sort_by(|a, b| a.meta().smallest().cmp(b.meta().smallest()));
            }
        }
        Version { levels }
    }

    /// Checks level invariants: sorted levels do not overlap. Returns a description of a violation.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (i, files) in self.levels.iter().enumerate().skip(1) {
            for w in files.windows(2) {
                if w[0].meta().largest() >= w[1].meta().smallest() {
                    return Err(format!(
                        "level {i}: files {} and {} overlap",
                        w[0].id(),
                        w[1].id()
                    ));
                }
            }
        }
        Ok(())
    }
}
