//! Backups of this server: `BACKUP TO '<uri>'` (and `ebb backup create`, which runs it) takes
//! a consistent copy of every shard's engine and stores it as a set at the destination (see
//! the `ebb-backup` crate for the store, manifests and transfers).
//!
//! A backup runs one at a time per server. Each part is an engine checkpoint taken after the
//! backup started (so every write and delete acknowledged before is in it), hard-linked into
//! `<data dir>/backup/staging/` while it uploads and removed after. A shared lock at the
//! destination (`ebb_backup::lock`) keeps a prune from removing objects no manifest names yet;
//! the manifest is written last, so a backup that fails or is killed leaves no set. A backup
//! runs on its own task: a client that disconnects does not stop it (`system.backups` shows
//! how it ends).
//!
//! The destinations backed up to, and the delete requests on their way to them, are kept by a
//! [`registry::Registry`]: in the data directory of a single node, in the metadata group of a
//! cluster. `system.backups` lists their sets after a restart.

pub mod audit;
pub mod journal;
pub mod local;
pub mod purge;
pub mod registry;
pub mod restore;

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use ebb_backup::journal::JournalEntry;
use ebb_backup::transfer::HashCache;
use ebb_backup::{
    BackupError, BackupSet, BackupStore, Destination, Lock, LockKind, Part, Progress, SetKind,
};
use ebb_query::backups::{BackupRequest, BackupRow, BackupState, Backups};
use ebb_query::QueryError;
use parking_lot::Mutex;

/// Where a server whose backup directory is `backup_dir` (`<data dir>/backup`) keeps the keys
/// of encrypted sets.
pub fn key_dir(backup_dir: &Path) -> ebb_backup::crypto::KeyDir {
    ebb_backup::crypto::KeyDir::new(backup_dir.join("keys"))
}

/// How many finished backups `system.backups` remembers besides the sets it finds.
const REMEMBERED: usize = 64;

/// What a backup copies: the shards and how to take each one's part.
#[async_trait]
pub trait PartTaker: Send + Sync + std::fmt::Debug {
    /// What the sets are of.
    fn kind(&self) -> SetKind;
    /// The shards to back up.
    async fn shards(&self) -> Result<Vec<u64>, QueryError>;
    /// Takes shard `shard`'s part for `job` (checkpoint, upload) and returns it.
    async fn take(&self, shard: u64, job: &mut Job) -> Result<Part, BackupError>;
    /// Takes the cluster's metadata part, if there is one to take.
    async fn meta(&self, job: &mut Job) -> Result<Option<Part>, BackupError> {
        let _ = job;
        Ok(None)
    }
}

/// One backup as it runs: its store and what it has uploaded.
#[derive(Debug)]
pub struct Job {
    /// The set's id.
    pub set_id: String,
    /// The destination's store.
    pub store: BackupStore,
    /// The backup's shared lock at the destination (renewed as objects go up).
    pub lock: Lock,
    /// The sizes of the objects at the destination, by hash (kept current as objects go up).
    pub stored: HashMap<String, u64>,
    /// File hashes known from earlier backups.
    pub cache: HashCache,
    /// Its progress.
    pub progress: Arc<Progress>,
    /// Where checkpoints wait while they upload.
    pub staging: PathBuf,
    /// Bytes a second the transfers may go at.
    pub rate: Option<u64>,
    /// For an encrypted set: the object keys known and used.
    pub encrypting: Option<ebb_backup::transfer::Encrypting>,
}

/// A backup this server runs or ran.
#[derive(Debug)]
struct Run {
    id: String,
    destination: String,
    kind: SetKind,
    started_ms: u64,
    progress: Arc<Progress>,
    outcome: Mutex<Option<Outcome>>,
}

#[derive(Debug, Clone)]
enum Outcome {
    Done(Box<BackupSet>),
    Failed(String),
}

