//! Running compactions: background picks and manual range compactions.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::tombstones::merged_inputs;
use super::Inner;
use crate::compaction::executor::{write_tables, CoveringFn, OutputSpec};
use crate::compaction::policy::{self, CompactionReason, CompactionTask};
use crate::compaction::retention::Retention;
use crate::failpoint::points;
use crate::iter::{EntryCursor, LevelCursor, MergeCursor};
use crate::sst::{Table, TableCursor};
use crate::version::{Opened, Version, VersionEdit};
use crate::{Error, Result};

impl Inner {
    /// Runs the policy's pick, if any. Returns `false` when nothing needed compaction.
    pub(super) fn compact_once(&self) -> Result<bool> {
        if self.execute_windows()? {
            return Ok(true);
        }
        let _serial = self.background.compaction.lock();
        if self.compact_index_once()? {
            return Ok(true);
        }
        {
            let sv = self.current();
            let metas = sv.version.metas();
            if let Some(deepest) = policy::level_rename(&metas, &self.opts) {
                self.rename_levels(&sv.version, deepest)?;
            } else {
                // Due compactions first; a scan's range (RangeReduce) only when none is due.
                let task = self.pick_deadline(&metas).or_else(|| policy::pick(&metas, &self.opts));
                let Some(task) = task.or_else(|| self.reduce_task(&sv.version)) else {
                    return Ok(false);
                };
                self.run_task(&sv.version, &task)?;
            }
        }
        // The inputs are released now (unless a reader still holds them).
        self.advance_ledger()?;
        Ok(true)
    }

    pub(super) fn compact_range(&self, lo: Option<&[u8]>, hi: Option<&[u8]>) -> Result<()> {
        let _serial = self.background.compaction.lock();
        let v = self.current().version.clone();
        let deepest = (1..v.levels.len())
            .rev()
            .find(|&l| v.levels[l].iter().any(|t| t.meta().overlaps(lo, hi)))
            .unwrap_or(1);
        let mut fresh = Vec::new();
        for level in 0..deepest {
            let v = self.current().version.clone();
            let metas = v.metas();
            let inputs: Vec<_> = if level == 0 {
                // Level-0 files overlap each other: moving only some of them down could put
                // older versions above newer ones, so all go together.
                if metas[0].iter().any(|f| f.overlaps(lo, hi)) {
                    metas[0].clone()
                } else {
                    Vec::new()
                }
            } else {
                metas[level].iter().copied().filter(|f| f.overlaps(lo, hi)).collect()
            };
            if inputs.is_empty() {
                continue;
            }
            let task = policy::task_for(&metas, level, &inputs, CompactionReason::Manual);
            let added = self.run_task(&v, &task)?;
            if level + 1 == deepest && !task.trivial_move {
                fresh.extend(added);
            }
        }
        // Files at the deepest level that this call did not just write still hold whatever they
        // held: rewrite each in place (one at a time, so outputs stay within its key range).
        let v = self.current().version.clone();
        let metas = v.metas();
        for f in metas[deepest].iter().filter(|f| f.overlaps(lo, hi) && !fresh.contains(&f.id)) {
            let v = self.current().version.clone();
            self.run_task(&v, &policy::rewrite_task(&v.metas(), deepest, f))?;
        }
        // Range deletes now applied everywhere they could be are collected by a full index merge.
        self.compact_index_fully()
    }

    /// Level-Renaming: moves every file of levels `1..=deepest` one level down, in one edit.
    fn rename_levels(&self, v: &Version, deepest: usize) -> Result<()> {
        let started = std::time::Instant::now();
        let mut edit = VersionEdit::default();
        let mut moved = Vec::new();
        for level in 1..=deepest {
            for t in &v.levels[level] {
                edit.deleted.push((level as u32, t.id()));
                edit.added.push((level as u32 + 1, t.meta().clone()));
                moved.push(t.clone());
            }
        }
        let n = moved.len();
        self.commit(edit, &Opened::tables(moved), None)?;
        let r = super::CompactionRecord {
            kind: "level_rename",
            reason: "size",
            level: 1,
            output_level: deepest + 1,
            input_files: n,
            output_files: n,
            ..Default::default()
        };
        self.record_history(started, r);
        Ok(())
    }

    fn find_tables(&self, v: &Version, level: usize, ids: &[u64]) -> Result<Vec<Arc<Table>>> {
        ids.iter()
            .map(|id| {
                v.levels[level].iter().find(|t| t.id() == *id).cloned().ok_or_else(|| {
                    Error::InvalidArgument(format!("compaction input {id} not at level {level}"))
                })
            })
            .collect()
    }

