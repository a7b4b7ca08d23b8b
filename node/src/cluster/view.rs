//! The cluster metadata: nodes, shards, settings and users, as the metadata group stores them
//! (one engine key per record, JSON values) and as every node holds them in memory.

use std::collections::BTreeMap;
use std::sync::Arc;

use ebb_query::access::{AccessOp, AccessState};
use ebb_query::sql::shard::Intent;

use ebb_storage::{BatchOp, Engine, WriteBatch};
use serde::{Deserialize, Serialize};

use super::hashspace::{MapError, ShardMap, Span};

/// Key of the settings record.
const SETTINGS: &[u8] = b"meta/settings";
/// Key of the next node id.
const NEXT_NODE: &[u8] = b"meta/next-node";
/// Prefix of node records (`meta/node/` + id big-endian).
const NODE: &[u8] = b"meta/node/";
/// Prefix of shard records (`meta/shard/` + id big-endian).
const SHARD: &[u8] = b"meta/shard/";
/// Prefix of the access records (users, grants, tokens; see `ebb_query::access`).
pub const ACCESS: &[u8] = b"meta/access/";
/// Prefix of the intents of statements run on every shard (`meta/intent/` + request id
/// big-endian; see `ebb_query::sql::shard::Intent`).
const INTENT: &[u8] = b"meta/intent/";
/// Prefix of the destinations the cluster's backups went to (`meta/backup/dest/` + URI).
pub const BACKUP_DEST: &[u8] = b"meta/backup/dest/";
/// The backup origin of a restored cluster (its set's; see
/// `crate::backup::registry::Registry::origin`).
pub const BACKUP_ORIGIN: &[u8] = b"meta/backup/origin";
/// Prefix of the delete requests completed on every shard on their way to every backup
/// destination's deletion journal (`meta/backup/journal/` + request id big-endian).
const BACKUP_JOURNAL: &[u8] = b"meta/backup/journal/";

/// The cluster's active version (see [`super::version`]); absent: 1, a cluster created by
/// release 0.1.0 and not finalized since.
const CLUSTER_VERSION: &[u8] = b"meta/cluster-version";
/// When an upgrade finalizes by itself ([`UpgradePolicy`]).
const UPGRADE: &[u8] = b"meta/upgrade";
/// Prefix of the join tokens (`meta/join-token/` + id; see [`super::join_token`]).
const JOIN_TOKEN: &[u8] = b"meta/join-token/";

/// The record of the cluster's active version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterVersionRecord {
    /// The active cluster version.
    pub active: super::version::ClusterVersion,
    /// When it became active (the metadata leader's clock).
    pub since_ms: u64,
    /// Who made it active: `created` (a new cluster), `auto`, or the admin who finalized.
    pub by: String,
}

/// When an upgrade finalizes by itself: once every node has supported a newer cluster version
/// for `auto_finalize_after_ms` (`None`: only `ALTER CLUSTER FINALIZE UPGRADE` finalizes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpgradePolicy {
    /// The delay, in milliseconds.
    pub auto_finalize_after_ms: Option<u64>,
}

impl Default for UpgradePolicy {
    /// A day: long enough to roll an upgrade back, short enough not to be forgotten.
    fn default() -> Self {
        UpgradePolicy { auto_finalize_after_ms: Some(24 * 3600 * 1000) }
    }
}

/// Cluster-wide settings, fixed when the cluster is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    /// Shards (Raft groups) every table's series are hashed over.
    pub shards: u32,
    /// Replicas per shard (fewer while the cluster has fewer nodes).
    pub replication: u32,
}

/// Where a node stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeState {
    /// Holds and receives shard replicas.
    Active,
    /// Being drained: its replicas move elsewhere.
    Draining,
    /// Left the cluster.
    Removed,
}

/// A node of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Node id, assigned by the cluster.
    pub id: u64,
    /// gRPC address (Raft and cluster services).
    pub grpc_addr: String,
    /// HTTP address.
    pub http_addr: String,
    /// PostgreSQL address.
    pub pg_addr: String,
    /// Its state.
    pub state: NodeState,
}

