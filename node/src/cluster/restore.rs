//! Restoring a cluster's backup set into a new cluster.
//!
//! `ebb restore` (offline) builds the data directory of the new cluster's first node: each
//! shard's part goes where that node keeps the shard's engine, checked object by object, and
//! the metadata part is read for what the new cluster keeps of the old one (its settings,
//! shards and their hash spans, users, grants and tokens, and statements still running on
//! every shard), written as a plan (`restore-plan.json`). Everything goes to a temporary
//! directory renamed into place last, so a damaged set leaves nothing to start.
//!
//! The first `ebb server --cluster` on that directory (without `--join`) creates the new
//! cluster from the plan: each shard becomes a group whose only voter is this node, starting
//! after the last log entry its part holds (`ebb_raft::sm::seed_restored`), and the metadata
//! group records the shards with this node as their replica. Nodes that join then get replicas
//! by the usual placement, so the new cluster may have any number of nodes.

use std::path::{Path, PathBuf};

use ebb_backup::crypto::{KeyDir, ObjectKeys};
use ebb_backup::journal::JournalEntry;
use ebb_backup::transfer::{download_part, private_dir, sibling};
use ebb_backup::{BackupError, BackupSet, BackupStore, Progress, SetKind};
use ebb_storage::Engine;
use serde::{Deserialize, Serialize};

use super::view::{MetaView, Settings, ShardInfo, ACCESS, BACKUP_DEST, BACKUP_ORIGIN};
use crate::error::{NodeError, Result};

/// The plan's file in the restored data directory (removed once the cluster is created).
pub const PLAN_FILE: &str = "restore-plan.json";

/// What the new cluster keeps of the one backed up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RestorePlan {
    /// The set restored.
    pub set: String,
    /// The cluster's settings.
    pub settings: Settings,
    /// Its shards (the new cluster's first node holds each).
    pub shards: Vec<ShardInfo>,
    /// Users, grants, tokens, open statements and backup destinations, as the metadata group
    /// stored them.
    pub records: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Key prefix of a statement still running on every shard (see `view`).
const INTENT: &[u8] = b"meta/intent/";

fn source(e: impl std::error::Error + Send + Sync + 'static) -> BackupError {
    BackupError::Source(Box::new(e))
}

/// Restores cluster set `set` from `store` into the new directory `data_dir`.
pub async fn prepare(
    store: &BackupStore,
    set: &BackupSet,
    journal: &[JournalEntry],
    data_dir: &Path,
    progress: &Progress,
    keys: Option<(&ObjectKeys, &KeyDir)>,
) -> Result<RestorePlan> {
    let Some(meta) = &set.meta else {
        return Err(BackupError::Manifest {
            set: set.id.clone(),
            object: set.manifest_key().to_string(),
            why: "a cluster's set without its metadata part".into(),
        }
        .into());
    };
    let staging = sibling(data_dir, "restore-cluster");
    let _ = tokio::fs::remove_dir_all(&staging).await;
    let built = async {
        private_dir(&staging)?;
        let meta_dir = staging.join("meta-part");
        let object_keys = keys.map(|(k, _)| k);
        download_part(store, &set.id, meta, &meta_dir, progress, object_keys).await?;
        let (dir, id) = (meta_dir.clone(), set.id.clone());
        let mut plan = tokio::task::spawn_blocking(move || read_plan_from(&dir, id))
            .await
            .map_err(source)??;
        // The new cluster continues the one the set was taken of: it keeps its backup origin,
        // so it may go on backing up to this destination and its deletes reach these sets.
        let origin = match &set.origin {
            Some(o) => Some(o.clone()),
            None => store.origin().await?,
        };
        if let Some(o) = origin {
            plan.records.retain(|(k, _)| k.as_slice() != BACKUP_ORIGIN);
            plan.records.push(super::view::backup_origin_record(&o));
        }
        tokio::fs::remove_dir_all(&meta_dir)
            .await
            .map_err(|e| BackupError::Io { path: meta_dir.clone(), source: e })?;
        if let Some(s) = plan.shards.iter().find(|s| !set.parts.iter().any(|p| p.shard == s.id)) {
            return Err(BackupError::Manifest {
                set: set.id.clone(),
                object: set.manifest_key().to_string(),
                why: format!("the set's metadata names shard {}, which it has no part of", s.id),
            });
        }
        for part in &set.parts {
            if !plan.shards.iter().any(|s| s.id == part.shard) {
                return Err(BackupError::Manifest {
                    set: set.id.clone(),
                    object: set.manifest_key().to_string(),
                    why: format!("shard {} is not in the set's metadata", part.shard),
                });
            }
            let group = staging.join(ebb_raft::sm::group_dir_name(part.shard));
            let engine = ebb_raft::sm::restored_engine_dir(&group);
            if let Some(parent) = engine.parent() {
                private_dir(parent)?;
            }
            download_part(store, &set.id, part, &engine, progress, object_keys).await?;
            if !journal.is_empty() {
                let (dir, entries) = (engine.clone(), journal.to_vec());
                tokio::task::spawn_blocking(move || {
                    crate::backup::purge::apply_journal(&dir, &entries, SetKind::Cluster).map(drop)
                })
                .await
                .map_err(source)??;
            }
        }
        // The new cluster's first node keeps the keys; nodes that join get them from it.
        if let Some((_, from)) = keys {
            crate::backup::restore::keep_keys(from, &staging.join("backup"))?;
        }
        let body = serde_json::to_vec_pretty(&plan).map_err(source)?;
        let plan_path = staging.join(PLAN_FILE);
        ebb_raft::sm::snapshot::write_atomic(&plan_path, &body).map_err(source)?;
        std::fs::rename(&staging, data_dir)
            .map_err(|e| BackupError::Io { path: data_dir.to_path_buf(), source: e })?;
        if let Some(parent) = data_dir.parent() {
            std::fs::File::open(parent)
                .and_then(|f| f.sync_all())
                .map_err(|e| BackupError::Io { path: parent.to_path_buf(), source: e })?;
        }
        Ok::<_, BackupError>(plan)
    };
    match built.await {
        Ok(plan) => Ok(plan),
        Err(e) => {
            let _ = tokio::fs::remove_dir_all(&staging).await;
            Err(e.into())
        }
    }
}

