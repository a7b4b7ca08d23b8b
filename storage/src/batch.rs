//! Write batches: the unit of atomic writes.

use bytes::Bytes;

use crate::ledger::{DeleteRequest, DeleteRequestV1};

/// Kind of a stored entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EntryKind {
    /// A point tombstone.
    Delete = 0,
    /// A value.
    Put = 1,
}

impl EntryKind {
    /// Decodes a kind byte.
    pub fn from_u8(b: u8) -> Option<Self> {
        match b {
            0 => Some(EntryKind::Delete),
            1 => Some(EntryKind::Put),
            _ => None,
        }
    }
}

/// One operation of a [`WriteBatch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchOp {
    /// Insert or overwrite `key`.
    Put {
        /// Sort key.
        key: Bytes,
        /// Value.
        value: Bytes,
    },
    /// Delete `key` (a point tombstone).
    Delete {
        /// Sort key.
        key: Bytes,
    },
    /// Delete every key in `[lo, hi)` written before this operation (an empty `hi` means the end
    /// of the key space). Held in the range-delete index, not as tombstones.
    DeleteRange {
        /// Inclusive lower key (may be empty: the start of the key space).
        lo: Bytes,
        /// Exclusive upper key (empty: the end of the key space).
        hi: Bytes,
    },
    /// Delete every entry whose delete key (time) is in `[t_lo, t_hi)` and whose sort key is in
    /// `[lo, hi)` (empty bounds: unbounded), written before this operation. Executed by dropping
    /// whole pages of the KiWi layout.
    DeleteTimeRange {
        /// Inclusive lower delete key.
        t_lo: u64,
        /// Exclusive upper delete key.
        t_hi: u64,
        /// Inclusive lower sort key (empty: the start of the key space).
        lo: Bytes,
        /// Exclusive upper sort key (empty: the end of the key space).
        hi: Bytes,
    },
}

/// Operations applied atomically. Operation `i` of a batch written with sequence number `seq` gets
/// sequence number `seq + i`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    ops: Vec<BatchOp>,
    issued_at_ms: Option<u64>,
    request: Option<Box<DeleteRequest>>,
}

