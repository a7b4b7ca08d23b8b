//! Range deletes in the engine: probing the index, applying it in flush and compaction,
//! garbage-collecting it, and merging its levels.
//!
//! **GC rule.** Every SST records `rd_applied`: all range deletes with sequence numbers up to it
//! had been applied (covered entries dropped) when it was written, i.e. the visible sequence
//! number when its flush or compaction started, capped by the oldest live snapshot (a snapshot
//! below a delete keeps the entries it still sees). An SST holds no entry a delete `s` covers if
//! `s <= rd_applied` (applied) or `s <= min_seq` (every entry is at least as new as the delete).
//! So with `W = min over live SSTs of max(rd_applied, min_seq)` and over memtables of their
//! smallest entry sequence number, no live entry is covered by any delete `s <= W`: such deletes,
//! and EVE estimators holding only such deletes, are dropped when index levels merge. (Merely
//! "a bottommost compaction produced only newer data" is not enough: a partial compaction leaves
//! older entries elsewhere.)

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{Inner, SuperVersion};
use crate::compaction::index_policy::{pick_index, IndexTask};
use crate::gloran::drtree::{file_name, DrTree, DrWriter};
use crate::gloran::piece::{combine, Piece, SeqList};
use crate::gloran::Probe;
use crate::memtable::Memtable;
use crate::version::{Opened, VersionEdit};
use crate::Result;

impl Inner {
    /// The EVE generation and the current state, read in that order. A reader must pass both to
    /// [`Inner::range_deleted`]: if EVE has garbage-collected since, the state may predate the
    /// compactions that made it safe, and EVE is bypassed.
    pub(crate) fn read_view(&self) -> (u64, Arc<SuperVersion>) {
        let generation = self.deletes.ranges.eve().map_or(0, |eve| eve.read().generation());
        (generation, self.current())
    }

    fn eve_says_live(&self, generation: u64, key: &[u8], seq: u64) -> bool {
        let Some(eve) = self.deletes.ranges.eve() else { return false };
        let eve = eve.read();
        eve.generation() == generation && !eve.may_be_deleted(key, seq)
    }

    /// True if the entry `(key, seq)` read at `t` is deleted by a range delete.
    pub(crate) fn range_deleted(
        &self,
        (generation, sv): (u64, &SuperVersion),
        key: &[u8],
        seq: u64,
        t: u64,
    ) -> Result<bool> {
        if self.deletes.ranges.in_files() {
            return Ok(super::tombstones::tombstone_deleted(sv, key, seq, t));
        }
        self.counters.range_checks.fetch_add(1, Ordering::Relaxed);
        if self.eve_says_live(generation, key, seq) {
            self.counters.range_checks_eve_skipped.fetch_add(1, Ordering::Relaxed);
            return Ok(false);
        }
        for m in std::iter::once(&sv.mem).chain(&sv.imms) {
            if let Some(s) = m.ranges.visible(key, t) {
                return Ok(s > seq);
            }
        }
        for tree in sv.version.all_trees() {
            match tree.probe(key, seq, t)? {
                Probe::Deleted => return Ok(true),
                Probe::Live => return Ok(false),
                Probe::Unknown => {}
            }
        }
        Ok(false)
    }

    /// Every range delete at or below `upto` covering `key` that could delete a version at or
    /// above `min_seq`, newest first (for flush and compaction). `upto` is the visible sequence
    /// number when the flush or compaction started: later deletes may be newer than snapshots its
    /// retention rule does not know about, so they are left for a later compaction.
    pub(crate) fn covering(
        &self,
        (generation, sv): (u64, &SuperVersion),
        key: &[u8],
        min_seq: u64,
        upto: u64,
    ) -> Result<SeqList> {
        let mut out = SeqList::new();
        if self.eve_says_live(generation, key, min_seq) {
            return Ok(out);
        }
        for m in std::iter::once(&sv.mem).chain(&sv.imms) {
            out.extend(m.ranges.covering(key));
        }
        for tree in sv.version.all_trees() {
            if tree.meta().props.max_seq <= min_seq {
                break; // this and every older tree hold only deletes older than every version
            }
            out.extend(tree.covering(key)?);
        }
        out.retain(|s| *s <= upto);
        out.sort_unstable_by(|a, b| b.cmp(a));
        out.dedup();
        Ok(out)
    }

    /// What a flush or compaction drops `key`'s versions under: the covering range deletes (from
    /// the global index, or in tombstone mode from the `local` fragments of its inputs) and the
    /// active time windows, all at or below `upto`, newest first.
    pub(crate) fn output_covering(
        &self,
        view: (u64, &SuperVersion),
        local: Option<&[Piece]>,
        windows: &[crate::kiwi::TimeWindow],
        (key, min_seq, upto): (&[u8], u64, u64),
    ) -> Result<SeqList> {
        let mut seqs = match local {
            Some(fragments) => super::tombstones::covering_all(fragments, key),
            None => self.covering(view, key, min_seq, upto)?,
        };
        self.add_window_seqs(windows, key, min_seq, upto, &mut seqs);
        Ok(seqs)
    }

