//! FADE: delete-aware compaction that persists every delete within a deadline `D_th`.
//!
//! Every SST carries a [`DeleteStamp`]: the oldest delete whose tombstone it holds, or whose
//! covered data may still lie in it or below it (a tombstone superseded by a newer write passes
//! its stamp on, because the data it deleted may still sit deeper). Stamps are inherited through
//! every merge and never reset; only a bottommost merge that keeps no tombstone and no shadowed
//! version clears them. Range deletes of the global index are tracked apart: a file that may
//! still hold data a pending range delete covers (it overlaps the range, holds entries older than
//! the delete, and was written before the delete was applied) is due when that delete is.
//!
//! The deadline is split ([`Deadlines`]): a tenth for the memtable (flushed by the age of its
//! oldest delete), a tenth kept back at the end for the last compaction to run, the rest across
//! the levels exponentially (note 004 §2.1, with the cumulative reading of pitfall P1): a delete
//! must have left level `i` of a tree whose deepest non-empty level is `B` by
//! `(T^(i+1) - 1) / (T^B - 1)` of the level budget. [`policy::pick_expired`]
//! compacts the most overdue file first (earliest deadline first), regardless of level
//! saturation; ties go to the shallower level, then the file with more tombstones.

pub mod deadline;
pub mod policy;

pub use deadline::Deadlines;

use serde::{Deserialize, Serialize};

/// What a file (or memtable) knows of the deletes it holds, for deadline tracking: the oldest
/// one's sequence number (a bound for the persistence watermark) and the earliest due base.
///
/// A delete's due base is its deadline minus `D_th`: its issue time under the engine's default
/// deadline, earlier for a delete with a shorter deadline of its own (an erasure with
/// `DEADLINE '1h'`). Every per-level due time is computed from it, so such a delete moves
/// through the levels as fast as its deadline needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DeleteStamp {
    /// Sequence number of the oldest delete.
    pub seq: u64,
    /// Earliest due base, milliseconds since the Unix epoch.
    pub ms: u64,
}

impl DeleteStamp {
    /// The stamp of two optional stamps together: the older sequence number and the earlier due
    /// base (which may come from different deletes).
    pub fn min(a: Option<DeleteStamp>, b: Option<DeleteStamp>) -> Option<DeleteStamp> {
        match (a, b) {
            (Some(x), Some(y)) => Some(DeleteStamp { seq: x.seq.min(y.seq), ms: x.ms.min(y.ms) }),
            (x, None) => x,
            (None, y) => y,
        }
    }
}
