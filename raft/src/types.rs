//! The openraft type configuration of a shard's Raft group.

use serde::{Deserialize, Serialize};

/// Node ids are assigned by the cluster and persisted in each node's data directory.
pub type NodeId = u64;

openraft::declare_raft_types!(
    /// Type configuration of every EbbDB Raft group.
    pub TypeConfig:
        D = Command,
        R = Response,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = crate::sm::ShardSnapshot,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A replicated command. A replica applies the command of log entry `i` to its engine at
/// sequence numbers from `(i + 1) << 20` ([`crate::sm::entry_seq`]), so every replica holds identical (key, seq) pairs, and a range delete is
/// the same key x seq rectangle everywhere.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// An engine write batch (puts, point deletes, range deletes, time-window deletes), encoded
    /// as the engine encodes it.
    Batch(#[serde(with = "serde_bytes_compat")] Vec<u8>),
    /// Sets (or with `None` removes) the retention of the keys starting with `prefix`.
    SetRetention {
        /// Key prefix.
        #[serde(with = "serde_bytes_compat")]
        prefix: Vec<u8>,
        /// Retention in milliseconds.
        retention_ms: Option<u64>,
    },
    /// Splits the group in two: every replica forks its engine into the first state of group
    /// `child` on the same node (same membership; `child_batch` applied to it), then applies
    /// `batch` to itself. A second split off the same child is applied as a no-op.
    Split {
        /// The new group.
        child: u64,
        /// The parent's batch (what it keeps from now on).
        #[serde(with = "serde_bytes_compat")]
        batch: Vec<u8>,
        /// The child's first batch.
        #[serde(with = "serde_bytes_compat")]
        child_batch: Vec<u8>,
    },
    /// An engine write batch as [`Command::Batch`], LZ4-compressed (what
    /// [`Command::write_batch`] proposes when compression saves at least an eighth).
    Lz4Batch {
        /// The encoded batch's length.
        raw_len: u32,
        /// The LZ4 block.
        #[serde(with = "serde_bytes_compat")]
        block: Vec<u8>,
    },
}

/// The largest encoded write batch a [`Command::Lz4Batch`] may expand to.
pub const MAX_BATCH_BYTES: usize = 256 << 20;

/// Batches shorter than this are proposed uncompressed.
const COMPRESS_FROM: usize = 512;

impl Command {
    /// The command that writes the encoded batch `raw`: compressed with LZ4 when that saves
    /// at least an eighth of its bytes (log bytes, fsyncs and replication traffic shrink by
    /// what it saves; row keys of one series repeat their prefix).
    pub fn write_batch(raw: Vec<u8>) -> Command {
        if raw.len() < COMPRESS_FROM || raw.len() > MAX_BATCH_BYTES {
            return Command::Batch(raw);
        }
        let block = lz4_flex::block::compress(&raw);
        if block.len() > raw.len() - raw.len() / 8 {
            return Command::Batch(raw);
        }
        Command::Lz4Batch { raw_len: raw.len() as u32, block }
    }

    /// The encoded write batch the command carries, decompressed; `None` for a command that
    /// carries none. A block that does not expand to its stated length (or would expand beyond
    /// [`MAX_BATCH_BYTES`], or beyond what LZ4 can reach from its size) is an error.
    pub fn batch_bytes(&self) -> Option<Result<std::borrow::Cow<'_, [u8]>, CompressedBatchError>> {
        match self {
            Command::Batch(raw) => Some(Ok(std::borrow::Cow::Borrowed(raw))),
            Command::Lz4Batch { raw_len, block } => {
                let n = *raw_len as usize;
                // LZ4 expands a block at most 255-fold.
                if n > MAX_BATCH_BYTES || n > block.len().saturating_mul(255).saturating_add(16) {
                    return Some(Err(CompressedBatchError::TooLarge { claimed: n }));
                }
                Some(match lz4_flex::block::decompress(block, n) {
                    Ok(raw) if raw.len() == n => Ok(std::borrow::Cow::Owned(raw)),
                    Ok(raw) => Err(CompressedBatchError::Length { claimed: n, actual: raw.len() }),
                    Err(source) => Err(CompressedBatchError::Lz4(source)),
                })
            }
            Command::SetRetention { .. } | Command::Split { .. } => None,
        }
    }
}

