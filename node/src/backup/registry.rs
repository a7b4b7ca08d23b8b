//! Where a server keeps what its backups must remember between runs: the destinations it
//! backed up to, and the delete requests on their way to every destination's deletion journal.
//!
//! A single node keeps both in its data directory ([`LocalRegistry`]: a list of URIs and the
//! synced outbox of [`super::journal`]). A cluster keeps both in its metadata group
//! (`cluster::backup::MetaRegistry`), so every node knows every destination, an open intent
//! is already the durable record of a request before any shard applies it, and the metadata
//! leader, whichever node it is, carries requests to every destination and purges the sets.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use ebb_backup::journal::JournalEntry;
use ebb_backup::BackupError;
use ebb_query::backups::Journaled;
use ebb_query::sql::shard::Intent;

use super::journal::Outbox;

/// The destinations and the requests on their way to them.
#[async_trait]
pub trait Registry: Send + Sync + std::fmt::Debug {
    /// The destinations backed up to, as their URIs (which hold no secrets).
    fn destinations(&self) -> Vec<String>;
    /// This server's or cluster's backup origin: what its sets and journal entries are
    /// marked with, and the destinations it backs up to claimed for (see
    /// [`ebb_backup::BackupStore::claim`]). A restored server keeps its set's.
    async fn origin(&self) -> Result<String, BackupError>;
    /// Remembers destination `uri` (before a backup to it takes any part).
    async fn remember(&self, uri: &str) -> Result<(), BackupError>;
    /// Records `intent`, a request that deletes, before any shard applies it (see
    /// [`ebb_query::backups::Backups::journal`] for what the answer is held for).
    async fn journal(&self, intent: &Intent) -> Result<Journaled, BackupError>;
    /// Records that request `id` completed on every shard.
    async fn journal_done(&self, id: u64);
    /// The requests some destination's journal may lack, oldest first (complete or not).
    fn entries(&self) -> Vec<JournalEntry>;
    /// Forgets requests `ids`, complete and in every destination's journal.
    async fn forget(&self, ids: &[u64]);
    /// True if this server carries the requests to the destinations and purges their sets
    /// (in a cluster, only the metadata leader does).
    fn drives(&self) -> bool {
        true
    }
    /// Where this server keeps the keys of encrypted sets.
    fn keys(&self) -> &ebb_backup::crypto::KeyDir;
    /// Gives key `id` (just kept here, and named by a set's manifest) to every other server
    /// that may purge or restore the set: in a cluster, every other node. A node that misses
    /// it asks for it later ([`Registry::fetch_keys`]).
    async fn share_key(&self, id: &str, key: &ebb_backup::crypto::Key) {
        let _ = (id, key);
    }
    /// How long a key kept here is kept even if no set names it: a key another server shared
    /// may be of a set at a destination this server does not know yet (its view of the
    /// cluster lags). Zero where only this server makes keys.
    fn key_grace(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
    /// Asks the other servers for the keys `ids` that sets name and this server lacks: those
    /// found.
    async fn fetch_keys(&self, ids: &[String]) -> Vec<(String, ebb_backup::crypto::Key)> {
        let _ = ids;
        Vec::new()
    }
    /// Resolves when the requests or destinations may have changed elsewhere (another node
    /// journaled or completed a request); never, where only this server changes them.
    async fn changed(&self) {
        std::future::pending::<()>().await
    }
}

/// A single node's registry, under `<data dir>/backup`.
#[derive(Debug)]
pub struct LocalRegistry {
    dir: PathBuf,
    outbox: Outbox,
    keys: ebb_backup::crypto::KeyDir,
    /// Held shared by each delete request not journaled (no destination was known when it
    /// began) until it is done; taken exclusively to add a first destination, so a backup
    /// to it begins only once those requests are in the engine it copies.
    unjournaled: Arc<tokio::sync::RwLock<()>>,
    /// Held while the origin file is created.
    creating_origin: tokio::sync::Mutex<()>,
}

impl LocalRegistry {
    /// The registry in `backup_dir`. A request journaled by a run of the server that stopped
    /// before it completed is taken as complete now: it may have reached the shards, and a
    /// set must not keep what it may have deleted.
    pub fn new(backup_dir: &Path) -> LocalRegistry {
        let outbox = Outbox::new(backup_dir);
        for mut e in outbox.entries().into_iter().filter(|e| e.completed_ms.is_none()) {
            e.completed_ms = Some(ebb_query::now_ms());
            match outbox.put(&e) {
                Ok(()) => tracing::info!(request = e.id, "a journaled request of an earlier run"),
                Err(err) => tracing::warn!(request = e.id, error = %err, "completing a request"),
            }
        }
        let keys = super::key_dir(backup_dir);
        LocalRegistry {
            dir: backup_dir.to_path_buf(),
            outbox,
            keys,
            unjournaled: Default::default(),
            creating_origin: Default::default(),
        }
    }

