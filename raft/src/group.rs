//! Starting one Raft group on a node: its log, its replica (engine) and its Raft, registered
//! with the node's transport.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use openraft::{Config, Raft, SnapshotPolicy};

use crate::log::{LogOptions, LogStore};
use crate::sm::{Replica, ShardStateMachine};
use crate::transport::{Connections, GroupHandle, GroupNetwork, Groups};
use crate::types::NodeId;

/// Errors starting a group.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The Raft log failed to open.
    #[error(transparent)]
    Log(#[from] crate::error::LogError),
    /// The replica failed to open.
    #[error(transparent)]
    Replica(#[from] crate::error::ReplicaError),
    /// The Raft configuration is invalid.
    #[error("raft configuration: {0}")]
    Config(Box<openraft::ConfigError>),
    /// Openraft refused to start.
    #[error("raft: {0}")]
    Fatal(Box<openraft::error::Fatal<NodeId>>),
}

/// How every group of a node runs.
#[derive(Debug, Clone)]
pub struct GroupOptions {
    /// Openraft configuration (validated).
    pub raft: Arc<Config>,
    /// Engine options of every replica.
    pub engine: ebb_storage::Options,
    /// Raft log options.
    pub log: LogOptions,
}

impl GroupOptions {
    /// Options with openraft timing for `heartbeat` (elections after 5 to 10 heartbeats), a
    /// snapshot every `snapshot_every` entries, and `engine` options.
    pub fn new(
        heartbeat: Duration,
        snapshot_every: u64,
        engine: ebb_storage::Options,
    ) -> Result<GroupOptions, StartError> {
        let hb = heartbeat.as_millis().max(1) as u64;
        let config = Config {
            cluster_name: "ebbdb".into(),
            heartbeat_interval: hb,
            election_timeout_min: hb * 5,
            election_timeout_max: hb * 10,
            // Snapshot files stream in one call that is not bounded by this; it bounds the
            // install of the last chunk.
            install_snapshot_timeout: 60_000,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(snapshot_every),
            replication_lag_threshold: snapshot_every * 2,
            max_in_snapshot_log_to_keep: snapshot_every.min(1000),
            max_payload_entries: 64,
            ..Default::default()
        };
        let raft = Arc::new(config.validate().map_err(|e| StartError::Config(Box::new(e)))?);
        Ok(GroupOptions { raft, engine, log: LogOptions::default() })
    }
}

/// Opens the Raft log and the replica of a group under `dir` (`log/` and `shard/`), without
/// starting its Raft: the caller can put an [`crate::sm::Applier`] on the replica first.
pub async fn open_group(
    dir: &Path,
    opts: &GroupOptions,
) -> Result<(LogStore, Arc<Replica>), StartError> {
    let (log_dir, shard_dir) = (dir.join("log"), dir.join("shard"));
    let (log_opts, engine_opts) = (opts.log.clone(), opts.engine.clone());
    tokio::task::spawn_blocking(move || {
        let log = LogStore::open(log_dir, log_opts)?;
        let replica = Replica::open(shard_dir, engine_opts)?;
        Ok::<_, StartError>((log, replica))
    })
    .await
    .map_err(|e| {
        StartError::Replica(crate::error::ReplicaError::Io {
            path: dir.to_path_buf(),
            source: std::io::Error::other(e.to_string()),
        })
    })?
}

/// Starts the Raft of group `group` of node `node` over an opened log and replica, and
/// registers it in `groups` so the node's transport delivers its messages.
pub async fn run_group(
    node: NodeId,
    group: u64,
    log: LogStore,
    replica: Arc<Replica>,
    opts: &GroupOptions,
    conns: Arc<Connections>,
    groups: &Groups,
) -> Result<GroupHandle, StartError> {
    let network = GroupNetwork::new(group, conns);
    let sm = ShardStateMachine::new(replica.clone());
    let raft = Raft::new(node, opts.raft.clone(), network, log.clone(), sm)
        .await
        .map_err(|e| StartError::Fatal(Box::new(e)))?;
    let handle = GroupHandle { raft, replica, log };
    groups.insert(group, handle.clone());
    Ok(handle)
}

/// Opens group `group` of node `node` under `dir` and starts it ([`open_group`] then
/// [`run_group`]).
pub async fn start_group(
    node: NodeId,
    group: u64,
    dir: &Path,
    opts: &GroupOptions,
    conns: Arc<Connections>,
    groups: &Groups,
) -> Result<GroupHandle, StartError> {
    let (log, replica) = open_group(dir, opts).await?;
    run_group(node, group, log, replica, opts, conns, groups).await
}