/// A shard and where its replicas should be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardInfo {
    /// Shard id (its Raft group id; the metadata group is 0).
    pub id: u64,
    /// Nodes that hold a replica (the group's voters).
    pub replicas: Vec<u64>,
    /// While the shard moves: the voters it is moving to. Nodes in either list hold a replica.
    #[serde(default)]
    pub target: Option<Vec<u64>>,
    /// The series hashes it holds, once it is a half of a split shard (`None`: all of root
    /// `id - 1`, as every shard holds when the cluster is created).
    #[serde(default)]
    pub span: Option<Span>,
    /// While the shard is being split off a parent: the split. Such a shard is neither routed
    /// to nor queried until the split completes (statements that delete run on it too).
    #[serde(default)]
    pub split_from: Option<SplitFrom>,
    /// The shard may still hold rows of series outside its span (it split, and has not
    /// dropped the other half yet).
    #[serde(default)]
    pub untrimmed: bool,
}

/// A split in progress, as the new shard records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitFrom {
    /// The shard being split.
    pub parent: u64,
    /// The half the parent keeps.
    pub keep: Span,
    /// Statements running on every shard that were recorded before the split was, so do not
    /// run on the new shard: the parent forks only once they are done.
    pub before: Vec<u64>,
}

impl ShardInfo {
    /// A shard holding all of its root, on `replicas`.
    pub fn root(id: u64, replicas: Vec<u64>) -> ShardInfo {
        ShardInfo { id, replicas, target: None, span: None, split_from: None, untrimmed: false }
    }

    /// The series hashes it holds.
    pub fn span(&self) -> Span {
        self.span.unwrap_or_else(|| {
            Span::root(u32::try_from(self.id.saturating_sub(1)).unwrap_or(u32::MAX))
        })
    }

    /// True if the shard is being split off a parent (and is not routed to yet).
    pub fn splitting(&self) -> bool {
        self.split_from.is_some()
    }

    /// Every node that holds (or is about to hold) a replica.
    pub fn holders(&self) -> Vec<u64> {
        let mut all = self.replicas.clone();
        all.extend(self.target.iter().flatten().filter(|n| !self.replicas.contains(n)));
        all
    }

    /// True if `node` holds (or is about to hold) a replica.
    pub fn involves(&self, node: u64) -> bool {
        self.replicas.contains(&node) || self.target.as_ref().is_some_and(|t| t.contains(&node))
    }
}

/// The metadata, in memory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetaView {
    /// Settings, once the cluster is created.
    pub settings: Option<Settings>,
    /// Nodes by id.
    pub nodes: BTreeMap<u64, NodeInfo>,
    /// Shards by id.
    pub shards: BTreeMap<u64, ShardInfo>,
    /// The id the next joining node gets.
    pub next_node_id: u64,
    /// Users, grants and tokens.
    pub access: Arc<AccessState>,
    /// Statements run on every shard that have not completed everywhere, by request id.
    pub intents: BTreeMap<u64, Intent>,
    /// The destinations the cluster's backups went to (URIs, which hold no secrets).
    pub backup_destinations: std::collections::BTreeSet<String>,
    /// The backup origin a restore carried over; `None` for a cluster created anew (its
    /// cluster id is its origin).
    pub backup_origin: Option<String>,
    /// Delete requests completed on every shard that some destination's journal may lack,
    /// by request id.
    pub backup_journal: BTreeMap<u64, JournaledRequest>,
    /// The cluster's active version, if ever recorded (see [`MetaView::active_version`]).
    pub cluster_version: Option<ClusterVersionRecord>,
    /// When an upgrade finalizes by itself, if ever set (else the default).
    pub upgrade: Option<UpgradePolicy>,
    /// The join tokens, by id.
    pub join_tokens: BTreeMap<String, super::join_token::JoinToken>,
}

/// A delete request completed on every shard, waiting to reach every backup destination's
/// deletion journal (see `cluster::backup::MetaRegistry`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournaledRequest {
    /// The request, as its intent recorded it.
    pub intent: Intent,
    /// When it completed on every shard (the closing node's clock).
    pub completed_ms: u64,
}

/// Errors decoding metadata records.
#[derive(Debug, thiserror::Error)]
#[error("metadata record {key}: {why}")]
pub struct ViewError {
    key: String,
    why: String,
}

fn id_key(prefix: &[u8], id: u64) -> Vec<u8> {
    let mut k = prefix.to_vec();
    k.extend_from_slice(&id.to_be_bytes());
    k
}

impl MetaView {
    /// Which shard holds which series hashes; `None` before the cluster is created.
    pub fn shard_map(&self) -> Option<Result<ShardMap, MapError>> {
        let roots = self.settings?.shards;
        Some(ShardMap::new(roots, self.routed().map(|s| (s.id, s.span()))))
    }

