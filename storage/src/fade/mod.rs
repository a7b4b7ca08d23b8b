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
//! oldest delete), the rest across the levels exponentially (note 004 §2.1, with the cumulative
//! reading of pitfall P1): a delete must have left level `i` of a tree whose deepest non-empty
//! level is `B` by `(T^(i+1) - 1) / (T^B - 1)` of the level budget. [`policy::pick_expired`]
//! compacts the most overdue file first (earliest deadline first), regardless of level
//! saturation; ties go to the shallower level, then the file with more tombstones.

pub mod deadline;
pub mod policy;

pub use deadline::Deadlines;

use serde::{Deserialize, Serialize};

/// A delete's identity for deadline tracking: its sequence number and issue time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DeleteStamp {
    /// Sequence number of the delete.
    pub seq: u64,
    /// Issue time, milliseconds since the Unix epoch.
    pub ms: u64,
}

impl DeleteStamp {
    /// The older of two optional stamps (by sequence number; issue times follow it).
    pub fn min(a: Option<DeleteStamp>, b: Option<DeleteStamp>) -> Option<DeleteStamp> {
        match (a, b) {
            (Some(x), Some(y)) => Some(if (x.seq, x.ms) <= (y.seq, y.ms) { x } else { y }),
            (x, None) => x,
            (None, y) => y,
        }
    }
}
