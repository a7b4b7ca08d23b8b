//! Pruning: removing old sets, then every object no remaining set references.

use std::collections::HashSet;

use crate::error::{BackupError, Result};
use crate::lock::{Lock, LockKind};
use crate::store::BackupStore;

/// What a prune removed.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PruneReport {
    /// The sets removed, oldest first.
    pub sets_removed: Vec<String>,
    /// The objects removed.
    pub objects_removed: u64,
    /// Their bytes.
    pub bytes_freed: u64,
}

/// Keeps the newest `keep` sets and removes the others, then removes every object no kept set
/// references. Holds the destination's exclusive lock throughout, so it answers
/// [`BackupError::Busy`] while a backup runs (whose objects no manifest names yet). Refuses to
/// remove objects while a kept set's manifest cannot be read (its objects are unknown).
pub async fn prune(store: &BackupStore, keep: usize) -> Result<PruneReport> {
    let lock = store.lock(LockKind::Exclusive, &crate::lock::unique_holder("prune")).await?;
    let pruned = prune_locked(store, keep, &lock).await;
    store.unlock(&lock).await;
    pruned
}

async fn prune_locked(store: &BackupStore, keep: usize, lock: &Lock) -> Result<PruneReport> {
    let listed = store.list().await?;
    let drop_n = listed.len().saturating_sub(keep);
    let mut report = PruneReport::default();
    for l in &listed[..drop_n] {
        store.keep(lock).await?;
        store.remove_set(&l.id).await?;
        report.sets_removed.push(l.id.clone());
    }
    let (removed, bytes) = sweep(store, lock).await?;
    report.objects_removed = removed;
    report.bytes_freed = bytes;
    Ok(report)
}

/// Removes every object no set references, under `lock` (exclusive): the objects removed and
/// their bytes.
pub async fn sweep(store: &BackupStore, lock: &Lock) -> Result<(u64, u64)> {
    if lock.kind() != LockKind::Exclusive {
        return Err(BackupError::Busy("removing objects needs the exclusive lock".into()));
    }
    let mut referenced = HashSet::new();
    for l in store.list().await? {
        match l.set {
            Ok(set) => referenced.extend(set.objects().map(|o| o.hash.clone())),
            Err(e) => {
                return Err(BackupError::Manifest {
                    set: l.id,
                    object: "newest manifest".into(),
                    why: format!("unreadable, so no object is removed: {e}"),
                })
            }
        }
    }
    store.clear_incoming().await?;
    let (mut removed, mut bytes) = (0, 0);
    for (hash, size) in store.object_sizes().await? {
        if referenced.contains(&hash) {
            continue;
        }
        store.keep(lock).await?;
        store.remove_object(&hash).await?;
        removed += 1;
        bytes += size;
    }
    store.sync_pending().await?;
    Ok((removed, bytes))
}
