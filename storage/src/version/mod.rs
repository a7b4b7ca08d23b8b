//! The set of live SSTs per level, and how it changes.

mod edit;
mod manifest;

use std::collections::HashMap;
use std::sync::Arc;

pub use edit::VersionEdit;
pub(crate) use manifest::{apply_retention, Manifest, RecoveredManifest};

use crate::filter::global::{FileCells, GlobalFilter, GlobalSpec};
use crate::gloran::drtree::DrTree;
use crate::sst::{FileMeta, Table};

/// An immutable snapshot of the live files. Level 0 is ordered newest first (files may overlap);
/// deeper levels are ordered by key and do not overlap. The range-delete index has its own
/// levels: index level 0 holds one DR-tree per flush (newest first), deeper index levels one each.
#[derive(Debug, Clone, Default)]
pub(crate) struct Version {
    pub levels: Vec<Vec<Arc<Table>>>,
    pub rd_levels: Vec<Vec<Arc<DrTree>>>,
    /// The global range filter of exactly these files, if the engine keeps one.
    pub grf: Option<Arc<GlobalFilter>>,
}

/// Tables and DR-trees opened for the files an edit adds.
#[derive(Debug, Default)]
pub(crate) struct Opened {
    pub tables: HashMap<u64, Arc<Table>>,
    pub trees: HashMap<u64, Arc<DrTree>>,
}

impl Opened {
    /// Opened tables only.
    pub fn tables(tables: impl IntoIterator<Item = Arc<Table>>) -> Self {
        Opened { tables: tables.into_iter().map(|t| (t.id(), t)).collect(), trees: HashMap::new() }
    }
}

impl Version {
    /// An empty version with `n` data levels and `rd` index levels, keeping a global range
    /// filter if `grf` says how.
    pub fn new(n: usize, rd: usize, grf: Option<GlobalSpec>) -> Self {
        Version {
            levels: vec![Vec::new(); n],
            rd_levels: vec![Vec::new(); rd],
            grf: grf.map(|spec| Arc::new(GlobalFilter::new(spec))),
        }
    }

    /// Every live DR-tree, newest source first.
    pub fn all_trees(&self) -> impl Iterator<Item = &Arc<DrTree>> {
        self.rd_levels.iter().flatten()
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
        let i = files.partition_point(|t| t.meta().ends_before(key));
        files.get(i).filter(|t| t.meta().smallest() <= key)
    }

    /// A new version with `edit` applied. `opened` holds the tables for the added files.
    pub fn apply(&self, edit: &VersionEdit, opened: &Opened) -> Version {
        let mut levels = self.levels.clone();
        let grf = self.grf.as_ref().map(|g| Arc::new(self.next_filter(g, edit, opened)));
        for &(level, id) in &edit.deleted {
            levels[level as usize].retain(|t| t.id() != id);
        }
        for (level, meta) in &edit.added {
            if let Some(t) = opened.tables.get(&meta.id) {
                levels[*level as usize].push(t.clone());
            }
        }
        let mut rd_levels = self.rd_levels.clone();
        for &(level, id) in &edit.rd_deleted {
            rd_levels[level as usize].retain(|t| t.id() != id);
        }
        for (level, meta) in &edit.rd_added {
            if let Some(t) = opened.trees.get(&meta.id) {
                rd_levels[*level as usize].push(t.clone());
            }
        }
        for trees in &mut rd_levels {
            trees.sort_by_key(|t| std::cmp::Reverse(t.meta().props.max_seq));
        }
        for (i, files) in levels.iter_mut().enumerate() {
            if i == 0 {
                files.sort_by_key(|t| std::cmp::Reverse(t.meta().props.max_seq));
            } else {
                files.sort_by(|a, b| a.meta().smallest().cmp(b.meta().smallest()));
            }
        }
        Version { levels, rd_levels, grf }
    }

    /// The global filter after `edit`: the removed files' cells out, the added files' in.
    fn next_filter(&self, g: &GlobalFilter, edit: &VersionEdit, opened: &Opened) -> GlobalFilter {
        let spec = g.spec();
        let removed: Vec<FileCells> = edit
            .deleted
            .iter()
            .filter_map(|&(level, id)| {
                let t = self.levels[level as usize].iter().find(|t| t.id() == id)?;
                Some((level as usize, id, t.cells(spec)))
            })
            .collect();
        let added: Vec<FileCells> = edit
            .added
            .iter()
            .filter_map(|(level, meta)| {
                let t = opened.tables.get(&meta.id)?;
                Some((*level as usize, meta.id, t.cells(spec)))
            })
            .collect();
        g.apply(&removed, &added)
    }

    /// Checks level invariants: sorted levels do not overlap, and deeper range-index levels
    /// hold one tree each.
    pub fn check_invariants(&self) -> Result<(), Violation> {
        for (i, trees) in self.rd_levels.iter().enumerate().skip(1) {
            if trees.len() > 1 {
                return Err(Violation::RangeLevelTrees { level: i, trees: trees.len() });
            }
        }
        for (i, files) in self.levels.iter().enumerate().skip(1) {
            for w in files.windows(2) {
                if !w[0].meta().ends_before(w[1].meta().smallest()) {
                    let (first, second) = (w[0].id(), w[1].id());
                    return Err(Violation::Overlap { level: i, first, second });
                }
            }
        }
        Ok(())
    }
}

/// A level invariant a [`Version`] breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Violation {
    /// A range-index level below the first holds more than one tree.
    #[error("range-index level {level} holds {trees} trees")]
    RangeLevelTrees {
        /// The level.
        level: usize,
        /// Trees it holds.
        trees: usize,
    },
    /// Two neighbouring files of a sorted level overlap.
    #[error("level {level}: files {first} and {second} overlap")]
    Overlap {
        /// The level.
        level: usize,
        /// The id of the first file.
        first: u64,
        /// The id of the file after it.
        second: u64,
    },
}
