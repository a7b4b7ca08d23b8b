//! Backups of this server: `BACKUP TO '<uri>'` (and `ebb backup create`, which runs it) takes
//! a consistent copy of every shard's engine and stores it as a set at the destination (see
//! the `ebb-backup` crate for the store, manifests and transfers).
//!
//! A backup runs one at a time per server. Each part is an engine checkpoint taken after the
//! backup started (so every write and delete acknowledged before is in it), hard-linked into
//! `<data dir>/backup/staging/` while it uploads and removed after. A `running/<id>` lease at
//! the destination keeps a concurrent prune from removing objects no manifest names yet; the
//! manifest is written last, so a backup that fails or is killed leaves no set.
//!
//! The destinations this server backed up to are kept in `<data dir>/backup/destinations`,
//! so `system.backups` lists their sets after a restart.

pub mod local;
pub mod restore;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use ebb_backup::transfer::HashCache;
use ebb_backup::{BackupError, BackupSet, BackupStore, Destination, Part, Progress, SetKind};
use ebb_query::backups::{BackupRequest, BackupRow, BackupState, Backups};
use ebb_query::QueryError;
use parking_lot::Mutex;

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
}

/// One backup as it runs: its store and what it has uploaded.
#[derive(Debug)]
pub struct Job {
    /// The set's id.
    pub set_id: String,
    /// The destination's store.
    pub store: BackupStore,
    /// Hashes of the objects at the destination (kept current as objects go up).
    pub stored: std::collections::HashSet<String>,
    /// File hashes known from earlier backups.
    pub cache: HashCache,
    /// Its progress.
    pub progress: Arc<Progress>,
    /// Where checkpoints wait while they upload.
    pub staging: PathBuf,
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
    parts: Arc<dyn PartTaker>,
    /// `<data dir>/backup`.
    dir: PathBuf,
    /// Bytes per second a backup may transfer by default.
    rate: Option<u64>,
    runs: Mutex<VecDeque<Arc<Run>>>,
    /// Held while a backup runs (one at a time).
    busy: tokio::sync::Mutex<()>,
}

impl BackupService {
    /// Backups of what `parts` takes, kept under `data_dir/backup`, at `rate` bytes per
    /// second by default. Removes what a backup killed midway left in staging.
    /// A backup killed midway (the server stopped) leaves its lease at the destination, named
    /// in `<data dir>/backup/running`: it is released in the background.
    pub fn new(parts: Arc<dyn PartTaker>, data_dir: &Path, rate: Option<u64>) -> BackupService {
        let dir = data_dir.join("backup");
        let _ = std::fs::remove_dir_all(dir.join("staging"));
        if let Ok(text) = std::fs::read_to_string(dir.join("running")) {
            let running = dir.join("running");
            tokio::spawn(async move {
                release_left_lease(&text).await;
                let _ = tokio::fs::remove_file(running).await;
            });
        }
        BackupService {
            parts,
            dir,
            rate,
            runs: Mutex::new(VecDeque::new()),
            busy: tokio::sync::Mutex::new(()),
        }
    }

    fn destinations_file(&self) -> PathBuf {
        self.dir.join("destinations")
    }

    /// The destinations backed up to, as their URIs (which hold no secrets).
    fn destinations(&self) -> Vec<String> {
        std::fs::read_to_string(self.destinations_file())
            .map(|t| t.lines().filter(|l| !l.trim().is_empty()).map(str::to_string).collect())
            .unwrap_or_default()
    }

    fn remember_destination(&self, dest: &Destination) -> Result<(), BackupError> {
        let uri = dest.to_string();
        let mut all = self.destinations();
        if all.contains(&uri) {
            return Ok(());
        }
        all.push(uri);
        let path = self.destinations_file();
        let tmp = path.with_extension("tmp");
        let io = |source| BackupError::Io { path: path.clone(), source };
        std::fs::create_dir_all(&self.dir).map_err(io)?;
        std::fs::write(&tmp, all.join("\n") + "\n").map_err(io)?;
        std::fs::rename(&tmp, &path).map_err(io)?;
        Ok(())
    }

