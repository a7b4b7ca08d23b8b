//! `ebb audit verify` over backup sets: each part of each set at each destination is
//! downloaded (every object checked against its hash), opened as the engine it is a copy of,
//! and scanned as a replica is ([`crate::audit::audit_database`]): every place it stores
//! entries read for values the request covers, every byte of every file accounted for.
//!
//! The scan holds the destination's shared lock, so no purge removes an object it reads; it
//! downloads every set, which costs what a restore of each costs.

use std::path::Path;

use ebb_backup::crypto::KeyDir;
use ebb_backup::journal::JournalEntry;
use ebb_backup::transfer::download_part;
use ebb_backup::{BackupError, BackupSet, BackupStore, Destination, LockKind, Progress, Throttle};

use crate::audit::ReplicaReport;

/// The reports of every part of every set at `uri` for request `id`, working in `work`.
/// `waiting` is the request's journal entry if it has not reached the destination's journal
/// yet. A set the request has not reached yet (its entry in the journal, no purge has applied
/// it) fails: it still holds what the request covers.
pub async fn audit_destination(
    uri: &str,
    id: u64,
    waiting: Option<&JournalEntry>,
    work: &Path,
    keys: Option<&KeyDir>,
) -> Vec<ReplicaReport> {
    let failed = |why: String| {
        vec![ReplicaReport {
            error: Some(format!("backup destination {uri}: {why}")),
            copy: Some("backup".into()),
            ..ReplicaReport::new(0, 0)
        }]
    };
    let store = match open(uri).await {
        Ok(s) => s,
        Err(e) => return failed(e.to_string()),
    };
    let holder = ebb_backup::lock::unique_holder("audit");
    let lock = match store.lock(LockKind::Shared, &holder).await {
        Ok(l) => l,
        Err(e) => return failed(e.to_string()),
    };
    let mut out = Vec::new();
    let journal = match store.journal().await {
        Ok(j) => j,
        Err(e) => {
            store.unlock(&lock).await;
            return failed(e.to_string());
        }
    };
    let entry = journal.into_iter().find(|e| e.id == id).or_else(|| waiting.cloned());
    match store.list().await {
        Ok(sets) => {
            for l in sets {
                match l.set {
                    Ok(set) if entry.as_ref().is_some_and(|e| e.missing_from(&set)) => {
                        out.extend(set.parts.iter().map(|p| ReplicaReport {
                            error: Some(format!(
                                "request {id} has not reached this set yet: it waits in the \
                                 deletion journal until a purge applies it"
                            )),
                            copy: Some(format!("backup {}", set.id)),
                            ..ReplicaReport::new(p.shard, 0)
                        }))
                    }
                    Ok(set) => out.extend(audit_set(&store, &set, id, work, keys).await),
                    Err(e) => out.push(ReplicaReport {
                        error: Some(e.to_string()),
                        copy: Some(format!("backup {}", l.id)),
                        ..ReplicaReport::new(0, 0)
                    }),
                }
                if let Err(e) = store.keep(&lock).await {
                    out.extend(failed(e.to_string()));
                    break;
                }
            }
        }
        Err(e) => out.extend(failed(e.to_string())),
    }
    store.unlock(&lock).await;
    out
}

async fn open(uri: &str) -> Result<BackupStore, BackupError> {
    BackupStore::open(&Destination::parse(uri)?, Throttle::none()).await
}

/// One report per shard part of `set`.
async fn audit_set(
    store: &BackupStore,
    set: &BackupSet,
    id: u64,
    work: &Path,
    keys: Option<&KeyDir>,
) -> Vec<ReplicaReport> {
    let mut out = Vec::new();
    for part in &set.parts {
        let dir = work.join(format!("{}-{}", set.id, part.shard));
        let _ = tokio::fs::remove_dir_all(&dir).await;
        let scanned = async {
            ebb_backup::transfer::private_dir(work)?;
            let object_keys = super::purge::object_keys(set, keys)?;
            download_part(store, &set.id, part, &dir, &Progress::default(), object_keys.as_ref())
                .await?;
            let (d, kind, shard) = (dir.clone(), set.kind, part.shard);
            tokio::task::spawn_blocking(move || {
                let db = ebb_query::Database::open(&d, super::purge::part_options(kind))
                    .map_err(|e| BackupError::Source(Box::new(e)))?;
                Ok::<_, BackupError>(crate::audit::audit_database(&db, id, shard, 0))
            })
            .await
            .map_err(|e| BackupError::Source(Box::new(e)))?
        };
        let mut report = match scanned.await {
            Ok(r) => r,
            Err(e) => {
                ReplicaReport { error: Some(e.to_string()), ..ReplicaReport::new(part.shard, 0) }
            }
        };
        report.copy = Some(format!("backup {}", set.id));
        out.push(report);
        let _ = tokio::fs::remove_dir_all(&dir).await;
    }
    out
}