impl Run {
    fn row(&self) -> BackupRow {
        let p = self.progress.snapshot();
        let mut row = BackupRow {
            id: self.id.clone(),
            destination: self.destination.clone(),
            state: BackupState::Running,
            kind: self.kind.as_str().to_string(),
            started_ms: self.started_ms,
            finished_ms: None,
            parts: 0,
            files: p.files_total,
            files_done: p.files_done,
            bytes: p.bytes_total,
            bytes_done: p.bytes_done,
            bytes_copied: p.bytes_copied,
            generation: None,
            error: None,
        };
        match &*self.outcome.lock() {
            None => {}
            Some(Outcome::Done(set)) => {
                row = set_row(set, &self.destination);
                row.bytes_copied = p.bytes_copied;
            }
            Some(Outcome::Failed(why)) => {
                row.state = BackupState::Failed;
                row.error = Some(why.clone());
            }
        }
        row
    }
}

/// The row of a set found at `destination`.
fn set_row(set: &BackupSet, destination: &str) -> BackupRow {
    BackupRow {
        id: set.id.clone(),
        destination: destination.to_string(),
        state: BackupState::Done,
        kind: set.kind.as_str().to_string(),
        started_ms: set.started_ms,
        finished_ms: Some(set.finished_ms),
        parts: set.parts.len() as u64,
        files: set.files() as u64,
        files_done: set.files() as u64,
        bytes: set.bytes(),
        bytes_done: set.bytes(),
        bytes_copied: 0,
        generation: Some(set.generation),
        error: None,
    }
}

/// This server's backups.
#[derive(Debug)]
pub struct BackupService {
    service: Arc<Service>,
}

/// What a backup runs on (shared with the task it runs on).
#[derive(Debug)]
struct Service {
    parts: Arc<dyn PartTaker>,
    /// The destinations and the requests on their way to them.
    registry: Arc<dyn registry::Registry>,
    /// `<data dir>/backup`.
    dir: PathBuf,
    /// Bytes per second a backup may transfer by default.
    rate: Option<u64>,
    runs: Mutex<VecDeque<Arc<Run>>>,
    /// Held while a backup runs (one at a time).
    busy: tokio::sync::Mutex<()>,
    /// The keys of sets being written here (made, not yet named by a manifest): kept.
    making: Mutex<std::collections::HashSet<String>>,
    /// Held while deletes are applied to sets (a backup waits for it).
    purging: tokio::sync::Mutex<()>,
    /// Entries each destination has, as last written there: (destination, request, complete).
    sent: Mutex<std::collections::HashSet<(String, u64, bool)>>,
    /// Wakes the purger (a request journaled or completed).
    wake: Arc<tokio::sync::Notify>,
    /// What each destination held when `system.deletions` last read it (for [`SEEN_FOR`];
    /// a purge or a backup here forgets it).
    seen: Mutex<HashMap<String, Seen>>,
}

/// A destination's journal and readable sets, as read at `at`.
#[derive(Debug, Clone)]
struct Seen {
    at: std::time::Instant,
    journal: Vec<ebb_backup::journal::JournalEntry>,
    sets: Vec<BackupSet>,
}

/// How long `system.deletions` shows a destination as last read (a dashboard polling it does
/// not list the store each time).
const SEEN_FOR: std::time::Duration = std::time::Duration::from_secs(5);

/// How often the purger looks at every destination even when nothing woke it (to retry what
/// failed, and for sets a busy destination kept it from).
const PURGE_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// How soon the purger tries again after a destination was busy or failed.
const PURGE_RETRY: std::time::Duration = std::time::Duration::from_secs(2);

impl BackupService {
    /// Backups of what `parts` takes, kept under `data_dir/backup`, at `rate` bytes per
    /// second by default. Removes what a backup killed midway left in staging.
    /// A backup killed midway (the server stopped) leaves its lock at the destination, named
    /// in `<data dir>/backup/running`: it is released in the background.
    pub fn new(
        parts: Arc<dyn PartTaker>,
        registry: Arc<dyn registry::Registry>,
        data_dir: &Path,
        rate: Option<u64>,
    ) -> BackupService {
        let service = Arc::new(Service::new(parts, registry, data_dir, rate));
        tokio::spawn(purger(Arc::downgrade(&service), service.wake.clone()));
        BackupService { service }
    }

    /// Scans every part of every set at every destination for values request `id` covers
    /// (see [`audit`]): one report per part.
    pub async fn audit(&self, id: u64) -> Vec<crate::audit::ReplicaReport> {
        let scratch = ebb_backup::lock::unique_holder("audit");
        let work = self.service.dir.join("audit").join(scratch);
        let mut out = Vec::new();
        let waiting = self.service.registry.entries().into_iter().find(|e| e.id == id);
        for uri in self.service.registry.destinations() {
            let keys = Some(self.service.registry.keys());
            out.extend(audit::audit_destination(&uri, id, waiting.as_ref(), &work, keys).await);
        }
        let _ = tokio::fs::remove_dir_all(&work).await;
        out
    }