    /// For a flush or compaction starting now: the visible sequence number (range deletes up to
    /// it are applied) and the `rd_applied` mark of its outputs (that, capped by the oldest live
    /// snapshot).
    pub(crate) fn range_view_bounds(&self) -> (u64, u64) {
        let visible = self.visible_seq.load(Ordering::Acquire);
        (visible, self.snapshots.seqs().first().map_or(visible, |&s| s.min(visible)))
    }

    /// The GC watermark (see the module docs).
    pub(crate) fn gc_watermark(&self, sv: &SuperVersion) -> u64 {
        let tables =
            sv.version.all_tables().map(|t| t.meta().props.rd_applied.max(t.meta().props.min_seq));
        let mems = std::iter::once(&sv.mem).chain(&sv.imms).map(|m| m.min_entry_seq());
        tables.chain(mems).min().unwrap_or(u64::MAX).min(self.visible_seq.load(Ordering::Acquire))
    }

    /// Writes pieces as a DR-tree file; `None` if there are none.
    pub(crate) fn write_tree(&self, pieces: &[Piece]) -> Result<Option<Arc<DrTree>>> {
        if pieces.is_empty() {
            return Ok(None);
        }
        let id = self.alloc_file_id();
        let path = self.dir.join(file_name(id));
        let ri = &self.opts.range_index;
        let res = (|| {
            let mut w = DrWriter::create(id, &path, ri.page_size, ri.fanout)?;
            for p in pieces {
                w.add(p)?;
            }
            let meta = w.finish()?;
            DrTree::open(&self.dir, meta)
        })();
        match res {
            Ok(t) => Ok(Some(Arc::new(t))),
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                Err(e)
            }
        }
    }

    /// The range buffer of a memtable being flushed, collapsed to the live snapshots.
    pub(crate) fn flush_ranges(&self, mem: &Memtable) -> Result<Option<Arc<DrTree>>> {
        if self.deletes.ranges.in_files() {
            return Ok(None); // the tombstones go into the flushed SST
        }
        let pieces = mem.ranges.pieces();
        let snaps = self.snapshots.seqs();
        self.write_tree(&combine(&[&pieces], Some(&snaps), 0))
    }

    /// Runs one index merge if the policy asks for one. Returns `false` if none was needed.
    pub(crate) fn compact_index_once(&self) -> Result<bool> {
        let sv = self.current();
        let metas: Vec<Vec<_>> =
            sv.version.rd_levels.iter().map(|l| l.iter().map(|t| t.meta()).collect()).collect();
        let Some(task) = pick_index(&metas, &self.opts.range_index) else { return Ok(false) };
        self.run_index_task(&sv, &task)?;
        Ok(true)
    }

    /// Merges every index level into one DR-tree (garbage-collecting what it can): the index
    /// part of a manual compaction.
    pub(crate) fn compact_index_fully(&self) -> Result<()> {
        let sv = self.current();
        let levels = &sv.version.rd_levels;
        let inputs: Vec<(usize, u64)> = levels
            .iter()
            .enumerate()
            .flat_map(|(l, trees)| trees.iter().map(move |t| (l, t.id())))
            .collect();
        if inputs.is_empty() {
            return Ok(());
        }
        let output_level = levels.iter().rposition(|l| !l.is_empty()).unwrap_or(1).max(1);
        self.run_index_task(&sv, &IndexTask { inputs, output_level })
    }

    fn run_index_task(&self, sv: &SuperVersion, task: &IndexTask) -> Result<()> {
        let inputs: Vec<Arc<DrTree>> = task
            .inputs
            .iter()
            .filter_map(|&(l, id)| sv.version.rd_levels[l].iter().find(|t| t.id() == id).cloned())
            .collect();
        let lists: Vec<Vec<Piece>> = inputs.iter().map(|t| t.pieces()).collect::<Result<_>>()?;
        let refs: Vec<&[Piece]> = lists.iter().map(Vec::as_slice).collect();
        let gc = self.gc_watermark(sv);
        let merged = combine(&refs, Some(&self.snapshots.seqs()), gc);
        let out = self.write_tree(&merged).map_err(|e| self.abort_step(e))?;
        let mut edit = VersionEdit {
            rd_deleted: task.inputs.iter().map(|&(l, id)| (l as u32, id)).collect(),
            ..Default::default()
        };
        let mut opened = Opened::default();
        if let Some(t) = &out {
            edit.rd_added.push((task.output_level as u32, t.meta().clone()));
            opened.trees.insert(t.id(), t.clone());
        }
        if let Err(e) = self.commit(edit, &opened, None) {
            if let (Some(t), false) = (&out, self.is_poisoned()) {
                let _ = std::fs::remove_file(t.path());
            }
            return Err(e);
        }
        for t in &inputs {
            t.mark_obsolete();
        }
        if let Some(eve) = self.deletes.ranges.eve() {
            eve.write().gc(gc);
        }
        Ok(())
    }
}
