//! Writes the output tables of a flush or compaction from a merged cursor.

use std::path::Path;
use std::sync::Arc;

use super::retention::{Retention, Version};
use crate::cache::PageCache;
use crate::failpoint::{points, FailPoints};
use crate::gloran::piece::{before_end, Piece, SeqList};
use crate::iter::EntryCursor;
use crate::sst::writer::WriterOptions;
use crate::sst::{FileMeta, Table, TableWriter};
use crate::{Options, Result};

/// Covering range-delete sequence numbers of a key, given its oldest version's sequence number.
pub(crate) type CoveringFn<'a> = dyn Fn(&[u8], u64) -> Result<SeqList> + 'a;

/// What a run of [`write_tables`] needs from the engine.
pub(crate) struct OutputSpec<'a> {
    pub dir: &'a Path,
    pub opts: &'a Options,
    pub cache: &'a Arc<PageCache>,
    pub level: usize,
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
    let mut metas: Vec<FileMeta> = Vec::new();
    let result = write_inner(cursor, spec, &mut metas);
    match result {
        Ok(stats) => {
            let mut tables = Vec::with_capacity(metas.len());
            for m in metas {
                tables.push(Arc::new(Table::open(spec.dir, m, spec.cache.clone())?));
            }
            Ok((tables, stats))
        }
        Err(e) => {
            for m in &metas {
                let _ = std::fs::remove_file(spec.dir.join(crate::sst::file_name(m.id)));
            }
            Err(e)
        }
    }
}

fn write_inner(
    cursor: &mut dyn EntryCursor,
    spec: &OutputSpec<'_>,
    metas: &mut Vec<FileMeta>,
) -> Result<RunStats> {
    let wopts = WriterOptions {
        page_size: spec.opts.page_size,
        tile_pages: spec.opts.tile_pages_for(spec.level),
        bloom_bits_per_key: spec.opts.bloom_bits_per_key,
        compression: spec.opts.compression,
        delete_key: spec.opts.delete_key.clone(),
    };
    let new_writer = || -> Result<TableWriter> {
        let id = (spec.next_id)();
        let path = spec.dir.join(crate::sst::file_name(id));
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
        match (spec.ranges, versions.last()) {
            (Some(covering), Some(oldest)) => {
                let cov = covering(&key, oldest.seq)?;
                spec.retention.retain_covered(&mut versions, &cov);
            }
            _ => spec.retention.retain(&mut versions),
        }
        if versions.is_empty() {
            continue;
        }
        if let Some(mut done) = if full { writer.take() } else { None } {
            done.set_range_tombstones(take_below(&mut fragments, &key));
            finish(Some(done), metas, &mut stats)?;
            if let Some(fp) = spec.fail {
                fp.check(points::COMPACTION_MID_OUTPUT)?;
            }
        }
        let w = match &mut writer {
            Some(w) => w,
            None => writer.insert(new_writer()?),
        };
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
    }
    finish(writer.take(), metas, &mut stats)?;
    Ok(stats)
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

fn finish(w: Option<TableWriter>, metas: &mut Vec<FileMeta>, stats: &mut RunStats) -> Result<()> {
    if let Some(w) = w {
        let path = w.path().to_path_buf();
        match w.finish() {
            Ok(m) => {
                stats.bytes_out += m.size;
                metas.push(m);
            }
            Err(e) => {
                let _ = std::fs::remove_file(path);
                return Err(e);
            }
        }
    }
    Ok(())
}