    /// Flushes the journal to every destination and applies it to every set now (what the
    /// purger does in the background): for tests and tools.
    pub async fn purge_now(&self) -> Vec<(String, Result<purge::PurgeReport, BackupError>)> {
        self.service.purge_all().await
    }
}

/// Applies the deletion journal to the sets at every destination whenever a request is
/// journaled or completes, and every [`PURGE_EVERY`]; ends with the service.
async fn purger(service: std::sync::Weak<Service>, wake: Arc<tokio::sync::Notify>) {
    let mut wait = PURGE_EVERY;
    let mut last_collect = tokio::time::Instant::now();
    loop {
        let Some(registry) = service.upgrade().map(|s| s.registry.clone()) else { return };
        tokio::select! {
            _ = wake.notified() => {}
            _ = registry.changed() => {}
            _ = tokio::time::sleep(wait) => {}
        }
        drop(registry);
        let Some(s) = service.upgrade() else { return };
        wait = PURGE_EVERY;
        // A node that does not purge (not the metadata leader) still destroys its copies of
        // the keys of sets that are gone, and gets those it lacks.
        if !s.registry.drives() && last_collect.elapsed() >= PURGE_EVERY {
            last_collect = tokio::time::Instant::now();
            s.collect_keys().await;
        }
        for (dest, r) in s.purge_all().await {
            match r {
                Ok(report) if report == purge::PurgeReport::default() => {}
                Ok(report) => tracing::info!(to = %dest, ?report, "deletes applied to backup sets"),
                // A backup holds the destination: soon again.
                Err(BackupError::Busy(why)) => {
                    tracing::debug!(to = %dest, %why, "a purge waits");
                    wait = PURGE_RETRY;
                }
                Err(e) => {
                    tracing::warn!(to = %dest, error = %e, "applying deletes to backup sets");
                    wait = PURGE_RETRY;
                }
            }
        }
    }
}

impl Service {
    fn new(
        parts: Arc<dyn PartTaker>,
        registry: Arc<dyn registry::Registry>,
        data_dir: &Path,
        rate: Option<u64>,
    ) -> Service {
        let dir = data_dir.join("backup");
        let _ = std::fs::remove_dir_all(dir.join("staging"));
        // A purge cut short leaves a copy of a set's data from before its deletes.
        let _ = std::fs::remove_dir_all(purge::work_dir(&dir));
        let _ = std::fs::remove_dir_all(dir.join("audit"));
        if let Ok(text) = std::fs::read_to_string(dir.join("running")) {
            let running = dir.join("running");
            tokio::spawn(async move {
                release_left_lock(&text).await;
                let _ = tokio::fs::remove_file(running).await;
            });
        }
        Service {
            purging: tokio::sync::Mutex::new(()),
            registry,
            seen: Mutex::new(Default::default()),
            sent: Mutex::new(Default::default()),
            wake: Arc::new(tokio::sync::Notify::new()),
            parts,
            dir,
            rate,
            runs: Mutex::new(VecDeque::new()),
            busy: tokio::sync::Mutex::new(()),
            making: Mutex::new(Default::default()),
        }
    }

