//! Pruning: removing old sets, then every object no remaining set references.

use std::collections::HashSet;
use std::time::SystemTime;

use crate::error::{BackupError, Result};
use crate::store::BackupStore;

/// How far the store's clock (which dates objects) may be behind the one that dates leases.
const CLOCK_SKEW_MS: u64 = 3600 * 1000;

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
/// references and that was written before `busy_since` and before the oldest lease (a backup
/// still uploading, whose objects no manifest names yet). Refuses to remove objects while a
/// kept set's manifest cannot be read (its objects are unknown).
pub async fn prune(
    store: &BackupStore,
    keep: usize,
    busy_since: Option<SystemTime>,
) -> Result<PruneReport> {
    let now = SystemTime::now();
    let now_ms = now.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_millis() as u64;
    let leased = store
        .oldest_lease(now_ms)
        .await?
        // The store's clock may be behind the server's.
        .map(|ms| {
            SystemTime::UNIX_EPOCH
                + std::time::Duration::from_millis(ms.saturating_sub(CLOCK_SKEW_MS))
        });
    let busy_since = match (busy_since, leased) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let listed = store.list().await?;
    let drop_n = listed.len().saturating_sub(keep);
    let mut report = PruneReport::default();
    for l in &listed[..drop_n] {
        store.remove_set(&l.id).await?;
        report.sets_removed.push(l.id.clone());
    }
    let (removed, bytes) = sweep(store, busy_since).await?;
    report.objects_removed = removed;
    report.bytes_freed = bytes;
    Ok(report)
}

/// Removes every object no set references and that was written before `busy_since`: the
/// objects removed and their bytes.
pub async fn sweep(store: &BackupStore, busy_since: Option<SystemTime>) -> Result<(u64, u64)> {
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
    let (mut removed, mut bytes) = (0, 0);
    for (hash, size, written) in store.objects().await? {
        if referenced.contains(&hash) || busy_since.is_some_and(|b| written >= b) {
            continue;
        }
        store.remove_object(&hash).await?;
        removed += 1;
        bytes += size;
    }
    Ok((removed, bytes))
}
