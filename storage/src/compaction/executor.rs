//! Writes the output tables of a flush or compaction from a merged cursor.

use std::path::Path;
use std::sync::Arc;

use super::retention::{Retention, Version};
use crate::batch::EntryKind;
use crate::cache::PageCache;
use crate::fade::DeleteStamp;
use crate::failpoint::{points, FailPoints};
use crate::gloran::piece::{before_end, Piece, SeqList};
use crate::iter::EntryCursor;
use crate::sst::writer::WriterOptions;
use crate::sst::{FileMeta, Table, TableWriter};
use crate::{Options, Result};

/// Covering range-delete sequence numbers of a key, given its oldest version's sequence number.
pub(crate) type CoveringFn<'a> = dyn Fn(&[u8], u64) -> Result<SeqList> + 'a;

/// The issue stamp of the delete with a sequence number (FADE).
pub(crate) type StampFn<'a> = dyn Fn(u64) -> DeleteStamp + 'a;

/// True if a key's retention expired.
pub(crate) type ExpiredFn<'a> = dyn Fn(&[u8]) -> bool + 'a;

/// What a run of [`write_tables`] needs from the engine.
pub(crate) struct OutputSpec<'a> {
    pub dir: &'a Path,
    pub opts: &'a Options,
    pub cache: &'a Arc<PageCache>,
    /// Delete-tile size h of the outputs.
    pub tile_pages: usize,
    /// Range filter parameters of the outputs (`None`: no range filter).
    pub range_filter: Option<crate::filter::RangeFilterSpec>,
    /// Split outputs once they reach this size (at a key boundary).
    pub target_file_size: u64,
    pub retention: Retention,
    /// Covering range-delete sequence numbers of a key, given the oldest version's sequence
    /// number (`None`: range deletes are not applied).
    pub ranges: Option<&'a CoveringFn<'a>>,
    /// Recorded in every output as `rd_applied`.
    pub rd_applied: u64,
    /// Range-tombstone fragments to store in the outputs (tombstone mode), key-sorted and
    /// disjoint; each output gets the fragments of its key range, cut at file boundaries.
    pub tombstones: Vec<Piece>,
    /// Stamps of point deletes (tombstones seen, kept or superseded, are folded into the
    /// output's [`crate::sst::TableProps::oldest_delete`]).
    pub stamp: &'a StampFn<'a>,
    /// Key range and stamp of every input file that has one: each output inherits the stamps of
    /// the inputs its key range overlaps.
    pub inherited: Vec<(Vec<u8>, Vec<u8>, DeleteStamp)>,
    /// Keys whose retention expired: every version is dropped.
    pub expired: Option<&'a ExpiredFn<'a>>,
    /// True if nothing older lies below the outputs: a delete whose tombstone and covered data
    /// are both dropped here is persisted, and its stamp not passed on.
    pub bottommost: bool,
    /// Allocates a file id.
    pub next_id: &'a dyn Fn() -> u64,
    /// Check the mid-output fail point (compactions).
    pub fail: Option<&'a FailPoints>,
}

/// Counters of one run.
#[derive(Debug, Default, Clone)]
pub(crate) struct RunStats {
    pub entries_in: u64,
    pub entries_out: u64,
    pub bytes_out: u64,
}

/// Drains `cursor` (already positioned at its first entry), applies the retention rule per key and
/// writes tables. Returns the opened output tables (empty if every entry was dropped). On error the
/// partially written outputs are removed.
pub(crate) fn write_tables(
    cursor: &mut dyn EntryCursor,
    spec: &OutputSpec<'_>,
) -> Result<(Vec<Arc<Table>>, RunStats)> {
    let mut metas: Vec<Output> = Vec::new();
    let mut created: Vec<std::path::PathBuf> = Vec::new();
    let result = write_inner(cursor, spec, &mut metas, &mut created);
    match result {
        Ok(stats) => {
            let mut tables = Vec::with_capacity(metas.len());
            for (m, cells) in metas {
                let table = Table::open(spec.dir, m, spec.cache.clone())?;
                if let Some(c) = cells {
                    table.set_cells(c);
                }
                tables.push(Arc::new(table));
            }
            Ok((tables, stats))
        }
        Err(e) => {
            // Finished outputs and the one being written (a full disk fails mid-file).
            for path in &created {
                let _ = std::fs::remove_file(path);
            }
            Err(e)
        }
    }
}