    /// Runs a backup to `request.to`.
    async fn run(&self, request: BackupRequest, issuer: &str) -> Result<BackupRow, QueryError> {
        let dest = Destination::parse(&request.to)?;
        let Ok(_busy) = self.busy.try_lock() else {
            let running = self.runs.lock().iter().find(|r| r.outcome.lock().is_none()).cloned();
            return Err(BackupError::Busy(format!(
                "this server is already running a backup{} (one at a time)",
                running.map(|r| format!(", {} to {}", r.id, r.destination)).unwrap_or_default()
            ))
            .into());
        };
        let started_ms = ebb_query::now_ms();
        let store = BackupStore::create(&dest, ebb_backup::Throttle::new(self.rate)).await?;
        let run = Arc::new(Run {
            id: store.next_set_id(started_ms).await?,
            destination: dest.to_string(),
            kind: self.parts.kind(),
            started_ms,
            progress: Arc::new(Progress::default()),
            outcome: Mutex::new(None),
        });
        {
            let mut runs = self.runs.lock();
            runs.push_back(run.clone());
            while runs.len() > REMEMBERED {
                runs.pop_front();
            }
        }
        tracing::info!(id = %run.id, to = %run.destination, by = issuer, "backup started");
        // Each part removes its own checkpoint from staging (others may be there: parts this
        // node takes for another node's backup).
        let result = self.take(&run, store, request.encrypted).await;
        match result {
            Ok(set) => {
                let p = run.progress.snapshot();
                tracing::info!(
                    id = %run.id, files = p.files_total, bytes = p.bytes_total,
                    copied = p.bytes_copied, "backup done"
                );
                *run.outcome.lock() = Some(Outcome::Done(Box::new(set)));
                self.seen.lock().remove(&run.destination);
                Ok(run.row())
            }
            Err(e) => {
                tracing::warn!(id = %run.id, error = %e, "backup failed");
                *run.outcome.lock() = Some(Outcome::Failed(e.to_string()));
                Err(e.into())
            }
        }
    }

    /// Takes every part of `run` (sealed if `encrypted`) and writes its set.
    async fn take(
        &self,
        run: &Run,
        store: BackupStore,
        encrypted: bool,
    ) -> Result<BackupSet, BackupError> {
        let keys = encrypted.then(|| self.registry.keys().clone());
        let dest = store.destination().clone();
        let origin = self.registry.origin().await?;
        store.claim(&origin).await?;
        self.registry.remember(&dest.to_string()).await?;
        // Named before the lock is taken, so a restart after a kill releases it.
        let running = self.dir.join("running");
        ebb_backup::transfer::private_dir(&self.dir)?;
        std::fs::write(&running, format!("{}\n{dest}\n", run.id))
            .map_err(|source| BackupError::Io { path: running.clone(), source })?;
        let purging = self.purging.lock().await;
        let lock = match store.lock(LockKind::Shared, &run.id).await {
            Ok(l) => l,
            Err(e) => {
                let _ = std::fs::remove_file(&running);
                return Err(e);
            }
        };
        let cache_path = self.dir.join("hashes");
        drop(purging);
        // Every request completed before now is in the parts taken from here on: the
        // journal may drop requests completed before a set began (see `purge`).
        let started_ms = ebb_query::now_ms();
        let stored = match store.object_sizes().await {
            Ok(s) => s,
            Err(e) => {
                store.unlock(&lock).await;
                let _ = std::fs::remove_file(&running);
                return Err(e);
            }
        };
        let mut job = Job {
            set_id: run.id.clone(),
            stored,
            store,
            lock,
            cache: HashCache::load(&cache_path),
            progress: run.progress.clone(),
            staging: self.dir.join("staging"),
            rate: self.rate,
            encrypting: None,
        };
        let mut set_key = None;
        let taken = async {
            if let Some(keys) = &keys {
                job.encrypting = Some(purge::learn_keys(&job.store, keys).await?);
            }
            let meta = self.parts.meta(&mut job).await?;
            let shards = self.parts.shards().await.map_err(|e| BackupError::Source(Box::new(e)))?;
            let mut parts = Vec::with_capacity(shards.len());
            for shard in shards {
                parts.push(self.parts.take(shard, &mut job).await?);
            }
            let set = BackupSet {
                format: ebb_backup::set::FORMAT,
                id: run.id.clone(),
                kind: self.parts.kind(),
                started_ms,
                finished_ms: ebb_query::now_ms(),
                generation: 1,
                server_version: env!("CARGO_PKG_VERSION").to_string(),
                purged: Vec::new(),
                parts,
                meta,
                encryption: None,
                origin: Some(origin),
            };
            let mut set = set;
            if let (Some(keys), Some(enc)) = (&keys, &job.encrypting) {
                // Made and noted as in the making at once (see `collect_keys`).
                let (id, key) = {
                    let mut making = self.making.lock();
                    let (id, key) = keys.create()?;
                    making.insert(id.clone());
                    (id, key)
                };
                set.encryption =
                    Some(ebb_backup::crypto::SetEncryption::seal(&set, &id, &key, &enc.used)?);
                set_key = Some((id, key));
            }
            // The lock must still be held when the set names its objects.
            job.store.keep(&job.lock).await?;
            job.store.put_set(&set).await?;
            // Shared once a manifest names it: a node that finds a key no set names
            // destroys it.
            if let Some((id, key)) = &set_key {
                self.registry.share_key(id, key).await;
            }
            Ok::<_, BackupError>(set)
        };
        let set = taken.await;
        if let Some((id, _)) = &set_key {
            self.making.lock().remove(id);
        }
        // The hashes learned stay useful whether or not the set was written.
        if let Err(e) = job.cache.save(&cache_path) {
            tracing::warn!(error = %e, "keeping the backup hash cache");
        }
        job.store.unlock(&job.lock).await;
        let _ = std::fs::remove_file(&running);
        set
    }
}

