//! `ebb restore`: builds a data directory from a backup set, offline.
//!
//! Every object is checked against its hash as it arrives; the files go to a temporary
//! directory beside the target. Then every delete request of the destination's journal the set
//! may lack is applied there (see `purge`), so a set restored before a purge reached it still
//! serves nothing deleted after it was taken. Only then is the directory renamed into place,
//! so a damaged or partial set, or an unreadable journal entry, leaves nothing a server could
//! start on.

use std::path::Path;

use ebb_backup::crypto::{KeyDir, ObjectKeys};
use ebb_backup::journal::JournalEntry;
use ebb_backup::transfer::{download_part, sibling};
use ebb_backup::{BackupError, BackupSet, BackupStore, Destination, Progress, SetKind, Throttle};

use crate::error::{NodeError, Result};

/// What a restore did.
#[derive(Debug)]
pub struct Restored {
    /// The set restored.
    pub set: BackupSet,
    /// The journal's delete requests applied to it (issued after it was taken, not yet
    /// purged from it).
    pub journal_applied: Vec<u64>,
}

/// Restores set `id` (the newest if `None`) from `from` into the new data directory `data_dir`;
/// `progress` counts as it goes.
pub async fn restore(
    from: &str,
    id: Option<&str>,
    data_dir: &Path,
    rate: Option<u64>,
    keys: Option<&Path>,
    progress: &Progress,
) -> Result<Restored> {
    let dest = Destination::parse(from)?;
    let store = BackupStore::open(&dest, Throttle::new(rate)).await?;
    let set = match id {
        Some(id) => store.set(id).await?,
        None => store.newest().await?,
    };
    if data_dir.exists() && std::fs::read_dir(data_dir)?.next().is_some() {
        return Err(BackupError::TargetExists(data_dir.to_path_buf()).into());
    }
    if data_dir.exists() {
        std::fs::remove_dir(data_dir)?;
    }
    let part = match set.kind {
        SetKind::Node => match set.parts.as_slice() {
            [part] => part,
            _ => {
                return Err(NodeError::Backup(Box::new(BackupError::Manifest {
                    set: set.id.clone(),
                    object: set.manifest_key().to_string(),
                    why: format!("a single node's set with {} parts", set.parts.len()),
                })))
            }
        },
        SetKind::Cluster => {
            let entries = missing(&store, &set).await?;
            let key_dir = keys.map(KeyDir::new);
            let object_keys = open_keys(&set, key_dir.as_ref())?;
            let keys = object_keys.as_ref().zip(key_dir.as_ref());
            crate::cluster::restore::prepare(&store, &set, &entries, data_dir, progress, keys)
                .await?;
            return Ok(Restored { set, journal_applied: entries.iter().map(|e| e.id).collect() });
        }
        kind => {
            return Err(NodeError::Config(format!(
                "set {} is a {} backup, which this build cannot restore",
                set.id,
                kind.as_str()
            )))
        }
    };
    let entries = missing(&store, &set).await?;
    let origin = match &set.origin {
        Some(o) => Some(o.clone()),
        None => store.origin().await?,
    };
    let key_dir = keys.map(KeyDir::new);
    let object_keys = open_keys(&set, key_dir.as_ref())?;
    let staging = sibling(data_dir, "restore-journal");
    let _ = tokio::fs::remove_dir_all(&staging).await;
    let built = async {
        download_part(&store, &set.id, part, &staging, progress, object_keys.as_ref()).await?;
        // The restored server knows where its sets are, so deletes issued on it reach them.
        let backup_dir = staging.join("backup");
        ebb_backup::transfer::private_dir(&backup_dir)?;
        let destinations = backup_dir.join("destinations");
        std::fs::write(&destinations, format!("{dest}\n"))
            .map_err(|source| BackupError::Io { path: destinations.clone(), source })?;
        // It continues the server the set was taken of: it keeps its backup origin, so it may
        // go on backing up to this destination and its deletes reach these sets.
        if let Some(origin) = &origin {
            crate::backup::registry::write_origin(&backup_dir, origin)?;
        }
        // It takes the place of the server that took the set: it keeps its keys, so its
        // purges can reach the encrypted sets there.
        if let Some(from) = &key_dir {
            keep_keys(from, &backup_dir)?;
        }
        if !entries.is_empty() {
            let (dir, e) = (staging.clone(), entries.clone());
            tokio::task::spawn_blocking(move || {
                crate::backup::purge::apply_journal(&dir, &e, SetKind::Node).map(drop)
            })
            .await
            .map_err(|e| BackupError::Source(Box::new(e)))??;
        }
        std::fs::rename(&staging, data_dir)
            .map_err(|source| BackupError::Io { path: data_dir.to_path_buf(), source })?;
        if let Some(parent) = data_dir.parent() {
            std::fs::File::open(parent)
                .and_then(|f| f.sync_all())
                .map_err(|source| BackupError::Io { path: parent.to_path_buf(), source })?;
        }
        Ok::<_, BackupError>(())
    };
    if let Err(e) = built.await {
        let _ = tokio::fs::remove_dir_all(&staging).await;
        return Err(e.into());
    }
    Ok(Restored { set, journal_applied: entries.iter().map(|e| e.id).collect() })
}

/// The keys of `set`'s objects, if it is encrypted, opened with its key from `keys` (the
/// key directory given, if one was).
fn open_keys(set: &BackupSet, keys: Option<&KeyDir>) -> Result<Option<ObjectKeys>> {
    match crate::backup::purge::object_keys(set, keys) {
        Err(BackupError::NoKey { set, key, dir }) if keys.is_none() => {
            Err(NodeError::Config(format!(
                "set {set} is encrypted (key {key}): give --key-dir, the key directory of the \
                 server that took it (<data dir>/backup/keys; looked in {})",
                dir.display()
            )))
        }
        other => Ok(other?),
    }
}

/// Copies every key in `from` into the key directory of the server whose backup directory is
/// `backup_dir`: it takes the place of the server (or cluster) that took the set, so its
/// purges can reach the encrypted sets there.
pub fn keep_keys(from: &KeyDir, backup_dir: &Path) -> std::result::Result<(), BackupError> {
    let to = crate::backup::key_dir(backup_dir);
    for id in from.ids() {
        to.keep(&id, &from.get(&id, "")?)?;
    }
    Ok(())
}

/// The requests of `store`'s journal `set` may lack, read before anything is written: an
/// unreadable entry refuses the restore.
async fn missing(store: &BackupStore, set: &BackupSet) -> Result<Vec<JournalEntry>> {
    let journal = store.journal().await?;
    Ok(journal.into_iter().filter(|e| e.missing_from(set)).collect())
}