    /// The shards writes are routed to and queries read: all but those being split off.
    pub fn routed(&self) -> impl Iterator<Item = &ShardInfo> + '_ {
        self.shards.values().filter(|s| !s.splitting())
    }

    /// True if shard `id` is being split, or being split off another.
    pub fn in_split(&self, id: u64) -> bool {
        self.shards.values().any(|s| {
            s.split_from.as_ref().is_some_and(|f| f.parent == id) || (s.id == id && s.splitting())
        })
    }

    /// The view stored in `engine`.
    pub fn load(engine: &Engine) -> Result<MetaView, ViewError> {
        let mut v = MetaView { next_node_id: 1, ..Default::default() };
        let lo: &[u8] = b"meta/";
        let hi: &[u8] = b"meta0";
        let scan = engine
            .scan(lo..hi, None)
            .map_err(|e| ViewError { key: "meta/".into(), why: e.to_string() })?;
        for item in scan {
            let (k, val) =
                item.map_err(|e| ViewError { key: "meta/".into(), why: e.to_string() })?;
            v.put(&k, &val)?;
        }
        Ok(v)
    }

    /// Installs what an applied batch changed.
    pub fn apply(&mut self, batch: &WriteBatch) -> Result<(), ViewError> {
        for op in batch.ops() {
            match op {
                BatchOp::Put { key, value } => self.put(key, value)?,
                BatchOp::Delete { key } if key.starts_with(JOIN_TOKEN) => {
                    let id = String::from_utf8_lossy(&key[JOIN_TOKEN.len()..]);
                    self.join_tokens.remove(id.as_ref());
                }
                BatchOp::Delete { key } if key.starts_with(INTENT) => {
                    if let Some(id) = key[INTENT.len()..].try_into().ok().map(u64::from_be_bytes) {
                        self.intents.remove(&id);
                    }
                }
                BatchOp::Delete { key } if key.starts_with(BACKUP_JOURNAL) => {
                    let id = key[BACKUP_JOURNAL.len()..].try_into().ok().map(u64::from_be_bytes);
                    if let Some(id) = id {
                        self.backup_journal.remove(&id);
                    }
                }
                BatchOp::Delete { key } if key.starts_with(BACKUP_DEST) => {
                    let uri = String::from_utf8_lossy(&key[BACKUP_DEST.len()..]);
                    self.backup_destinations.remove(uri.as_ref());
                }
                BatchOp::Delete { key } if key.starts_with(ACCESS) => {
                    self.access_op(AccessOp::Delete { key: key[ACCESS.len()..].to_vec() })?
                }
                BatchOp::DeleteRange { lo, hi } if lo.starts_with(ACCESS) => {
                    let rel = |k: &[u8]| k.get(ACCESS.len()..).unwrap_or_default().to_vec();
                    self.access_op(AccessOp::DeleteRange { lo: rel(lo), hi: rel(hi) })?
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn access_op(&mut self, op: AccessOp) -> Result<(), ViewError> {
        Arc::make_mut(&mut self.access)
            .apply(&op)
            .map_err(|e| ViewError { key: "meta/access/".into(), why: e.to_string() })
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), ViewError> {
        let err = |why: String| ViewError { key: String::from_utf8_lossy(key).into_owned(), why };
        let json = |v: &[u8]| {
            serde_json::from_slice::<serde_json::Value>(v).map_err(|e| err(e.to_string()))
        };
        if key == SETTINGS {
            self.settings = Some(serde_json::from_slice(value).map_err(|e| err(e.to_string()))?);
        } else if key == NEXT_NODE {
            self.next_node_id = json(value)?.as_u64().ok_or_else(|| err("not a number".into()))?;
        } else if key.starts_with(NODE) {
            let n: NodeInfo = serde_json::from_slice(value).map_err(|e| err(e.to_string()))?;
            self.nodes.insert(n.id, n);
        } else if key.starts_with(SHARD) {
            let s: ShardInfo = serde_json::from_slice(value).map_err(|e| err(e.to_string()))?;
            self.shards.insert(s.id, s);
        } else if key.starts_with(INTENT) {
            let i: Intent = serde_json::from_slice(value).map_err(|e| err(e.to_string()))?;
            self.intents.insert(i.id, i);
        } else if key == BACKUP_ORIGIN {
            let o: String = serde_json::from_slice(value).map_err(|e| err(e.to_string()))?;
            self.backup_origin = Some(o);
        } else if key.starts_with(BACKUP_DEST) {
            let uri =
                std::str::from_utf8(&key[BACKUP_DEST.len()..]).map_err(|e| err(e.to_string()))?;
            self.backup_destinations.insert(uri.to_string());
        } else if key.starts_with(BACKUP_JOURNAL) {
            let r: JournaledRequest =
                serde_json::from_slice(value).map_err(|e| err(e.to_string()))?;
            self.backup_journal.insert(r.intent.id, r);
        } else if key == CLUSTER_VERSION {
            let v: ClusterVersionRecord =
                serde_json::from_slice(value).map_err(|e| err(e.to_string()))?;
            self.cluster_version = Some(v);
        } else if key.starts_with(JOIN_TOKEN) {
            let t: super::join_token::JoinToken =
                serde_json::from_slice(value).map_err(|e| err(e.to_string()))?;
            self.join_tokens.insert(t.id.clone(), t);
        } else if key == UPGRADE {
            self.upgrade = Some(serde_json::from_slice(value).map_err(|e| err(e.to_string()))?);
        } else if key.starts_with(ACCESS) {
            let op = AccessOp::Put { key: key[ACCESS.len()..].to_vec(), value: value.to_vec() };
            self.access_op(op)?;
        }
        Ok(())
    }

    /// The cluster's active version: 1 until one is recorded.
    pub fn active_version(&self) -> super::version::ClusterVersion {
        self.cluster_version.as_ref().map_or(1, |v| v.active)
    }

    /// Active nodes, by id.
    pub fn active(&self) -> impl Iterator<Item = &NodeInfo> + '_ {
        self.nodes.values().filter(|n| n.state == NodeState::Active)
    }

    /// The node with gRPC address `addr` that has not left, if any.
    pub fn node_at(&self, addr: &str) -> Option<&NodeInfo> {
        self.nodes.values().find(|n| n.grpc_addr == addr && n.state != NodeState::Removed)
    }
}

/// Adds the record of `settings` to `batch`.
pub fn put_settings(batch: &mut WriteBatch, settings: &Settings) {
    batch.put(SETTINGS, serde_json::to_vec(settings).unwrap_or_default());
}

/// Adds the record of the cluster's active version to `batch`.
pub fn put_cluster_version(batch: &mut WriteBatch, v: &ClusterVersionRecord) {
    batch.put(CLUSTER_VERSION, serde_json::to_vec(v).unwrap_or_default());
}

/// Adds the record of join token `t` to `batch`.
pub fn put_join_token(batch: &mut WriteBatch, t: &super::join_token::JoinToken) {
    let key = [JOIN_TOKEN, t.id.as_bytes()].concat();
    batch.put(key, serde_json::to_vec(t).unwrap_or_default());
}

/// Adds the removal of join token `id` to `batch`.
pub fn drop_join_token(batch: &mut WriteBatch, id: &str) {
    batch.delete([JOIN_TOKEN, id.as_bytes()].concat());
}

/// Adds the record of when an upgrade finalizes by itself to `batch`.
pub fn put_upgrade_policy(batch: &mut WriteBatch, p: &UpgradePolicy) {
    batch.put(UPGRADE, serde_json::to_vec(p).unwrap_or_default());
}

/// Adds the record of `node` (and the next node id after it) to `batch`.
pub fn put_node(batch: &mut WriteBatch, node: &NodeInfo, next_node_id: u64) {
    batch.put(id_key(NODE, node.id), serde_json::to_vec(node).unwrap_or_default());
    batch.put(NEXT_NODE, next_node_id.to_string().into_bytes());
}

/// Adds access record operations to `batch`.
pub fn put_access(batch: &mut WriteBatch, ops: &[AccessOp]) -> Result<(), ViewError> {
    let abs = |k: &[u8]| [ACCESS, k].concat();
    for op in ops {
        match op {
            AccessOp::Put { key, value } => batch.put(abs(key), value.clone()),
            AccessOp::Delete { key } => batch.delete(abs(key)),
            AccessOp::DeleteRange { lo, hi } => batch.delete_range(abs(lo), abs(hi)),
            other => {
                return Err(ViewError { key: "meta/access/".into(), why: format!("{other:?}") })
            }
        };
    }
    Ok(())
}

/// Adds the record of `intent` to `batch`.
pub fn put_intent(batch: &mut WriteBatch, intent: &Intent) {
    batch.put(id_key(INTENT, intent.id), serde_json::to_vec(intent).unwrap_or_default());
}

/// Adds the removal of intent `id` (done on every shard) to `batch`.
pub fn close_intent(batch: &mut WriteBatch, id: u64) {
    batch.delete(id_key(INTENT, id));
}

/// Adds the record of backup destination `uri` to `batch`.
pub fn put_backup_destination(batch: &mut WriteBatch, uri: &str) {
    batch.put([BACKUP_DEST, uri.as_bytes()].concat(), b"{}".to_vec());
}

/// The record of a restored cluster's backup `origin` (key, value).
pub fn backup_origin_record(origin: &str) -> (Vec<u8>, Vec<u8>) {
    (BACKUP_ORIGIN.to_vec(), serde_json::to_vec(origin).unwrap_or_default())
}

/// Adds `request` to the requests on their way to every backup destination.
pub fn put_journaled(batch: &mut WriteBatch, request: &JournaledRequest) {
    let key = id_key(BACKUP_JOURNAL, request.intent.id);
    batch.put(key, serde_json::to_vec(request).unwrap_or_default());
}

/// Adds the removal of request `id` (every destination's journal has it) to `batch`.
pub fn remove_journaled(batch: &mut WriteBatch, id: u64) {
    batch.delete(id_key(BACKUP_JOURNAL, id));
}

/// True if every operation of `batch` is on an access record, an intent or a backup record
/// (what a node may ask the metadata leader to write for it).
pub fn forwardable(batch: &WriteBatch) -> bool {
    let ours = |k: &[u8]| {
        k.starts_with(ACCESS)
            || k.starts_with(INTENT)
            || k.starts_with(BACKUP_DEST)
            || k.starts_with(BACKUP_JOURNAL)
            || k.starts_with(JOIN_TOKEN)
            || k == BACKUP_ORIGIN
    };
    batch.ops().iter().all(|op| match op {
        BatchOp::Put { key, .. } | BatchOp::Delete { key } => ours(key),
        BatchOp::DeleteRange { lo, hi } => lo.starts_with(ACCESS) && hi.starts_with(ACCESS),
        _ => false,
    })
}

/// Adds the record of `shard` to `batch`.
pub fn put_shard(batch: &mut WriteBatch, shard: &ShardInfo) {
    batch.put(id_key(SHARD, shard.id), serde_json::to_vec(shard).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_through_batches() {
        let mut b = WriteBatch::new();
        put_settings(&mut b, &Settings { shards: 4, replication: 3 });
        let n = NodeInfo {
            id: 3,
            grpc_addr: "127.0.0.1:1".into(),
            http_addr: "127.0.0.1:2".into(),
            pg_addr: "127.0.0.1:3".into(),
            state: NodeState::Active,
        };
        put_node(&mut b, &n, 4);
        put_shard(&mut b, &ShardInfo::root(2, vec![3]));
        let mut v = MetaView::default();
        v.apply(&b).unwrap();
        assert_eq!(v.settings, Some(Settings { shards: 4, replication: 3 }));
        assert_eq!(v.nodes[&3], n);
        assert_eq!(v.next_node_id, 4);
        assert_eq!(v.shards[&2].replicas, vec![3]);
        assert_eq!(v.node_at("127.0.0.1:1").map(|n| n.id), Some(3));
        let mut bad = WriteBatch::new();
        bad.put(id_key(NODE, 1), "{");
        assert!(v.apply(&bad).is_err());
    }

    #[test]
    fn backup_records_round_trip_and_are_forwardable() {
        let intent = Intent {
            id: 7,
            database: "public".into(),
            sql: "ERASE WHERE user = 'a'".into(),
            op: None,
            kind: "erase".into(),
            deadline_ms: Some(9),
            issued_by: "admin".into(),
            issued_at_ms: 1,
        };
        let mut b = WriteBatch::new();
        put_backup_destination(&mut b, "s3://b/p?region=x");
        put_journaled(&mut b, &JournaledRequest { intent: intent.clone(), completed_ms: 5 });
        assert!(forwardable(&b));
        let mut v = MetaView::default();
        v.apply(&b).unwrap();
        assert!(v.backup_destinations.contains("s3://b/p?region=x"));
        assert_eq!(v.backup_journal[&7].intent, intent);
        assert_eq!(v.backup_journal[&7].completed_ms, 5);
        assert_eq!(v.backup_origin, None);
        let (k, val) = backup_origin_record("0123abcd");
        let mut o = WriteBatch::new();
        o.put(k, val);
        assert!(forwardable(&o), "any node may record a cluster's first origin");
        v.apply(&o).unwrap();
        assert_eq!(v.backup_origin.as_deref(), Some("0123abcd"));
        let mut gone = WriteBatch::new();
        remove_journaled(&mut gone, 7);
        v.apply(&gone).unwrap();
        assert!(v.backup_journal.is_empty());
        assert!(intent.deletes_data(), "an erase reaches backup sets");
    }
}
