//! One entry of the deletion ledger.

use serde::{Deserialize, Serialize};

/// What a delete removes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeletionKind {
    /// Every version of one key older than the delete.
    Point {
        /// The key.
        key: Vec<u8>,
    },
    /// Every key in `[lo, hi)` older than the delete (empty `hi`: the end of the key space).
    Range {
        /// Inclusive lower key.
        lo: Vec<u8>,
        /// Exclusive upper key.
        hi: Vec<u8>,
    },
    /// Every entry with delete key (time) in `[t_lo, t_hi)` and key in `[lo, hi)` (empty:
    /// unbounded) older than the delete, dropped page by page.
    TimeWindow {
        /// Inclusive lower delete key.
        t_lo: u64,
        /// Exclusive upper delete key.
        t_hi: u64,
        /// Inclusive lower key.
        lo: Vec<u8>,
        /// Exclusive upper key (empty: the end of the key space).
        hi: Vec<u8>,
    },
}

impl DeletionKind {
    /// True for kinds the persistence watermark covers (point and range deletes); time windows
    /// are persisted one by one when their page drops are done.
    pub fn follows_watermark(&self) -> bool {
        matches!(self, DeletionKind::Point { .. } | DeletionKind::Range { .. })
    }
}

/// Where a delete stands against its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeletionStatus {
    /// Hidden from reads; covered data may still be in files, and the deadline has not passed.
    Pending,
    /// Physically gone from every live file and WAL, by the deadline.
    Persisted,
    /// Persisted after the deadline, or still pending past it.
    Late,
}

/// A delete and its life: issued, applied (hidden from reads), persisted (physically gone).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deletion {
    /// Deletion id: the sequence number of the delete.
    pub id: u64,
    /// What it removes.
    pub kind: DeletionKind,
    /// When it was issued (ms since the Unix epoch).
    pub issued_at_ms: u64,
    /// When its covered data must be physically gone: `issued_at_ms` plus the delete deadline
    /// (`u64::MAX` without one).
    pub deadline_ms: u64,
    /// When the engine applied it, after which reads no longer return covered data.
    pub applied_at_ms: u64,
    /// When the manifest commit happened after which no live file, memtable or WAL held covered
    /// data (`None`: not yet).
    pub persisted_at_ms: Option<u64>,
}

impl Deletion {
    /// Status as of `now_ms`.
    pub fn status(&self, now_ms: u64) -> DeletionStatus {
        match self.persisted_at_ms {
            Some(t) if t <= self.deadline_ms => DeletionStatus::Persisted,
            Some(_) => DeletionStatus::Late,
            None if now_ms > self.deadline_ms => DeletionStatus::Late,
            None => DeletionStatus::Pending,
        }
    }

    /// True once persisted (in time or late).
    pub fn is_persisted(&self) -> bool {
        self.persisted_at_ms.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_follows_deadline_and_persistence() {
        let mut d = Deletion {
            id: 7,
            kind: DeletionKind::Point { key: b"k".to_vec() },
            issued_at_ms: 1_000,
            deadline_ms: 2_000,
            applied_at_ms: 1_000,
            persisted_at_ms: None,
        };
        assert_eq!(d.status(1_500), DeletionStatus::Pending);
        assert_eq!(d.status(2_001), DeletionStatus::Late);
        d.persisted_at_ms = Some(2_000);
        assert_eq!(d.status(9_999), DeletionStatus::Persisted);
        d.persisted_at_ms = Some(2_001);
        assert_eq!(d.status(2_001), DeletionStatus::Late);
    }
}