/// Why a [`Command::Lz4Batch`] does not expand to the batch it claims to hold.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompressedBatchError {
    /// The stated length is beyond [`MAX_BATCH_BYTES`] or what LZ4 can reach from the block.
    #[error("compressed batch claims {claimed} bytes")]
    TooLarge {
        /// The stated length.
        claimed: usize,
    },
    /// The block expands to another length than the stated one.
    #[error("compressed batch expands to {actual} of {claimed} bytes")]
    Length {
        /// The stated length.
        claimed: usize,
        /// What the block expands to.
        actual: usize,
    },
    /// The block is not valid LZ4.
    #[error("compressed batch: {0}")]
    Lz4(#[source] lz4_flex::block::DecompressError),
}

/// The result of applying one log entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    /// The engine sequence number of the entry's first operation.
    pub seq: u64,
    /// Why the entry was applied as a no-op (on every replica alike), if it was.
    pub error: Option<String>,
    /// True if the entry was applied as a no-op because it completes a request already
    /// completed (an earlier attempt at the same request got there first).
    #[serde(default)]
    pub duplicate: bool,
}

/// Byte vectors as serde byte strings (compact in postcard, unlike a sequence of integers).
mod serde_bytes_compat {
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
        }
        d.deserialize_bytes(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn batches_that_compress_are_proposed_compressed_and_read_back_whole() {
        let mut raw = Vec::new();
        for i in 0..2000u32 {
            raw.extend_from_slice(b"cpu\x00\x00\x00\x01series");
            raw.extend_from_slice(&i.to_be_bytes());
        }
        let cmd = Command::write_batch(raw.clone());
        let Command::Lz4Batch { block, .. } = &cmd else { panic!("not compressed: {cmd:?}") };
        assert!(block.len() < raw.len() / 4, "{} of {}", block.len(), raw.len());
        assert_eq!(cmd.batch_bytes().unwrap().unwrap().as_ref(), &raw[..]);
        // Through the log's encoding too.
        let back: Command = postcard::from_bytes(&postcard::to_stdvec(&cmd).unwrap()).unwrap();
        assert_eq!(back.batch_bytes().unwrap().unwrap().as_ref(), &raw[..]);
    }

    #[test]
    fn short_or_incompressible_batches_stay_as_they_are() {
        assert_eq!(Command::write_batch(vec![7; 100]), Command::Batch(vec![7; 100]));
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        assert_eq!(Command::write_batch(noise.clone()), Command::Batch(noise));
    }

    #[test]
    fn a_block_claiming_more_than_it_can_hold_is_refused_before_allocating() {
        let cmd = Command::Lz4Batch { raw_len: u32::MAX, block: vec![0; 16] };
        assert!(cmd.batch_bytes().unwrap().is_err());
        let cmd = Command::Lz4Batch { raw_len: 100_000, block: vec![0; 16] };
        assert!(cmd.batch_bytes().unwrap().is_err());
    }

    proptest! {
        /// Whatever a peer sends as a compressed batch, decoding answers (an error or bytes of
        /// the stated length) and never panics.
        #[test]
        fn any_compressed_block_decodes_or_fails_cleanly(
            raw_len in 0u32..1_000_000,
            block in proptest::collection::vec(any::<u8>(), 0..512),
        ) {
            let cmd = Command::Lz4Batch { raw_len, block };
            if let Some(Ok(raw)) = cmd.batch_bytes() {
                prop_assert_eq!(raw.len(), raw_len as usize);
            }
        }
    }
}