/// Longest key the engine accepts.
pub const MAX_KEY_LEN: usize = 64 << 10;
/// Largest value the engine accepts.
pub const MAX_VALUE_LEN: usize = 64 << 20;

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes room for `additional` more operations.
    pub fn reserve(&mut self, additional: usize) {
        self.ops.reserve(additional);
    }

    /// Adds a put.
    pub fn put(&mut self, key: impl Into<Bytes>, value: impl Into<Bytes>) -> &mut Self {
        self.ops.push(BatchOp::Put { key: key.into(), value: value.into() });
        self
    }

    /// Adds a point delete.
    pub fn delete(&mut self, key: impl Into<Bytes>) -> &mut Self {
        self.ops.push(BatchOp::Delete { key: key.into() });
        self
    }

    /// Adds a range delete of `[lo, hi)`; an empty `hi` means the end of the key space. A range
    /// with `lo == hi` deletes nothing.
    pub fn delete_range(&mut self, lo: impl Into<Bytes>, hi: impl Into<Bytes>) -> &mut Self {
        self.ops.push(BatchOp::DeleteRange { lo: lo.into(), hi: hi.into() });
        self
    }

    /// Adds a time-window delete: every entry with delete key in `[t_lo, t_hi)` and sort key in
    /// `[lo, hi)` (empty: unbounded).
    pub fn delete_time_range(
        &mut self,
        t_lo: u64,
        t_hi: u64,
        lo: impl Into<Bytes>,
        hi: impl Into<Bytes>,
    ) -> &mut Self {
        self.ops.push(BatchOp::DeleteTimeRange { t_lo, t_hi, lo: lo.into(), hi: hi.into() });
        self
    }

    /// Sets when the batch was issued (milliseconds since the Unix epoch). Deletes in it are due
    /// `Options::delete_deadline` after this time. A replicated log sets it once, where the write
    /// is accepted, so every replica (and every replay) shares the deadline. Unset: the time the
    /// engine applies the batch.
    pub fn set_issued_at(&mut self, ms: u64) -> &mut Self {
        self.issued_at_ms = Some(ms);
        self
    }

    /// When the batch was issued, if set.
    pub fn issued_at(&self) -> Option<u64> {
        self.issued_at_ms
    }

    /// Marks the batch's deletes as (part of) `request`: the ledger records it, and its
    /// deadline applies to them.
    pub fn set_request(&mut self, request: DeleteRequest) -> &mut Self {
        self.request = Some(Box::new(request));
        self
    }

    /// The request the batch's deletes belong to, if any.
    pub fn request(&self) -> Option<&DeleteRequest> {
        self.request.as_deref()
    }

    /// True if the batch holds a delete of any kind.
    pub fn has_deletes(&self) -> bool {
        self.ops.iter().any(|op| !matches!(op, BatchOp::Put { .. }))
    }

    /// The operations in order.
    pub fn ops(&self) -> &[BatchOp] {
        &self.ops
    }

    /// Keeps the operations `keep` is true of (called once per operation, in order).
    pub fn retain(&mut self, keep: impl FnMut(&BatchOp) -> bool) {
        self.ops.retain(keep);
    }

    /// Keeps the first `len` operations.
    pub fn truncate(&mut self, len: usize) {
        self.ops.truncate(len);
    }

    /// Number of operations.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// True if the batch has no operations.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Checks key and value sizes.
    pub fn validate(&self) -> crate::Result<()> {
        let bad = |m: String| Err(crate::Error::InvalidArgument(m));
        let too_long = |k: &[u8]| k.len() > MAX_KEY_LEN;
        for op in &self.ops {
            match op {
                BatchOp::Put { key, .. } | BatchOp::Delete { key } if key.is_empty() => {
                    return bad("empty key".into())
                }
                BatchOp::Put { key, .. } | BatchOp::Delete { key } if too_long(key) => {
                    return bad(format!(
                        "key of {} bytes exceeds the limit of {MAX_KEY_LEN}",
                        key.len()
                    ))
                }
                BatchOp::Put { value, .. } if value.len() > MAX_VALUE_LEN => {
                    return bad(format!(
                        "value of {} bytes exceeds the limit of {MAX_VALUE_LEN}",
                        value.len()
                    ))
                }
                BatchOp::DeleteRange { lo, hi } if too_long(lo) || too_long(hi) => {
                    return bad(format!("range bound exceeds the key limit of {MAX_KEY_LEN}"))
                }
                BatchOp::DeleteRange { lo, hi } if !hi.is_empty() && lo > hi => {
                    return bad("range delete with lower bound above upper bound".into())
                }
                BatchOp::DeleteTimeRange { lo, hi, .. } if too_long(lo) || too_long(hi) => {
                    return bad(format!("time-range key bound exceeds the limit of {MAX_KEY_LEN}"))
                }
                BatchOp::DeleteTimeRange { t_lo, t_hi, .. } if t_lo > t_hi => {
                    return bad(format!("time range [{t_lo}, {t_hi}) is inverted"))
                }
                BatchOp::DeleteTimeRange { lo, hi, .. } if !hi.is_empty() && lo > hi => {
                    return bad("time-range delete with lower key above upper key".into())
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Encodes the batch with its issue time, for shipping it elsewhere (a Raft log entry);
    /// [`WriteBatch::from_bytes`] reads it back.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.to_bytes_issued(0)
    }

    /// [`WriteBatch::to_bytes`], with `issued_at_ms` as the issue time if the batch has none.
    pub fn to_bytes_issued(&self, issued_at_ms: u64) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(0, self.issued_at_ms.unwrap_or(issued_at_ms), &mut out);
        out
    }

    /// Decodes bytes written by [`WriteBatch::to_bytes`]; `None` if they do not decode. An issue
    /// time of 0 means none was set.
    pub fn from_bytes(buf: &[u8]) -> Option<WriteBatch> {
        Self::decode_bytes(buf).ok()
    }

    /// [`WriteBatch::from_bytes`], saying why the bytes do not decode.
    pub fn decode_bytes(buf: &[u8]) -> Result<WriteBatch, BatchDecodeError> {
        let (_, mut batch) = Self::decode(buf)?;
        if batch.issued_at_ms == Some(0) {
            batch.issued_at_ms = None;
        }
        Ok(batch)
    }

    /// Encodes the batch with its first sequence number and issue time (the WAL record payload).
    pub(crate) fn encode(&self, seq: u64, issued_at_ms: u64, out: &mut Vec<u8>) {
        out.extend_from_slice(&seq.to_le_bytes());
        out.extend_from_slice(&issued_at_ms.to_le_bytes());
        out.extend_from_slice(&(self.ops.len() as u32).to_le_bytes());
        for op in &self.ops {
            match op {
                BatchOp::Put { key, value } => {
                    out.push(EntryKind::Put as u8);
                    put_bytes(out, key);
                    put_bytes(out, value);
                }
                BatchOp::Delete { key } => {
                    out.push(EntryKind::Delete as u8);
                    put_bytes(out, key);
                }
                BatchOp::DeleteRange { lo, hi } => {
                    out.push(OP_DELETE_RANGE);
                    put_bytes(out, lo);
                    put_bytes(out, hi);
                }
                BatchOp::DeleteTimeRange { t_lo, t_hi, lo, hi } => {
                    out.push(OP_DELETE_TIME_RANGE);
                    put_bytes(out, lo);
                    put_bytes(out, hi);
                    out.extend_from_slice(&t_lo.to_le_bytes());
                    out.extend_from_slice(&t_hi.to_le_bytes());
                }
            }
        }
        if let Some(r) = &self.request {
            out.push(REQUEST_TRAILER_V2);
            put_bytes(out, &postcard::to_allocvec(r.as_ref()).unwrap_or_default());
        }
    }

    /// Decodes a payload written by [`WriteBatch::encode`].
    pub(crate) fn decode(mut buf: &[u8]) -> Result<(u64, WriteBatch), BatchDecodeError> {
        use BatchDecodeError::Malformed;
        let seq = u64::from_le_bytes(
            take(&mut buf, 8).ok_or(Malformed)?.try_into().map_err(|_| Malformed)?,
        );
        let issued = u64::from_le_bytes(
            take(&mut buf, 8).ok_or(Malformed)?.try_into().map_err(|_| Malformed)?,
        );
        let n = u32::from_le_bytes(
            take(&mut buf, 4).ok_or(Malformed)?.try_into().map_err(|_| Malformed)?,
        ) as usize;
        let mut ops = Vec::with_capacity(n.min(1 << 16));
        for _ in 0..n {
            let tag = *take(&mut buf, 1).and_then(|t| t.first()).ok_or(Malformed)?;
            if !matches!(tag, OP_DELETE_RANGE | OP_DELETE_TIME_RANGE)
                && EntryKind::from_u8(tag).is_none()
            {
                return Err(BatchDecodeError::UnknownOp(tag));
            }
            ops.push(decode_op(tag, &mut buf).ok_or(Malformed)?);
        }
        let mut request = None;
        match buf.split_first() {
            Some((&REQUEST_TRAILER_V1, mut rest)) => {
                let bytes = get_bytes(&mut rest).ok_or(Malformed)?;
                let r: DeleteRequestV1 = postcard::from_bytes(bytes).map_err(|_| Malformed)?;
                request = Some(Box::new(r.into()));
                buf = rest;
            }
            Some((&REQUEST_TRAILER_V2, mut rest)) => {
                let bytes = get_bytes(&mut rest).ok_or(Malformed)?;
                request = Some(Box::new(postcard::from_bytes(bytes).map_err(|_| Malformed)?));
                buf = rest;
            }
            Some((&tag, _)) => return Err(BatchDecodeError::UnknownTrailer(tag)),
            None => {}
        }
        if !buf.is_empty() {
            return Err(Malformed);
        }
        Ok((seq, WriteBatch { ops, issued_at_ms: Some(issued), request }))
    }
}

/// Decodes the operation tagged `tag` (a known tag); `None` if its bytes are malformed.
fn decode_op(tag: u8, buf: &mut &[u8]) -> Option<BatchOp> {
    let key = Bytes::copy_from_slice(get_bytes(buf)?);
    Some(match tag {
        OP_DELETE_RANGE => {
            BatchOp::DeleteRange { lo: key, hi: Bytes::copy_from_slice(get_bytes(buf)?) }
        }
        OP_DELETE_TIME_RANGE => {
            let hi = Bytes::copy_from_slice(get_bytes(buf)?);
            let t_lo = u64::from_le_bytes(take(buf, 8)?.try_into().ok()?);
            let t_hi = u64::from_le_bytes(take(buf, 8)?.try_into().ok()?);
            BatchOp::DeleteTimeRange { t_lo, t_hi, lo: key, hi }
        }
        t => match EntryKind::from_u8(t)? {
            EntryKind::Put => BatchOp::Put { key, value: Bytes::copy_from_slice(get_bytes(buf)?) },
            EntryKind::Delete => BatchOp::Delete { key },
        },
    })
}

/// Why bytes do not decode as a write batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BatchDecodeError {
    /// The bytes are not a write batch (truncated, or lengths that do not add up).
    #[error("malformed write batch")]
    Malformed,
    /// An operation this build does not know: a newer build wrote the batch.
    #[error(
        "write batch operation {0} is unknown to this build (ebb {build}, operations 0-3): a newer build wrote it",
        build = env!("CARGO_PKG_VERSION")
    )]
    UnknownOp(u8),
    /// A trailer this build does not know: a newer build wrote the batch.
    #[error(
        "write batch trailer {0:#x} is unknown to this build (ebb {build}, trailers 0xd1-0xd2): a newer build wrote it",
        build = env!("CARGO_PKG_VERSION")
    )]
    UnknownTrailer(u8),
}