    fn destinations_file(&self) -> PathBuf {
        self.dir.join("destinations")
    }
}

/// The file in a single node's `<data dir>/backup` that holds its backup origin.
pub const ORIGIN_FILE: &str = "origin";

/// Writes `origin` as the backup origin of the single node whose backup directory is
/// `backup_dir` (a restored node keeps its set's).
pub fn write_origin(backup_dir: &Path, origin: &str) -> Result<(), BackupError> {
    ebb_backup::transfer::private_dir(backup_dir)?;
    let path = backup_dir.join(ORIGIN_FILE);
    ebb_raft::sm::snapshot::write_atomic(&path, format!("{origin}\n").as_bytes())
        .map_err(|e| BackupError::Source(Box::new(e)))
}

fn task(e: tokio::task::JoinError) -> BackupError {
    BackupError::Source(Box::new(e))
}

#[async_trait]
impl Registry for LocalRegistry {
    fn destinations(&self) -> Vec<String> {
        std::fs::read_to_string(self.destinations_file())
            .map(|t| t.lines().filter(|l| !l.trim().is_empty()).map(str::to_string).collect())
            .unwrap_or_default()
    }

    async fn origin(&self) -> Result<String, BackupError> {
        let path = self.dir.join(ORIGIN_FILE);
        let read = |path: &Path| match std::fs::read_to_string(path) {
            Ok(t) if !t.trim().is_empty() => Ok(Some(t.trim().to_string())),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(BackupError::Io { path: path.to_path_buf(), source }),
        };
        if let Some(o) = read(&path)? {
            return Ok(o);
        }
        // Two backups starting together create one origin.
        let _one = self.creating_origin.lock().await;
        if let Some(o) = read(&path)? {
            return Ok(o);
        }
        // A server that backed up before origins were kept (or lost the file) takes the
        // origin its destinations were claimed with, so its deletes go on reaching its sets.
        let mut origin = None;
        for uri in self.destinations() {
            let Ok(dest) = ebb_backup::Destination::parse(&uri) else { continue };
            let Ok(store) =
                ebb_backup::BackupStore::open(&dest, ebb_backup::Throttle::none()).await
            else {
                continue;
            };
            if let Ok(Some(o)) = store.origin().await {
                tracing::info!(origin = %o, from = %uri, "the backup origin of a destination");
                origin = Some(o);
                break;
            }
        }
        let origin = match origin {
            Some(o) => o,
            None => ebb_backup::crypto::new_origin()?,
        };
        let dir = self.dir.clone();
        let o = origin.clone();
        tokio::task::spawn_blocking(move || write_origin(&dir, &o)).await.map_err(task)??;
        Ok(origin)
    }

    async fn remember(&self, uri: &str) -> Result<(), BackupError> {
        let _no_request_in_flight = self.unjournaled.write().await;
        let mut all = self.destinations();
        if all.iter().any(|d| d == uri) {
            return Ok(());
        }
        all.push(uri.to_string());
        let path = self.destinations_file();
        ebb_backup::transfer::private_dir(&self.dir)?;
        let body = all.join("\n") + "\n";
        let p = path.clone();
        tokio::task::spawn_blocking(move || {
            ebb_raft::sm::snapshot::write_atomic(&p, body.as_bytes())
        })
        .await
        .map_err(task)?
        .map_err(|e| BackupError::Source(Box::new(e)))
    }

    async fn journal(&self, intent: &Intent) -> Result<Journaled, BackupError> {
        // With no destination, no set can lack the request: nothing is written (no sync on
        // every delete of a server that is never backed up). A first backup waits for the
        // request to finish, so the request is in every part it takes.
        let unjournaled = self.unjournaled.clone().read_owned().await;
        if self.destinations().is_empty() {
            return Ok(Journaled(Some(Box::new(unjournaled))));
        }
        drop(unjournaled);
        let entry = Outbox::entry(intent)?;
        let outbox = Outbox::new(&self.dir);
        tokio::task::spawn_blocking(move || outbox.put(&entry)).await.map_err(task)??;
        Ok(Journaled::default())
    }

    async fn journal_done(&self, id: u64) {
        let outbox = Outbox::new(&self.dir);
        let now = ebb_query::now_ms();
        let done = tokio::task::spawn_blocking(move || {
            if outbox.get(id).is_some() {
                outbox.complete(id, now);
            }
        });
        if let Err(e) = done.await {
            tracing::warn!(request = id, error = %e, "recording a journaled request as done");
        }
    }

    fn entries(&self) -> Vec<JournalEntry> {
        self.outbox.entries()
    }

    async fn forget(&self, ids: &[u64]) {
        for &id in ids {
            self.outbox.remove(id);
        }
    }

    fn keys(&self) -> &ebb_backup::crypto::KeyDir {
        &self.keys
    }
}
