//! One entry of the deletion ledger.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// When a delete's covered data must be physically gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Deadline {
    /// By this time (ms since the Unix epoch).
    At(u64),
    /// None (no delete deadline configured, none asked for): later than any time.
    Never,
}

impl Deadline {
    /// The time, if there is one (ms).
    pub fn ms(self) -> Option<u64> {
        match self {
            Deadline::At(ms) => Some(ms),
            Deadline::Never => None,
        }
    }

    /// True if data gone at `at_ms` was gone by the deadline.
    pub fn met_by(self, at_ms: u64) -> bool {
        self.ms().is_none_or(|d| at_ms <= d)
    }

    /// True if the deadline is over at `now_ms`.
    pub fn passed(self, now_ms: u64) -> bool {
        self.ms().is_some_and(|d| now_ms > d)
    }

    /// The time left at `now_ms` (`Duration::MAX` without a deadline, zero once passed).
    pub fn left(self, now_ms: u64) -> std::time::Duration {
        match self {
            Deadline::At(d) => std::time::Duration::from_millis(d.saturating_sub(now_ms)),
            Deadline::Never => std::time::Duration::MAX,
        }
    }
}

/// Stored as ledgers, WAL segments and Raft logs have always held it: a u64 of milliseconds,
/// `u64::MAX` for [`Deadline::Never`].
impl Serialize for Deadline {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.ms().unwrap_or(u64::MAX))
    }
}

impl<'de> Deserialize<'de> for Deadline {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match u64::deserialize(d)? {
            u64::MAX => Deadline::Never,
            ms => Deadline::At(ms),
        })
    }
}

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
    /// When its covered data must be physically gone: `issued_at_ms` plus the delete deadline,
    /// or the request's own if earlier.
    pub deadline_ms: Deadline,
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
            Some(t) if self.deadline_ms.met_by(t) => DeletionStatus::Persisted,
            Some(_) => DeletionStatus::Late,
            None if self.deadline_ms.passed(now_ms) => DeletionStatus::Late,
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
            deadline_ms: Deadline::At(2_000),
            applied_at_ms: 1_000,
            persisted_at_ms: None,
        };
        assert_eq!(d.status(1_500), DeletionStatus::Pending);
        assert_eq!(d.status(2_001), DeletionStatus::Late);
        d.persisted_at_ms = Some(2_000);
        assert_eq!(d.status(9_999), DeletionStatus::Persisted);
        d.persisted_at_ms = Some(2_001);
        assert_eq!(d.status(2_001), DeletionStatus::Late);
        d.deadline_ms = Deadline::Never;
        assert_eq!(d.status(u64::MAX), DeletionStatus::Persisted);
    }

    #[test]
    fn deadlines_are_stored_as_before_and_never_comes_last() {
        for (d, stored) in [(Deadline::At(2_000), 2_000u64), (Deadline::Never, u64::MAX)] {
            let bytes = postcard::to_allocvec(&d).unwrap();
            assert_eq!(bytes, postcard::to_allocvec(&stored).unwrap());
            assert_eq!(postcard::from_bytes::<Deadline>(&bytes).unwrap(), d);
        }
        assert!(Deadline::At(u64::MAX - 1) < Deadline::Never);
        assert!(Deadline::At(1) < Deadline::At(2));
    }
}