impl Service {
    /// Each set at each destination as a copy of the delete requests it must be reached by.
    async fn deletion_copies(&self) -> Vec<ebb_query::deletions::ReplicaDeletion> {
        use ebb_query::deletions::ReplicaDeletion;
        let outbox = self.registry.entries();
        let mut out = Vec::new();
        for uri in self.registry.destinations() {
            let found = async {
                let cached =
                    self.seen.lock().get(&uri).filter(|s| s.at.elapsed() < SEEN_FOR).cloned();
                let seen = match cached {
                    Some(s) => s,
                    None => {
                        let dest = Destination::parse(&uri)?;
                        let store = BackupStore::open(&dest, ebb_backup::Throttle::none()).await?;
                        let journal = store.journal().await?;
                        let sets = store.list().await?.into_iter().filter_map(|l| l.set.ok());
                        let seen =
                            Seen { at: std::time::Instant::now(), journal, sets: sets.collect() };
                        self.seen.lock().insert(uri.clone(), seen.clone());
                        seen
                    }
                };
                let mut journal = seen.journal;
                for e in &outbox {
                    if !journal.iter().any(|j| j.id == e.id) {
                        journal.push(e.clone());
                    }
                }
                Ok::<_, BackupError>((journal, seen.sets))
            };
            let (journal, sets) = match found.await {
                Ok(f) => f,
                Err(e) => {
                    tracing::warn!(to = %uri, error = %e, "reading a destination's sets");
                    continue;
                }
            };
            for set in sets {
                // The set alone: where backups are kept is for admins (system.backups).
                let copy = Some(set.id.clone());
                let row = |id: u64, shard: u64| ReplicaDeletion {
                    id,
                    kind: String::new(),
                    target: String::new(),
                    issued_by: String::new(),
                    rows: None,
                    issued_at_ms: 0,
                    deadline_ms: None,
                    shard,
                    node: 0,
                    applied_at_ms: None,
                    persisted_at_ms: None,
                    deletes: 0,
                    pending: 0,
                    awaiting: false,
                    backup: copy.clone(),
                };
                for part in &set.parts {
                    for p in &set.purged {
                        out.push(ReplicaDeletion {
                            deadline_ms: p.deadline_ms,
                            applied_at_ms: Some(p.at_ms),
                            persisted_at_ms: Some(p.at_ms),
                            deletes: 1,
                            ..row(p.id, part.shard)
                        });
                    }
                    let waiting = journal.iter().filter(|e| e.missing_from(&set));
                    for e in waiting {
                        let intent = journal::intent_of(e).ok();
                        out.push(ReplicaDeletion {
                            kind: intent
                                .as_ref()
                                .map(|i| i.kind.to_ascii_lowercase().replace("drop table", "drop"))
                                .unwrap_or_default(),
                            target: intent.as_ref().map(|i| i.sql.clone()).unwrap_or_default(),
                            issued_by: intent.map(|i| i.issued_by).unwrap_or_default(),
                            issued_at_ms: e.issued_at_ms,
                            deadline_ms: e.deadline_ms,
                            deletes: 1,
                            pending: 1,
                            // Driven there by the purger: pending, not at risk, until late.
                            awaiting: true,
                            ..row(e.id, part.shard)
                        });
                    }
                }
            }
        }
        out
    }