    /// Runs a backup to `request.to`.
    async fn run(&self, request: BackupRequest, issuer: &str) -> Result<BackupRow, QueryError> {
        let dest = Destination::parse(&request.to)?;
        let Ok(_busy) = self.busy.try_lock() else {
            let running = self.runs.lock().iter().find(|r| r.outcome.lock().is_none()).cloned();
            return Err(QueryError::Unavailable(format!(
                "a backup is already running{} (one at a time)",
                running.map(|r| format!(": {} to {}", r.id, r.destination)).unwrap_or_default()
            )));
        };
        let started_ms = ebb_query::now_ms();
        let run = Arc::new(Run {
            id: ebb_backup::set::new_set_id(started_ms),
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
        let result = self.take(&run, &dest, self.rate).await;
        let staging = self.dir.join("staging");
        let _ = tokio::fs::remove_dir_all(&staging).await;
        match result {
            Ok(set) => {
                let p = run.progress.snapshot();
                tracing::info!(
                    id = %run.id, files = p.files_total, bytes = p.bytes_total,
                    copied = p.bytes_copied, "backup done"
                );
                *run.outcome.lock() = Some(Outcome::Done(Box::new(set)));
                Ok(run.row())
            }
            Err(e) => {
                tracing::warn!(id = %run.id, error = %e, "backup failed");
                *run.outcome.lock() = Some(Outcome::Failed(e.to_string()));
                Err(e.into())
            }
        }
    }

    /// Takes every part of `run` and writes its set.
    async fn take(
        &self,
        run: &Run,
        dest: &Destination,
        rate: Option<u64>,
    ) -> Result<BackupSet, BackupError> {
        let store = BackupStore::create(dest, ebb_backup::Throttle::new(rate)).await?;
        self.remember_destination(dest)?;
        let lease = store.lease(&run.id, run.started_ms).await?;
        let running = self.dir.join("running");
        std::fs::write(&running, format!("{}\n{dest}\n", run.id))
            .map_err(|source| BackupError::Io { path: running.clone(), source })?;
        let cache_path = self.dir.join("hashes");
        let mut job = Job {
            set_id: run.id.clone(),
            stored: store.object_hashes().await?,
            store,
            cache: HashCache::load(&cache_path),
            progress: run.progress.clone(),
            staging: self.dir.join("staging"),
        };
        let taken = async {
            let shards = self.parts.shards().await.map_err(|e| BackupError::Source(Box::new(e)))?;
            let mut parts = Vec::with_capacity(shards.len());
            for shard in shards {
                parts.push(self.parts.take(shard, &mut job).await?);
            }
            let set = BackupSet {
                format: ebb_backup::set::FORMAT,
                id: run.id.clone(),
                kind: self.parts.kind(),
                started_ms: run.started_ms,
                finished_ms: ebb_query::now_ms(),
                generation: 1,
                server_version: env!("CARGO_PKG_VERSION").to_string(),
                parts,
            };
            job.store.put_set(&set).await?;
            Ok::<_, BackupError>(set)
        };
        let set = taken.await;
        // The hashes learned stay useful whether or not the set was written.
        if let Err(e) = job.cache.save(&cache_path) {
            tracing::warn!(error = %e, "keeping the backup hash cache");
        }
        job.store.release(&lease).await;
        let _ = std::fs::remove_file(&running);
        set
    }
}

/// Releases the lease a backup killed midway left (`text` is its `running` file: the set id,
/// then the destination).
async fn release_left_lease(text: &str) {
    let mut lines = text.lines();
    let (Some(id), Some(uri)) = (lines.next(), lines.next()) else { return };
    let released = async {
        let store =
            BackupStore::open(&Destination::parse(uri)?, ebb_backup::Throttle::none()).await?;
        store.release(&store.lease_of(id)).await;
        Ok::<_, BackupError>(())
    };
    match released.await {
        Ok(()) => {
            tracing::info!(id, to = uri, "released the lease of a backup that did not finish")
        }
        Err(e) => {
            tracing::warn!(id, to = uri, error = %e, "releasing the lease of an unfinished backup")
        }
    }
}

#[async_trait]
impl Backups for BackupService {
    async fn backup(&self, request: BackupRequest, issuer: &str) -> Result<BackupRow, QueryError> {
        self.run(request, issuer).await
    }

    async fn list(&self) -> Result<Vec<BackupRow>, QueryError> {
        let runs: Vec<Arc<Run>> = self.runs.lock().iter().cloned().collect();
        let mut rows: Vec<BackupRow> = runs.iter().map(|r| r.row()).collect();
        for uri in self.destinations() {
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
