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
