//! Locks at a destination, kept as restic keeps them: a small object per holder under
//! `locks/`, shared for a backup (any number may upload at once) and exclusive for work that
//! removes objects (a prune, a purge rewriting a set).
//!
//! The race they close: a backup skips uploading a file whose object is already stored, then
//! names that object in its manifest, written last. A prune running meanwhile sees an object
//! no manifest names yet and removes it; the new set would name a missing object. With locks,
//! a prune runs only while no backup holds one and a backup only while no prune does.
//!
//! A holder writes its lock, then lists the others: if a conflicting live lock is there, it
//! removes its own and answers [`BackupError::Busy`] (two that start together may both back
//! off; neither proceeds wrongly). Ages are read from the store's own clock (the
//! `last_modified` it gives objects, compared with that of the lock just written), so a server
//! whose clock is wrong cannot make another's lock look stale. A holder renews its lock every
//! [`RENEW_EVERY`], on a task of its own, so a long step (a large object's transfer, a
//! compaction) does not let it go stale; a lock not renewed for [`STALE_AFTER`] is one a dead
//! server left and is ignored (an exclusive holder removes it). A holder that could not renew
//! within [`STALE_AFTER`] (paused, cut off), or whose lock was removed meanwhile, has lost it
//! and fails at its next step instead of going on ([`BackupStore::keep`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use object_store::path::Path as Key;
use object_store::{ObjectStoreExt, PutPayload};
use parking_lot::Mutex;

use crate::error::{BackupError, InStore, Result};
use crate::store::BackupStore;

/// A lock not renewed for this long is one a dead server left.
pub const STALE_AFTER: Duration = Duration::from_secs(30 * 60);

/// How often a holder renews its lock.
pub const RENEW_EVERY: Duration = Duration::from_secs(5 * 60);

/// What a lock allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// Adding objects and sets (a backup): held by any number at once.
    Shared,
    /// Removing objects (a prune or a purge): held alone.
    Exclusive,
}

impl LockKind {
    fn prefix(self) -> &'static str {
        match self {
            LockKind::Shared => "shared",
            LockKind::Exclusive => "exclusive",
        }
    }
}

/// A lock this process holds at a destination ([`BackupStore::lock`]); renewed in the
/// background until it is dropped.
#[derive(Debug)]
pub struct Lock {
    key: Key,
    kind: LockKind,
    state: Arc<Held>,
    renewer: Option<tokio::task::AbortHandle>,
}

/// What the renewal task and the holder share.
#[derive(Debug)]
struct Held {
    renewed: Mutex<Instant>,
    /// Why the lock was lost, once it was (removed by another holder as stale).
    lost: Mutex<Option<String>>,
}

impl Lock {
    /// What it allows.
    pub fn kind(&self) -> LockKind {
        self.kind
    }

    fn new(key: Key, kind: LockKind) -> Lock {
        let state = Arc::new(Held { renewed: Mutex::new(Instant::now()), lost: Mutex::new(None) });
        Lock { key, kind, state, renewer: None }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if let Some(r) = &self.renewer {
            r.abort();
        }
    }
}

/// Renews the lock at `key` every [`RENEW_EVERY`] until aborted or lost.
async fn renew(store: Arc<dyn object_store::ObjectStore>, key: Key, held: Arc<Held>) {
    loop {
        tokio::time::sleep(RENEW_EVERY).await;
        if !renew_once(store.as_ref(), &key, &held).await {
            return;
        }
    }
}

/// Renews the lock at `key` once: false (and the lock recorded lost) if it is gone, as when
/// another holder removed it as stale. A failure to reach the store is tried again at the
/// next turn (the holder fails once the lock is stale).
async fn renew_once(store: &dyn object_store::ObjectStore, key: &Key, held: &Held) -> bool {
    match store.head(key).await {
        Ok(_) => {}
        Err(object_store::Error::NotFound { .. }) => {
            *held.lost.lock() = Some(format!("the lock {key} was removed by another holder"));
            return false;
        }
        Err(e) => {
            tracing::warn!(lock = %key, error = %e, "renewing a backup lock");
            return true;
        }
    }
    match store.put(key, PutPayload::from_static(LOCK_BODY)).await {
        Ok(_) => *held.renewed.lock() = Instant::now(),
        Err(e) => tracing::warn!(lock = %key, error = %e, "renewing a backup lock"),
    }
    true
}

const LOCK_BODY: &[u8] = b"ebbdb backup lock\n";