impl BatchDecodeError {
    /// True if a newer build wrote the batch (as against bytes that are not a batch at all).
    pub fn is_newer_format(&self) -> bool {
        matches!(self, BatchDecodeError::UnknownOp(_) | BatchDecodeError::UnknownTrailer(_))
    }
}

/// WAL tag of a range delete (after the entry kinds).
const OP_DELETE_RANGE: u8 = 2;
/// WAL tag of a time-range delete.
const OP_DELETE_TIME_RANGE: u8 = 3;
/// Tag of the optional trailer after the operations: the batch's [`DeleteRequest`] as first
/// encoded (without `issued_by`; read, never written).
const REQUEST_TRAILER_V1: u8 = 0xD1;
/// Tag of the optional trailer after the operations: the batch's [`DeleteRequest`].
const REQUEST_TRAILER_V2: u8 = 0xD2;

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

fn take<'a>(buf: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if buf.len() < n {
        return None;
    }
    let (head, tail) = buf.split_at(n);
    *buf = tail;
    Some(head)
}

fn get_bytes<'a>(buf: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = u32::from_le_bytes(take(buf, 4)?.try_into().ok()?) as usize;
    take(buf, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_roundtrip() {
        let mut b = WriteBatch::new();
        b.put("a", "1")
            .delete("b")
            .put("c", vec![0u8; 300])
            .delete_range("d", "")
            .delete_range("", "z")
            .delete_time_range(5, 9, "a", "")
            .set_issued_at(1_700_000_000_123)
            .set_request(DeleteRequest {
                id: 77,
                kind: "erase".into(),
                text: "user = 'x'".into(),
                rows: Some(3),
                deadline_ms: Some(1_700_000_100_000),
                issued_by: "alice via postgres from 10.0.0.7:51234".into(),
            });
        let mut buf = Vec::new();
        b.encode(42, 1_700_000_000_123, &mut buf);
        let (seq, d) = WriteBatch::decode(&buf).unwrap();
        assert_eq!(seq, 42);
        assert_eq!(d, b);
        assert!(d.has_deletes());
        for cut in 0..buf.len() {
            // Cutting the whole trailer off leaves a valid batch without a request.
            if let Ok((_, d)) = WriteBatch::decode(&buf[..cut]) {
                assert!(d.request().is_none() && d.ops() == b.ops(), "truncated at {cut}");
            }
        }
    }

    /// An operation or trailer this build does not know is told apart from bytes that are not a
    /// batch: a newer build wrote it.
    #[test]
    fn operations_and_trailers_of_a_newer_build_are_named() {
        let mut b = WriteBatch::new();
        b.put("k", "v");
        let mut buf = Vec::new();
        b.encode(1, 1, &mut buf);
        let mut op = buf.clone();
        op[20] = 9; // the first operation's tag
        let err = WriteBatch::decode(&op).unwrap_err();
        assert_eq!(err, BatchDecodeError::UnknownOp(9));
        assert!(
            err.is_newer_format() && err.to_string().contains("a newer build wrote it"),
            "{err}"
        );
        let mut trailer = buf.clone();
        trailer.extend_from_slice(&[0xD9, 0, 0, 0, 0]);
        assert_eq!(
            WriteBatch::decode(&trailer).unwrap_err(),
            BatchDecodeError::UnknownTrailer(0xD9)
        );
        let err = WriteBatch::decode(&buf[..buf.len() - 1]).unwrap_err();
        assert!(!err.is_newer_format(), "{err}");
    }

    #[test]
    fn batches_written_before_issued_by_still_decode() {
        let mut b = WriteBatch::new();
        b.delete_range("a", "b");
        let mut buf = Vec::new();
        b.encode(7, 1, &mut buf);
        let legacy = DeleteRequestV1 {
            id: 5,
            kind: "delete".into(),
            text: "host = 'a'".into(),
            rows: 2,
            deadline_ms: None,
        };
        buf.push(REQUEST_TRAILER_V1);
        put_bytes(&mut buf, &postcard::to_allocvec(&legacy).unwrap());
        let (_, d) = WriteBatch::decode(&buf).unwrap();
        let r = d.request().unwrap();
        assert_eq!((r.id, r.rows, r.issued_by.as_str()), (5, Some(2), ""));
        assert_eq!(r.text, "host = 'a'");
    }

    #[test]
    fn validate_rejects_empty_and_huge_keys() {
        let mut b = WriteBatch::new();
        b.put("", "x");
        assert!(b.validate().is_err());
        let mut b = WriteBatch::new();
        b.put(vec![1u8; MAX_KEY_LEN + 1], "x");
        assert!(b.validate().is_err());
        let mut b = WriteBatch::new();
        b.delete_range("b", "a");
        assert!(b.validate().is_err(), "inverted range accepted");
        let mut b = WriteBatch::new();
        b.delete_time_range(9, 5, "", "");
        assert!(b.validate().is_err(), "inverted time range accepted");
        let mut b = WriteBatch::new();
        b.delete_range("", "").delete_range("a", "a").delete_time_range(5, 5, "", "");
        assert!(b.validate().is_ok(), "whole key space and empty ranges are valid");
    }
}