    /// Copies the outbox to every destination's journal, then applies the journal to the
    /// sets at each: what happened at each destination.
    async fn purge_all(&self) -> Vec<(String, Result<purge::PurgeReport, BackupError>)> {
        let _purging = self.purging.lock().await;
        if !self.registry.drives() {
            return Vec::new();
        }
        if self.registry.destinations().is_empty() {
            return Vec::new();
        }
        let origin = match self.registry.origin().await {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!(error = %e, "no backup origin to purge by");
                return Vec::new();
            }
        };
        let entries: Vec<JournalEntry> = self
            .registry
            .entries()
            .into_iter()
            .map(|e| JournalEntry { origin: Some(origin.clone()), ..e })
            .collect();
        let mut out = Vec::new();
        let mut everywhere: std::collections::HashSet<u64> =
            entries.iter().filter(|e| e.completed_ms.is_some()).map(|e| e.id).collect();
        for uri in self.registry.destinations() {
            let done = async {
                let dest = Destination::parse(&uri)?;
                let store = BackupStore::open(&dest, ebb_backup::Throttle::new(self.rate)).await?;
                // A destination from before origins is claimed now. One another server claimed
                // (both backed up to it before origins were kept) still gets this server's
                // requests: each is applied only to the sets of its origin, and to the sets of
                // no recorded origin, as before.
                match store.claim(&origin).await {
                    Ok(()) => {}
                    Err(e @ BackupError::OtherOrigin { .. }) => {
                        tracing::warn!(to = %uri, error = %e, "journaling to a shared destination")
                    }
                    Err(e) => return Err(e),
                }
                for e in &entries {
                    let key = (uri.clone(), e.id, e.completed_ms.is_some());
                    if self.sent.lock().contains(&key) {
                        continue;
                    }
                    store.put_journal(e).await?;
                    self.sent.lock().insert(key);
                }
                purge::purge(&store, &purge::work_dir(&self.dir), self.registry.as_ref()).await
            };
            let r = done.await;
            // Sets a purge rewrote are read again at once (`system.deletions` shows them
            // purged), not after the rest of the round.
            if r.as_ref().is_ok_and(|p| !p.sets.is_empty()) {
                self.seen.lock().clear();
            }
            for e in &entries {
                if !self.sent.lock().contains(&(uri.clone(), e.id, true)) {
                    everywhere.remove(&e.id);
                }
            }
            out.push((uri, r));
        }
        let everywhere: Vec<u64> = everywhere.into_iter().collect();
        if !everywhere.is_empty() {
            self.registry.forget(&everywhere).await;
            self.sent.lock().retain(|(_, id, _)| !everywhere.contains(id));
        }
        self.collect_keys_purging().await;
        out
    }

    /// Destroys the keys of encrypted sets that are gone (pruned, or replaced by a purge's
    /// generation), and asks the other servers for the keys of sets this one lacks (a node
    /// that was down when a set was taken). Not while a purge runs here (which makes keys
    /// before their manifests).
    async fn collect_keys(&self) {
        let _purging = self.purging.lock().await;
        self.collect_keys_purging().await;
    }

    /// [`Service::collect_keys`], for the caller holding `purging`.
    async fn collect_keys_purging(&self) {
        let keys = self.registry.keys();
        let destinations = self.registry.destinations();
        // No destination known (or the cluster out of reach): no set is known either, and
        // nothing may be taken as gone.
        if destinations.is_empty() {
            return;
        }
        let mut stores = Vec::new();
        for uri in destinations {
            let opened = match Destination::parse(&uri) {
                Ok(d) => BackupStore::open(&d, ebb_backup::Throttle::none()).await,
                Err(e) => Err(e),
            };
            match opened {
                Ok(s) => stores.push(s),
                Err(e) => {
                    tracing::warn!(to = %uri, error = %e, "keys of backup sets kept: a destination cannot be read");
                    return;
                }
            }
        }
        let making = || self.making.lock().clone();
        let grace = self.registry.key_grace();
        let lacking = match purge::collect_keys(&stores, keys, &making, grace).await {
            Ok(lacking) => lacking,
            Err(e) => {
                tracing::warn!(error = %e, "destroying the keys of backup sets that are gone");
                return;
            }
        };
        if lacking.is_empty() {
            return;
        }
        let ids: Vec<String> = lacking.iter().map(|l| l.id.clone()).collect();
        for (id, key) in self.registry.fetch_keys(&ids).await {
            // Kept only if it opens the set that names it.
            let Some(l) = lacking.iter().find(|l| l.id == id) else { continue };
            if let Err(e) = l.sealed.open(&key, &l.set) {
                tracing::warn!(key = %id, set = %l.set, error = %e, "a key another node gave does not open its set");
                continue;
            }
            match keys.keep(&id, &key) {
                Ok(()) => {
                    tracing::info!(key = %id, "kept the key of a backup set another node made")
                }
                Err(e) => tracing::warn!(key = %id, error = %e, "keeping a backup set's key"),
            }
        }
    }
}

