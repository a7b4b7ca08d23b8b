//! Write batches: the unit of atomic writes.

use bytes::Bytes;

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
}

impl BatchOp {
    /// The key this operation writes.
    pub fn key(&self) -> &Bytes {
        match self {
            BatchOp::Put { key, .. } | BatchOp::Delete { key } => key,
        }
    }
}

/// Operations applied atomically. Operation `i` of a batch written with sequence number `seq` gets
/// sequence number `seq + i`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    ops: Vec<BatchOp>,
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

    /// The operations in order.
    pub fn ops(&self) -> &[BatchOp] {
        &self.ops
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
        for op in &self.ops {
            if op.key().is_empty() {
                return Err(crate::Error::InvalidArgument("empty key".into()));
            }
            if op.key().len() > MAX_KEY_LEN {
                return Err(crate::Error::InvalidArgument(format!(
                    "key of {} bytes exceeds the limit of {MAX_KEY_LEN}",
                    op.key().len()
                )));
            }
            if let BatchOp::Put { value, .. } = op {
                if value.len() > MAX_VALUE_LEN {
                    return Err(crate::Error::InvalidArgument(format!(
                        "value of {} bytes exceeds the limit of {MAX_VALUE_LEN}",
                        value.len()
                    )));
                }
            }
        }
        Ok(())
    }

    /// Encodes the batch with its first sequence number (the WAL record payload).
    pub(crate) fn encode(&self, seq: u64, out: &mut Vec<u8>) {
        out.extend_from_slice(&seq.to_le_bytes());
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
            }
        }
    }

    /// Decodes a payload written by [`WriteBatch::encode`]; `None` if malformed.
    pub(crate) fn decode(mut buf: &[u8]) -> Option<(u64, WriteBatch)> {
        let seq = u64::from_le_bytes(take(&mut buf, 8)?.try_into().ok()?);
        let n = u32::from_le_bytes(take(&mut buf, 4)?.try_into().ok()?) as usize;
        let mut ops = Vec::with_capacity(n.min(1 << 16));
        for _ in 0..n {
            let kind = EntryKind::from_u8(*take(&mut buf, 1)?.first()?)?;
            let key = Bytes::copy_from_slice(get_bytes(&mut buf)?);
            ops.push(match kind {
                EntryKind::Put => {
                    BatchOp::Put { key, value: Bytes::copy_from_slice(get_bytes(&mut buf)?) }
                }
                EntryKind::Delete => BatchOp::Delete { key },
            });
        }
        if !buf.is_empty() {
            return None;
        }
        Some((seq, WriteBatch { ops }))
    }
}

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
        b.put("a", "1").delete("b").put("c", vec![0u8; 300]);
        let mut buf = Vec::new();
        b.encode(42, &mut buf);
        let (seq, d) = WriteBatch::decode(&buf).unwrap();
        assert_eq!(seq, 42);
        assert_eq!(d, b);
        for cut in 0..buf.len() {
            assert!(WriteBatch::decode(&buf[..cut]).is_none(), "truncated at {cut} decoded");
        }
    }

    #[test]
    fn validate_rejects_empty_and_huge_keys() {
        let mut b = WriteBatch::new();
        b.put("", "x");
        assert!(b.validate().is_err());
        let mut b = WriteBatch::new();
        b.put(vec![1u8; MAX_KEY_LEN + 1], "x");
        assert!(b.validate().is_err());
    }
}
