//! Delete requests as the database issues them: every `DELETE`, erasure, table drop and
//! retention purge gets a request id, the same on every shard it reaches, under which the
//! ledgers of all replicas record its deletes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use ebb_storage::DeleteRequest;

/// A delete request before it is issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestSpec {
    /// Request id.
    pub id: u64,
    /// `delete`, `erase`, `drop` or `retention`.
    pub kind: String,
    /// What it deletes, as stated (a statement or predicate).
    pub text: String,
    /// Deadline (ms since the Unix epoch) if shorter than the engine's delete deadline.
    pub deadline_ms: Option<u64>,
    /// Who asked for it: user, protocol and client address (see
    /// [`crate::front::Principal`]), or what part of the server.
    pub issued_by: String,
    /// True for a request a coordinator issues on every shard (and may issue again): its
    /// outcome is recorded with its last change (see [`crate::db::RequestOutcome`]).
    pub recorded: bool,
}

impl RequestSpec {
    /// A new request (with a fresh id) of `kind` deleting what `text` says.
    pub fn new(kind: &str, text: impl Into<String>) -> RequestSpec {
        RequestSpec {
            id: new_request_id(),
            kind: kind.into(),
            text: text.into(),
            deadline_ms: None,
            issued_by: String::new(),
            recorded: false,
        }
    }

    /// The request as issued by `who`.
    pub fn with_issuer(mut self, who: impl Into<String>) -> RequestSpec {
        self.issued_by = who.into();
        self
    }

    /// The request with id `id` (one a coordinator gave every shard).
    pub fn with_id(mut self, id: u64) -> RequestSpec {
        self.id = id;
        self
    }

    /// The request with its outcome recorded (see [`RequestSpec::recorded`]).
    pub fn recorded(mut self) -> RequestSpec {
        self.recorded = true;
        self
    }

    /// The request with a deadline of its own.
    pub fn with_deadline(mut self, deadline_ms: Option<u64>) -> RequestSpec {
        self.deadline_ms = deadline_ms;
        self
    }

    /// What a batch of it that hid `rows` rows carries; `None`: rows not counted.
    pub fn request(&self, rows: impl Into<Option<u64>>) -> DeleteRequest {
        let rows = rows.into();
        DeleteRequest {
            id: self.id,
            kind: self.kind.clone(),
            text: self.text.clone(),
            rows,
            deadline_ms: self.deadline_ms,
            issued_by: self.issued_by.clone(),
        }
    }
}

/// A new request id: the time in ms in the high bits, and in the low 20 bits a per-process
/// counter from a random start (so ids of one process never collide within a millisecond, and
/// ids of different nodes do not in practice). Ids sort by time.
pub fn new_request_id() -> u64 {
    static SALT: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let salt = *SALT.get_or_init(|| {
        let mut seed = [0u8; 16];
        seed[..8].copy_from_slice(&u64::from(std::process::id()).to_le_bytes());
        seed[8..].copy_from_slice(&(now.as_nanos() as u64).to_le_bytes());
        xxhash_rust::xxh3::xxh3_64(&seed)
    });
    let low = salt.wrapping_add(COUNTER.fetch_add(1, Ordering::Relaxed)) & 0xF_FFFF;
    ((now.as_millis() as u64 & ((1 << 43) - 1)) << 20) | low
}

/// `secs` as the largest whole unit: `30d`, `6h`, `90m` or `45s`.
pub fn human_duration(secs: u64) -> String {
    match secs {
        0 => "0s".into(),
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// The smallest request id made at `ms` (ms since the Unix epoch) or later.
pub fn request_id_at(ms: u64) -> u64 {
    (ms & ((1 << 43) - 1)) << 20
}

/// The time (ms since the Unix epoch) request id `id` was made at.
pub fn request_id_ms(id: u64) -> u64 {
    id >> 20
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_differ_and_carry_their_time() {
        let before = crate::now_ms();
        let ids: std::collections::HashSet<u64> = (0..10_000).map(|_| new_request_id()).collect();
        assert_eq!(ids.len(), 10_000);
        let id = new_request_id();
        assert!(id < i64::MAX as u64, "fits a signed 64-bit column");
        assert!(request_id_ms(id) >= before && request_id_ms(id) <= before + 60_000);
    }
}
