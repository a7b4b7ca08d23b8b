//! Delete requests: the user-level action (a `DELETE` statement, an erasure, a retention purge)
//! that a batch's deletes carry out, recorded with them so the ledger can answer for the action
//! as a whole.

use serde::{Deserialize, Serialize};

/// What a batch's deletes were issued for. Carried with the batch (WAL, Raft log), so every
/// replica and every replay records the same request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteRequest {
    /// Request id, the same on every shard and replica the request reaches. One request may
    /// span several batches.
    pub id: u64,
    /// What kind of action it is (`delete`, `erase`, `retention`, `drop`).
    pub kind: String,
    /// What it deletes, as the user stated it (a predicate, a statement).
    pub text: String,
    /// Rows the batch's deletes hid when it was issued (`None`: not counted, as for a table
    /// drop or a retention purge).
    #[serde(with = "max_is_none")]
    pub rows: Option<u64>,
    /// When the deleted data must be physically gone (ms since the Unix epoch); `None`: the
    /// engine's `delete_deadline` after issue. A later deadline than that is capped to it.
    pub deadline_ms: Option<u64>,
    /// Who asked for it (user, protocol, client address; empty: not recorded, as by a build
    /// that did not record it).
    pub issued_by: String,
}

/// A [`DeleteRequest`] as first encoded, before it named who issued it; still read from older
/// WAL segments, Raft logs and ledgers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DeleteRequestV1 {
    pub id: u64,
    pub kind: String,
    pub text: String,
    pub rows: u64,
    pub deadline_ms: Option<u64>,
}

impl From<DeleteRequestV1> for DeleteRequest {
    fn from(r: DeleteRequestV1) -> Self {
        DeleteRequest {
            id: r.id,
            kind: r.kind,
            text: r.text,
            rows: (r.rows != u64::MAX).then_some(r.rows),
            deadline_ms: r.deadline_ms,
            issued_by: String::new(),
        }
    }
}

/// A [`RequestRecord`] of a [`DeleteRequestV1`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RequestRecordV1 {
    pub request: DeleteRequestV1,
    pub first_seq: u64,
    pub end_seq: u64,
    pub issued_at_ms: u64,
    pub applied_at_ms: u64,
    pub deadline_ms: super::Deadline,
}

impl From<RequestRecordV1> for RequestRecord {
    fn from(r: RequestRecordV1) -> Self {
        RequestRecord {
            request: r.request.into(),
            first_seq: r.first_seq,
            end_seq: r.end_seq,
            issued_at_ms: r.issued_at_ms,
            applied_at_ms: r.applied_at_ms,
            deadline_ms: r.deadline_ms,
        }
    }
}

/// An `Option<u64>` stored as a u64, `u64::MAX` for `None`: how WAL segments, Raft logs and
/// ledgers have always held it.
mod max_is_none {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(v.unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        let v = u64::deserialize(d)?;
        Ok((v != u64::MAX).then_some(v))
    }
}

/// One batch of a request as the ledger records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// The request.
    pub request: DeleteRequest,
    /// Sequence number of the batch's first operation.
    pub first_seq: u64,
    /// One past the sequence number of its last operation.
    pub end_seq: u64,
    /// When the batch was issued (ms).
    pub issued_at_ms: u64,
    /// When this engine applied it (ms).
    pub applied_at_ms: u64,
    /// Its deadline.
    pub deadline_ms: super::Deadline,
}

/// Where one request stands in one engine: its batches together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestStatus {
    /// The request (`rows` summed over its batches here).
    pub request: DeleteRequest,
    /// Earliest issue time of its batches (ms).
    pub issued_at_ms: u64,
    /// When the engine applied its last batch (ms), after which reads no longer return data
    /// it deletes.
    pub applied_at_ms: u64,
    /// Its deadline.
    pub deadline_ms: super::Deadline,
    /// Engine deletes (ledger entries) it consists of.
    pub deletes: u64,
    /// Of those, how many are not yet persisted.
    pub pending: u64,
    /// When its last delete was persisted (`None` while any is pending, or if the ledger has
    /// already forgotten some of them).
    pub persisted_at_ms: Option<u64>,
    /// Ids (sequence numbers) of its engine deletes.
    pub delete_ids: Vec<u64>,
}