/// A holder name for `what` (`prune`, `purge`) no other server's shares: the host, the process
/// (containers all run as pid 1) and the moment.
pub fn unique_holder(what: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("{what}-{}-{}-{nanos:09}", host.trim(), std::process::id())
}

impl BackupStore {
    /// Takes a `kind` lock for `holder` (a set id, say), or answers [`BackupError::Busy`]
    /// naming the conflicting holder.
    pub async fn lock(&self, kind: LockKind, holder: &str) -> Result<Lock> {
        let key = Key::from(format!("locks/{}/{holder}", kind.prefix()));
        let mut lock = Lock::new(key, kind);
        self.write_lock(&lock).await?;
        let now = self.raw().head(&lock.key).await.doing(|| format!("reading {}", lock.key))?;
        let now = now.last_modified;
        let metas: Vec<_> = self
            .raw()
            .list(Some(&Key::from("locks")))
            .try_collect()
            .await
            .doing(|| "listing locks".to_string())?;
        for m in metas {
            if m.location == lock.key {
                continue;
            }
            let other = if m.location.as_ref().starts_with("locks/exclusive/") {
                LockKind::Exclusive
            } else {
                LockKind::Shared
            };
            let age = (now - m.last_modified).to_std().unwrap_or_default();
            if age >= STALE_AFTER {
                if kind == LockKind::Exclusive {
                    tracing::info!(lock = %m.location, "removing a stale backup lock");
                    let _ = self.raw().delete(&m.location).await;
                }
                continue;
            }
            if kind == LockKind::Exclusive || other == LockKind::Exclusive {
                self.unlock(&lock).await;
                let holder = m.location.filename().unwrap_or_default().to_string();
                return Err(BackupError::Busy(match other {
                    LockKind::Shared => format!("backup {holder} is running at this destination"),
                    LockKind::Exclusive => {
                        format!("a prune or purge ({holder}) is running at this destination")
                    }
                }));
            }
        }
        let task = renew(self.shared(), lock.key.clone(), lock.state.clone());
        lock.renewer = Some(tokio::spawn(task).abort_handle());
        Ok(lock)
    }

    async fn write_lock(&self, lock: &Lock) -> Result<()> {
        let body = PutPayload::from_static(LOCK_BODY);
        self.raw().put(&lock.key, body).await.doing(|| format!("writing {}", lock.key))?;
        Ok(())
    }

    /// Renews `lock` if it is due (the background renewal fell behind); fails if it was
    /// lost, or went unrenewed so long that others may have taken it as stale (the work
    /// holding it must stop).
    pub async fn keep(&self, lock: &Lock) -> Result<()> {
        if let Some(why) = lock.state.lost.lock().clone() {
            return Err(BackupError::Busy(format!("{why}; stopping")));
        }
        let since = lock.state.renewed.lock().elapsed();
        if since >= STALE_AFTER {
            return Err(BackupError::Busy(format!(
                "the lock {} was not renewed for {}s, so others may have taken it as stale; \
                 stopping",
                lock.key,
                since.as_secs()
            )));
        }
        if since >= RENEW_EVERY {
            self.write_lock(lock).await?;
            *lock.state.renewed.lock() = Instant::now();
        }
        Ok(())
    }

    /// Releases `lock` (a failure is only logged: the lock goes stale in time).
    pub async fn unlock(&self, lock: &Lock) {
        if let Err(e) = self.raw().delete(&lock.key).await {
            tracing::warn!(lock = %lock.key, error = %e, "releasing a backup lock");
        }
    }

    /// The lock `holder` took (to release one a server killed midway left).
    pub fn lock_of(&self, kind: LockKind, holder: &str) -> Lock {
        Lock::new(Key::from(format!("locks/{}/{holder}", kind.prefix())), kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_lock_removed_by_another_holder_is_lost_and_stops_its_holder() {
        let dir = tempfile::tempdir().unwrap();
        let dest = crate::Destination::parse(dir.path().to_str().unwrap()).unwrap();
        let store = BackupStore::create(&dest, crate::Throttle::none()).await.unwrap();
        let lock = store.lock(LockKind::Shared, "a-set").await.unwrap();
        assert!(renew_once(store.raw(), &lock.key, &lock.state).await);
        store.keep(&lock).await.unwrap();
        // Another holder took it as stale and removed it.
        store.raw().delete(&lock.key).await.unwrap();
        assert!(!renew_once(store.raw(), &lock.key, &lock.state).await);
        let e = store.keep(&lock).await.unwrap_err();
        assert!(matches!(e, BackupError::Busy(_)) && e.to_string().contains("removed"), "{e}");
    }
}