    /// Executes `task`; returns the ids of the files it added.
    fn run_task(&self, v: &Version, task: &CompactionTask) -> Result<Vec<u64>> {
        let started = std::time::Instant::now();
        let reason = match task.reason {
            CompactionReason::Level0FileCount => "level0",
            CompactionReason::LevelSize(_) => "size",
            CompactionReason::Manual => "manual",
            CompactionReason::RangeReduce => "range_reduce",
            CompactionReason::Deadline { .. } => "deadline",
        };
        let record = super::CompactionRecord {
            kind: "compaction",
            reason,
            level: task.level,
            output_level: task.output_level,
            input_files: task.inputs.len() + task.overlapping.len(),
            ..Default::default()
        };
        let inputs = self.find_tables(v, task.level, &task.inputs)?;
        let overlapping = self.find_tables(v, task.output_level, &task.overlapping)?;
        let mut edit = VersionEdit::default();
        for t in &inputs {
            edit.deleted.push((task.level as u32, t.id()));
        }
        for t in &overlapping {
            edit.deleted.push((task.output_level as u32, t.id()));
        }
        if task.trivial_move {
            let opened = Opened::tables(inputs.iter().cloned());
            edit.added =
                inputs.iter().map(|t| (task.output_level as u32, t.meta().clone())).collect();
            self.commit(edit, &opened, None)?;
            self.counters.trivial_moves.fetch_add(1, Ordering::Relaxed);
            let r = super::CompactionRecord {
                kind: "trivial_move",
                output_files: task.inputs.len(),
                ..record
            };
            self.record_history(started, r);
            self.advance_ledger()?;
            return Ok(task.inputs.clone());
        }
        let mut children: Vec<Box<dyn EntryCursor>> = Vec::new();
        if task.level == 0 {
            for t in &inputs {
                children.push(Box::new(TableCursor::new(t.clone(), false)));
            }
        } else {
            children.push(Box::new(LevelCursor::new(inputs.clone(), false)));
        }
        if !overlapping.is_empty() {
            children.push(Box::new(LevelCursor::new(overlapping.clone(), false)));
        }
        let mut merged = MergeCursor::new(children);
        merged.seek(&[])?;
        let next_id = || self.alloc_file_id();
        // Tombstone mode: the inputs' tombstones apply to the inputs' entries and move down with
        // them; at the bottommost level those every reader sees are dropped (fully applied).
        let deletes = self
            .delete_view(|| merged_inputs(&inputs.iter().chain(&overlapping).collect::<Vec<_>>()));
        let covering_fn = |key: &[u8], min_seq: u64| deletes.covering(self, key, min_seq);
        let covering: &CoveringFn<'_> = &covering_fn;
        let gc = match task.bottommost {
            true => deletes.oldest_snapshot().unwrap_or(u64::MAX),
            false => 0,
        };
        let spec = OutputSpec {
            ranges: Some(covering),
            rd_applied: deletes.rd_applied(),
            tombstones: deletes.tombstones(gc),
            dir: &self.dir,
            opts: &self.opts,
            cache: &self.cache,
            tile_pages: self.tile_pages_for(task.output_level),
            range_filter: self.range_filter_spec(),
            target_file_size: self.opts.target_file_size,
            retention: Retention::new(self.snapshots.seqs(), task.bottommost),
            stamp: &|seq| self.delete_stamp(seq),
            inherited: inputs
                .iter()
                .chain(&overlapping)
                .filter_map(|t| {
                    let m = t.meta();
                    m.props.oldest_delete.map(|s| (m.smallest().to_vec(), m.largest().to_vec(), s))
                })
                .collect(),
            expired: Some(&|key: &[u8]| deletes.expired(self, key)),
            bottommost: task.bottommost,
            next_id: &next_id,
            fail: Some(&self.opts.fail_points),
        };
        let (outputs, stats) = write_tables(&mut merged, &spec).map_err(|e| self.abort_step(e))?;
        self.opts
            .fail_points
            .check(points::COMPACTION_BEFORE_COMMIT)
            .map_err(|e| self.poison(e))?;
        edit.added = outputs.iter().map(|t| (task.output_level as u32, t.meta().clone())).collect();
        if let Err(e) = self.commit(edit, &Opened::tables(outputs.iter().cloned()), None) {
            if !self.is_poisoned() {
                for t in &outputs {
                    let _ = std::fs::remove_file(t.path());
                }
            }
            return Err(e);
        }
        // A crash here leaves the inputs on disk although the manifest dropped them: recovery
        // deletes them as orphans.
        self.opts.fail_points.check(points::COMPACTION_AFTER_COMMIT).map_err(|e| self.poison(e))?;
        for t in inputs.iter().chain(&overlapping) {
            self.retire(t);
        }
        self.counters.compactions.fetch_add(1, Ordering::Relaxed);
        let r = super::CompactionRecord {
            output_files: outputs.len(),
            bytes_written: stats.bytes_out,
            entries_in: stats.entries_in,
            entries_out: stats.entries_out,
            ..record
        };
        self.record_history(started, r);
        self.counters.bytes_compacted.fetch_add(stats.bytes_out, Ordering::Relaxed);
        tracing::debug!(
            level = task.level,
            inputs = task.inputs.len() + task.overlapping.len(),
            outputs = outputs.len(),
            entries_in = stats.entries_in,
            entries_out = stats.entries_out,
            "compaction done"
        );
        Ok(outputs.iter().map(|t| t.id()).collect())
    }
}
