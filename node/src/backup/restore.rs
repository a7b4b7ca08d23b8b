//! `ebb restore`: builds a data directory from a backup set, offline.
//!
//! Every object is checked against its hash as it arrives; the files go to a temporary
//! directory beside the target, which is renamed into place only once all arrived whole, so
//! a damaged or partial set leaves nothing a server could start on.

use std::path::Path;

use ebb_backup::transfer::download_part;
use ebb_backup::{BackupError, BackupSet, BackupStore, Destination, Progress, SetKind, Throttle};

use crate::error::{NodeError, Result};

/// Restores set `id` (the newest if `None`) from `from` into the new data directory `data_dir`;
/// `progress` counts as it goes. Returns the set restored.
pub async fn restore(
    from: &str,
    id: Option<&str>,
    data_dir: &Path,
    rate: Option<u64>,
    progress: &Progress,
) -> Result<BackupSet> {
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
    match set.kind {
        SetKind::Node => {
            let [part] = set.parts.as_slice() else {
                return Err(NodeError::Backup(Box::new(BackupError::Manifest {
                    set: set.id.clone(),
                    object: set.manifest_key().to_string(),
                    why: format!("a single node's set with {} parts", set.parts.len()),
                })));
            };
            download_part(&store, &set.id, part, data_dir, progress).await?;
        }
        kind => {
            return Err(NodeError::Config(format!(
                "set {} is a {} backup; this build restores single-node sets",
                set.id,
                kind.as_str()
            )))
        }
    }
    Ok(set)
}