/// Releases the lock a backup killed midway left (`text` is its `running` file: the set id,
/// then the destination).
async fn release_left_lock(text: &str) {
    let mut lines = text.lines();
    let (Some(id), Some(uri)) = (lines.next(), lines.next()) else { return };
    let released = async {
        let store =
            BackupStore::open(&Destination::parse(uri)?, ebb_backup::Throttle::none()).await?;
        store.unlock(&store.lock_of(LockKind::Shared, id)).await;
        Ok::<_, BackupError>(())
    };
    match released.await {
        Ok(()) => {
            tracing::info!(id, to = uri, "released the lock of a backup that did not finish")
        }
        Err(e) => {
            tracing::warn!(id, to = uri, error = %e, "releasing the lock of an unfinished backup")
        }
    }
}

#[async_trait]
impl Backups for BackupService {
    async fn backup(&self, request: BackupRequest, issuer: &str) -> Result<BackupRow, QueryError> {
        let service = self.service.clone();
        let issuer = issuer.to_string();
        tokio::spawn(async move { service.run(request, &issuer).await })
            .await
            .map_err(|e| QueryError::Internal(format!("the backup's task: {e}")))?
    }

    async fn list(&self) -> Result<Vec<BackupRow>, QueryError> {
        self.service.list().await
    }

    async fn journal(
        &self,
        intent: &ebb_query::sql::shard::Intent,
    ) -> Result<ebb_query::backups::Journaled, QueryError> {
        let journaled = self.service.registry.journal(intent).await?;
        self.service.wake.notify_one();
        Ok(journaled)
    }

    async fn deletion_copies(&self) -> Vec<ebb_query::deletions::ReplicaDeletion> {
        self.service.deletion_copies().await
    }

    async fn journal_done(&self, id: u64) {
        self.service.registry.journal_done(id).await;
        self.service.wake.notify_one();
    }
}

impl Service {
    async fn list(&self) -> Result<Vec<BackupRow>, QueryError> {
        let runs: Vec<Arc<Run>> = self.runs.lock().iter().cloned().collect();
        let mut rows: Vec<BackupRow> = runs.iter().map(|r| r.row()).collect();
        for uri in self.registry.destinations() {
            let dest = match Destination::parse(&uri) {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!(%uri, error = %e, "a remembered backup destination");
                    continue;
                }
            };
            let listed = match BackupStore::open(&dest, ebb_backup::Throttle::none()).await {
                Ok(store) => store.list().await,
                Err(e) => Err(e),
            };
            match listed {
                Ok(sets) => {
                    for l in sets {
                        // A run this server remembers is shown as it ran.
                        if runs.iter().any(|r| r.id == l.id && r.destination == uri) {
                            continue;
                        }
                        rows.push(match l.set {
                            Ok(set) => set_row(&set, &uri),
                            Err(e) => unreadable(&l.id, &uri, e.to_string()),
                        });
                    }
                }
                Err(e) => rows.push(unreadable("", &uri, e.to_string())),
            }
        }
        rows.sort_by(|a, b| (a.started_ms, &a.id).cmp(&(b.started_ms, &b.id)));
        Ok(rows)
    }
}

/// A row for a set (or a whole destination, `id` empty) that cannot be read.
fn unreadable(id: &str, destination: &str, why: String) -> BackupRow {
    BackupRow {
        id: id.to_string(),
        destination: destination.to_string(),
        state: BackupState::Failed,
        kind: String::new(),
        started_ms: 0,
        finished_ms: None,
        parts: 0,
        files: 0,
        files_done: 0,
        bytes: 0,
        bytes_done: 0,
        bytes_copied: 0,
        generation: None,
        error: Some(why),
    }
}