fn write_inner(
    cursor: &mut dyn EntryCursor,
    spec: &OutputSpec<'_>,
    metas: &mut Vec<Output>,
    created: &mut Vec<std::path::PathBuf>,
) -> Result<RunStats> {
    let wopts = WriterOptions {
        page_size: spec.opts.page_size,
        tile_pages: spec.tile_pages,
        range_filter: spec.range_filter,
        bloom_bits_per_key: spec.opts.bloom_bits_per_key,
        compression: spec.opts.compression,
        delete_key: spec.opts.delete_key.clone(),
        global_cells: crate::filter::global::GlobalSpec::of(spec.opts),
        summarizer: spec.opts.page_summary.clone(),
    };
    let mut new_writer = || -> Result<TableWriter> {
        let id = (spec.next_id)();
        let path = spec.dir.join(crate::sst::file_name(id));
        created.push(path.clone());
        let mut w = TableWriter::create(id, &path, wopts.clone())?;
        w.set_rd_applied(spec.rd_applied);
        Ok(w)
    };
    let mut fragments: std::collections::VecDeque<Piece> =
        spec.tombstones.iter().cloned().collect();
    let mut stats = RunStats::default();
    let mut writer: Option<TableWriter> = None;
    // A full output is finished only when the next key is known, so the tombstone fragments
    // can be cut exactly at the boundary between the two files.
    let mut full = false;
    let mut versions: Vec<Version> = Vec::new();
    let mut out = OutputStamp::default();
    // Stamps of keys dropped entirely, carried into the next output written.
    let mut pending_stamp: Option<DeleteStamp> = None;
    while cursor.valid() {
        let key = cursor.key_bytes();
        versions.clear();
        while cursor.valid() && cursor.key() == key.as_ref() {
            versions.push(Version {
                seq: cursor.seq(),
                kind: cursor.kind(),
                value: cursor.value(),
            });
            cursor.next()?;
        }
        stats.entries_in += versions.len() as u64;
        let oldest_tombstone =
            versions.iter().filter(|v| v.kind == EntryKind::Delete).map(|v| v.seq).min();
        match (spec.ranges, versions.last()) {
            (Some(covering), Some(oldest)) => {
                let cov = covering(&key, oldest.seq)?;
                spec.retention.retain_covered(&mut versions, &cov);
            }
            _ => spec.retention.retain(&mut versions),
        }
        if spec.expired.is_some_and(|f| f(&key)) {
            versions.clear();
        }
        // Which deletes' covered data may survive in this output (see `crate::fade`).
        let retains_deleted =
            versions.len() > 1 || versions.iter().any(|v| v.kind == EntryKind::Delete);
        let key_stamp = match oldest_tombstone {
            Some(seq) if !spec.bottommost || retains_deleted => Some((spec.stamp)(seq)),
            _ => None,
        };
        if versions.is_empty() {
            pending_stamp = DeleteStamp::min(pending_stamp, key_stamp);
            continue;
        }
        if let Some(mut done) = if full { writer.take() } else { None } {
            done.set_range_tombstones(take_below(&mut fragments, &key));
            stamp_output(&mut done, &mut out, spec);
            finish(Some(done), metas, &mut stats)?;
            if let Some(fp) = spec.fail {
                fp.check(points::COMPACTION_MID_OUTPUT)?;
            }
        }
        let w = match &mut writer {
            Some(w) => w,
            None => writer.insert(new_writer()?),
        };
        out.first.get_or_insert_with(|| key.to_vec());
        out.last = key.to_vec();
        out.stamp = DeleteStamp::min(DeleteStamp::min(out.stamp, key_stamp), pending_stamp.take());
        out.retains_deleted |= retains_deleted;
        for v in versions.drain(..) {
            w.add(key.clone(), v.seq, v.kind, v.value)?;
            stats.entries_out += 1;
        }
        full = w.estimated_size() >= spec.target_file_size;
    }
    if writer.is_none() && !fragments.is_empty() {
        writer = Some(new_writer()?);
    }
    if let Some(w) = &mut writer {
        w.set_range_tombstones(fragments.drain(..).collect());
        out.stamp = DeleteStamp::min(out.stamp, pending_stamp.take());
        stamp_output(w, &mut out, spec);
    }
    finish(writer.take(), metas, &mut stats)?;
    Ok(stats)
}

/// What one output accumulates for its delete stamp.
#[derive(Default)]
struct OutputStamp {
    first: Option<Vec<u8>>,
    last: Vec<u8>,
    stamp: Option<DeleteStamp>,
    retains_deleted: bool,
}

/// Sets the output's stamp: its own tombstones', its range-tombstone fragments' and those of the
/// overlapping inputs (unless a bottommost merge left no deleted state behind); then resets `out`.
fn stamp_output(w: &mut TableWriter, out: &mut OutputStamp, spec: &OutputSpec<'_>) {
    let mut stamp = out.stamp;
    if let Some(seq) = w.range_tombstone_min_seq() {
        stamp = DeleteStamp::min(stamp, Some((spec.stamp)(seq)));
    }
    if !spec.bottommost || out.retains_deleted {
        let first = out.first.as_deref().unwrap_or_default();
        for (lo, hi, s) in &spec.inherited {
            if lo.as_slice() <= out.last.as_slice() && first <= hi.as_slice() {
                stamp = DeleteStamp::min(stamp, Some(*s));
            }
        }
    }
    w.set_oldest_delete(stamp);
    *out = OutputStamp::default();
}

/// Removes and returns the fragments (or fragment parts) below `key`.
fn take_below(q: &mut std::collections::VecDeque<Piece>, key: &[u8]) -> Vec<Piece> {
    let mut out = Vec::new();
    while let Some(front) = q.front_mut() {
        if front.lo.as_ref() >= key {
            break;
        }
        if before_end(key, &front.hi) {
            // Straddles the boundary: [lo, key) here, [key, hi) stays for the next file.
            let mut head = front.clone();
            head.hi = bytes::Bytes::copy_from_slice(key);
            front.lo = bytes::Bytes::copy_from_slice(key);
            out.push(head);
            break;
        }
        out.extend(q.pop_front());
    }
    out
}

/// A finished output: its metadata and the cells collected for the global range filter.
type Output = (FileMeta, Option<crate::filter::global::Cells>);

fn finish(w: Option<TableWriter>, metas: &mut Vec<Output>, stats: &mut RunStats) -> Result<()> {
    if let Some(w) = w {
        let path = w.path().to_path_buf();
        match w.finish_with_cells() {
            Ok(out) => {
                stats.bytes_out += out.0.size;
                metas.push(out);
            }
            Err(e) => {
                let _ = std::fs::remove_file(path);
                return Err(e);
            }
        }
    }
    Ok(())
}
