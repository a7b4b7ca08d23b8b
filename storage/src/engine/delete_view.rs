//! The deletes an output file is written through. A flush and a compaction each take one
//! [`DeleteView`] before they read their inputs and hand it to the file writer, so both drop
//! exactly what every reader no longer sees: entries under a range delete (the GLORAN index and
//! buffers as of the view, or in tombstone mode the inputs' own tombstones), under an executed
//! time window, or past their retention.

use std::sync::Arc;

use super::retention::Rule;
use super::{Inner, SuperVersion};
use crate::gloran::piece::{combine, Piece, SeqList};
use crate::kiwi::TimeWindow;
use crate::Result;

/// What hides entries from a flush's or a compaction's outputs.
pub(super) struct DeleteView {
    /// The range-delete state read (EVE's generation and the state the index came from).
    generation: u64,
    sv: Arc<SuperVersion>,
    /// Range deletes up to this sequence number are in the view.
    upto: u64,
    /// Range deletes up to this one are applied to the outputs (every snapshot sees them).
    rd_applied: u64,
    windows: Arc<Vec<TimeWindow>>,
    rules: Arc<Vec<Rule>>,
    /// Tombstone mode: the inputs' range tombstones, which apply to the inputs' entries and
    /// move down into the outputs.
    own: Option<Vec<Piece>>,
    /// The live snapshots.
    snaps: Vec<u64>,
}

impl Inner {
    /// The view a flush or compaction writes through; `own_tombstones` gives its inputs' range
    /// tombstones, asked for in tombstone mode only.
    pub(super) fn delete_view(&self, own_tombstones: impl FnOnce() -> Vec<Piece>) -> DeleteView {
        let (upto, rd_applied) = self.range_view_bounds();
        let (generation, sv) = self.read_view();
        let own = (self.deletes.ranges.in_files()).then(own_tombstones);
        DeleteView {
            generation,
            sv,
            upto,
            rd_applied,
            windows: self.windows(),
            rules: self.rules(),
            own,
            snaps: self.snapshots.seqs(),
        }
    }
}

impl DeleteView {
    /// The sequence numbers of the deletes covering `key` above `min_seq`.
    pub(super) fn covering(&self, inner: &Inner, key: &[u8], min_seq: u64) -> Result<SeqList> {
        let local = self.own.as_deref();
        inner.output_covering(
            (self.generation, &self.sv),
            local,
            &self.windows,
            (key, min_seq, self.upto),
        )
    }

    /// The range tombstones the outputs carry (tombstone mode): the inputs', collapsed to the
    /// live snapshots, with those every snapshot sees below `gc` dropped (fully applied).
    pub(super) fn tombstones(&self, gc: u64) -> Vec<Piece> {
        match &self.own {
            Some(own) => combine(&[own], Some(&self.snaps), gc),
            None => Vec::new(),
        }
    }

    /// True if `key` is past its retention.
    pub(super) fn expired(&self, inner: &Inner, key: &[u8]) -> bool {
        inner.expired(&self.rules, key)
    }

    /// Range deletes up to this one are applied to the outputs.
    pub(super) fn rd_applied(&self) -> u64 {
        self.rd_applied
    }

    /// The oldest live snapshot, if any.
    pub(super) fn oldest_snapshot(&self) -> Option<u64> {
        self.snaps.first().copied()
    }
}