/// The plan the metadata engine in `dir` (a checkpoint of the metadata group's replica) gives.
fn read_plan_from(dir: &Path, set: String) -> std::result::Result<RestorePlan, BackupError> {
    let opts = ebb_storage::Options { wal: false, external_log: true, ..Default::default() };
    let engine = Engine::open(dir, opts).map_err(source)?;
    let view = MetaView::load(&engine).map_err(|e| BackupError::Source(e.to_string().into()))?;
    let settings = view
        .settings
        .ok_or_else(|| BackupError::Source("the metadata part holds no cluster settings".into()))?;
    let mut records = Vec::new();
    let lo: &[u8] = b"meta/";
    let hi: &[u8] = b"meta0";
    for item in engine.scan(lo..hi, None).map_err(source)? {
        let (k, v) = item.map_err(source)?;
        // The destinations too, so deletes issued on the new cluster reach the sets there.
        if k.starts_with(ACCESS)
            || k.starts_with(INTENT)
            || k.starts_with(BACKUP_DEST)
            || k == BACKUP_ORIGIN
        {
            records.push((k.to_vec(), v.to_vec()));
        }
    }
    engine.close().map_err(source)?;
    Ok(RestorePlan { set, settings, shards: view.shards.into_values().collect(), records })
}

/// The plan in data directory `dir`, if it is a restored cluster's not yet created.
pub fn read_plan(dir: &Path) -> Result<Option<RestorePlan>> {
    let path = dir.join(PLAN_FILE);
    match std::fs::read(&path) {
        Ok(b) => serde_json::from_slice(&b).map(Some).map_err(|e| {
            NodeError::Cluster(format!("{}: not a restore plan: {e}", path.display()))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Makes each restored shard in `dir` a group of one voter, node `me` at `addr` (a shard
/// already seeded, by a start that stopped before the cluster was created, is left as it is).
pub fn seed_shards(
    dir: &Path,
    plan: &RestorePlan,
    opts: &ebb_storage::Options,
    me: u64,
    addr: &str,
) -> Result<()> {
    for s in &plan.shards {
        let group: PathBuf = dir.join(ebb_raft::sm::group_dir_name(s.id));
        if !group.exists() {
            return Err(NodeError::Cluster(format!(
                "{}: shard {} of the restored set is missing; restore the set again",
                group.display(),
                s.id
            )));
        }
        if group.join("log").exists() {
            continue;
        }
        let last = ebb_raft::sm::seed_restored(&group, opts, me, addr)
            .map_err(|e| NodeError::Cluster(format!("restoring shard {}: {e}", s.id)))?;
        tracing::info!(shard = s.id, index = last.index, "restored a shard from set {}", plan.set);
    }
    Ok(())
}
