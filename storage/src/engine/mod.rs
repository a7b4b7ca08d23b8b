//! The engine of one shard replica.

mod account;
mod audit;
mod background;
mod checkpoint;
mod clearance;
mod compact;
mod delete_view;
mod deletes;
mod flush;
mod health;
mod history;
mod layout;
mod open;
mod ranges;
mod read;
mod reduce;
mod retention;
mod stats;
mod summarized;
mod tombstones;
mod windows;
mod write;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Mutex, RwLock};

pub use clearance::LogClearance;
pub use deletes::{DeletionCheck, RemainingEntry};
pub use history::CompactionRecord;
pub use layout::{Layout, LayoutReason};
pub(crate) use read::RangeCheck;
pub use stats::{EngineStats, LevelStats};
pub use write::Staged;

use crate::cache::PageCache;
use crate::memtable::Memtable;
use crate::snapshot::{Snapshot, SnapshotList};
use crate::version::{Manifest, Opened, Version, VersionEdit};
use crate::wal::Wal;
use crate::{Error, Options, Result};

/// What readers see: the active memtable, sealed memtables (newest first) and the live files.
#[derive(Debug)]
pub(crate) struct SuperVersion {
    pub mem: Arc<Memtable>,
    pub imms: Vec<Arc<Memtable>>,
    pub version: Arc<Version>,
}

/// State guarded by the write lock.
#[derive(Debug)]
struct WriterState {
    wal: Option<Wal>,
    last_seq: u64,
}

/// State guarded by the manifest lock. Version changes are committed and installed under it, so
/// the in-memory order of versions matches the manifest.
#[derive(Debug)]
struct MetaState {
    manifest: Manifest,
    persisted_seq: u64,
    log_number: u64,
    /// Retention rules: key prefix to retention in ms.
    retention: std::collections::BTreeMap<Vec<u8>, u64>,
}

/// Counters for observability.
#[derive(Debug, Default)]
struct Counters {
    flushes: AtomicU64,
    compactions: AtomicU64,
    trivial_moves: AtomicU64,
    bytes_flushed: AtomicU64,
    bytes_compacted: AtomicU64,
    write_stalls: AtomicU64,
    wal_writes: AtomicU64,
    wal_syncs: AtomicU64,
    range_checks: AtomicU64,
    range_checks_eve_skipped: AtomicU64,
    window_pages_dropped: AtomicU64,
    window_pages_read: AtomicU64,
    window_pages_rewritten: AtomicU64,
    window_bytes_read: AtomicU64,
    window_bytes_written: AtomicU64,
    range_filter_probes: AtomicU64,
    pub(crate) summarized_pages: AtomicU64,
    pub(crate) summarized_runs: AtomicU64,
    range_filter_skips: AtomicU64,
    global_filter_probes: AtomicU64,
    global_filter_skips: AtomicU64,
}

/// The engine's state, shared by its handle and its background threads.
///
/// It is in parts that each own their locks: what readers see (`sv`, one snapshot swapped
/// under one lock), the write path (`writer`, `wal_synced`), the manifest (`meta`), and then
/// [`Files`], [`deletes::Deletes`], [`background::Background`], [`health::Health`] and
/// [`Tuning`]. Locks nest in one direction only: a flush or compaction holds its
/// `background` lock while it takes the deletes' and files' locks and `meta`; `meta` is held
/// while a version is committed and installed in `sv`.
pub(crate) struct Inner {
    dir: PathBuf,
    opts: Options,
    cache: Arc<PageCache>,
    sv: RwLock<Arc<SuperVersion>>,
    writer: Mutex<WriterState>,
    /// How far the WAL is known fsynced; held while a group commit's fsync runs.
    wal_synced: Mutex<crate::wal::WalPos>,
    meta: Mutex<MetaState>,
    visible_seq: AtomicU64,
    snapshots: Arc<SnapshotList>,
    counters: Counters,
    files: Files,
    deletes: deletes::Deletes,
    background: background::Background,
    health: health::Health,
    tuning: Tuning,
    _lock_file: File,
}

/// File numbers, and files no version holds any more.
#[derive(Debug)]
struct Files {
    next_id: AtomicU64,
    /// Obsolete tables, until their last reader drops them (they still hold data).
    retired: Mutex<Vec<std::sync::Weak<crate::sst::Table>>>,
}

/// What the engine learns from its workload.
#[derive(Debug)]
struct Tuning {
    /// Operations counted for the KiWi+ layout, and the layout they give.
    layout: layout::LayoutState,
    /// Ranges recent scans merged (RangeReduce).
    reduce_hints: reduce::Hints,
    /// Memtable bytes last reported to `Options::write_budget`.
    budget_held: AtomicUsize,
}

/// An LSM storage engine instance over one directory.
///
/// Writes carry caller-supplied, strictly increasing sequence numbers. Reads see the newest version
/// at or below their snapshot. Background threads flush memtables and run compactions.
pub struct Engine {
    inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    closed: AtomicBool,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("dir", &self.inner.dir).finish()
    }
}

impl Engine {
    /// Opens (or creates) the engine in `dir`, recovering from any crash.
    pub fn open(dir: impl AsRef<Path>, opts: Options) -> Result<Engine> {
        let inner = Arc::new(open::open(dir.as_ref(), opts)?);
        let threads =
            if inner.opts.background_threads { background::spawn(&inner) } else { Vec::new() };
        Ok(Engine { inner, threads: Mutex::new(threads), closed: AtomicBool::new(false) })
    }

    /// The engine's directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The options the engine runs with.
    pub fn options(&self) -> &Options {
        &self.inner.opts
    }

    /// A snapshot of the current state.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot::new(self.inner.visible_seq.load(Ordering::Acquire), self.inner.snapshots.clone())
    }

    /// A snapshot that also sees writes staged but not yet durable ([`Engine::stage`]): for a
    /// caller that orders its writes under its own lock and reads what it wrote before under
    /// that lock (a read-modify-write), while those writes wait for their fsync.
    pub fn staged_snapshot(&self) -> Snapshot {
        let staged = self.inner.writer.lock().last_seq;
        let seq = staged.max(self.inner.visible_seq.load(Ordering::Acquire));
        Snapshot::new(seq, self.inner.snapshots.clone())
    }

    /// Why the engine refuses writes until it is reopened (a failed fsync), if it does.
    pub fn poisoned(&self) -> Option<String> {
        self.inner.health.poison_reason()
    }

    /// Highest sequence number applied (visible to reads).
    pub fn last_seq(&self) -> u64 {
        self.inner.visible_seq.load(Ordering::Acquire)
    }

    /// Highest sequence number whose effects are durably in SSTs (recorded by the manifest). Without
    /// a WAL, writes above it are lost on a crash and must be replayed by the caller.
    pub fn persisted_seq(&self) -> u64 {
        self.inner.meta.lock().persisted_seq
    }

    /// Flushes every memtable to level 0 and waits for it.
    pub fn flush(&self) -> Result<()> {
        self.inner.check_writable()?;
        self.inner.seal_active()?;
        while self.inner.flush_oldest()? {}
        Ok(())
    }

    /// Compacts every file overlapping `[lo, hi]` (inclusive, `None` = unbounded) down to the
    /// deepest level holding data in that range, dropping deleted and shadowed entries.
    pub fn compact_range(&self, lo: Option<&[u8]>, hi: Option<&[u8]>) -> Result<()> {
        self.flush()?;
        self.inner.compact_range(lo, hi)
    }

    /// Writes a consistent copy of the engine into the new directory `target` (SSTs hard-linked,
    /// fresh manifest). Returns the sequence number the copy holds everything up to.
    pub fn checkpoint(&self, target: impl AsRef<Path>) -> Result<u64> {
        self.flush()?;
        self.inner.checkpoint(target.as_ref())
    }

    /// A consistent copy of the engine in the new directory `target` without flushing the
    /// memtables first: SSTs hard-linked, the write-ahead log segments holding what is not
    /// flushed copied (opening the copy replays them), so a backup does not wait for (or
    /// cause) a flush. Returns the last sequence number it holds. An engine without its own
    /// WAL (under an external log), or whose log of what is not flushed is over
    /// `flush_above` bytes, flushes first ([`Engine::checkpoint`]), as RocksDB's checkpoints do
    /// above their `log_size_for_flush`: a log segment is new content every time, so copying
    /// a large one costs each copy what a flush costs once.
    pub fn checkpoint_live(&self, target: impl AsRef<Path>, flush_above: u64) -> Result<u64> {
        if !self.inner.opts.wal || self.inner.unflushed_log_bytes()? > flush_above {
            return self.checkpoint(target);
        }
        self.inner.checkpoint_live(target.as_ref())
    }

    /// Every live SST with its level, level 0 first.
    pub fn files(&self) -> Vec<(usize, crate::sst::FileMeta)> {
        let sv = self.inner.current();
        let mut out = Vec::new();
        for (level, files) in sv.version.levels.iter().enumerate() {
            out.extend(files.iter().map(|t| (level, t.meta().clone())));
        }
        out
    }

    /// Statistics: files and bytes per level, memtables, cache, counters.
    pub fn stats(&self) -> EngineStats {
        self.inner.stats()
    }

    /// Waits until no flush or compaction is pending (used by tests and benchmarks).
    pub fn wait_for_background(&self) -> Result<()> {
        self.inner.wait_idle()
    }

    /// Stops background work and syncs the WAL. Without a WAL, memtables are flushed first so a
    /// clean close loses nothing.
    pub fn close(self) -> Result<()> {
        self.shutdown(true)
    }

    fn shutdown(&self, clean: bool) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        if clean && !self.inner.opts.wal && !self.inner.is_poisoned() {
            self.flush()?;
        }
        {
            self.inner.background.shut_down();
        }
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
        if clean {
            if let Some(wal) = &self.inner.writer.lock().wal {
                wal.sync()?;
            }
            if let Some(reason) = self.inner.health.poison_reason() {
                return Err(Error::Poisoned(reason));
            }
        }
        Ok(())
    }
}

impl Drop for Inner {
    /// Returns the engine's share of the write budget.
    fn drop(&mut self) {
        if let Some(b) = &self.opts.write_budget {
            b.moved(*self.tuning.budget_held.get_mut(), 0);
            b.opened(false);
        }
    }
}

impl Drop for Engine {
    /// Dropping without `close` stops background threads without flushing or syncing, which is
    /// what a crashed process leaves behind.
    fn drop(&mut self) {
        let _ = self.shutdown(false);
    }
}

impl Inner {
    pub(crate) fn current(&self) -> Arc<SuperVersion> {
        self.sv.read().clone()
    }

    /// Reports the bytes of `sv`'s memtables to the write budget, if the engine has one.
    fn report_memtables(&self, sv: &SuperVersion) {
        if let Some(b) = &self.opts.write_budget {
            let now = sv.mem.approximate_bytes()
                + sv.imms.iter().map(|m| m.approximate_bytes()).sum::<usize>();
            b.moved(self.tuning.budget_held.swap(now, Ordering::Relaxed), now);
        }
    }

    fn alloc_file_id(&self) -> u64 {
        self.files.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn is_poisoned(&self) -> bool {
        self.health.is_poisoned()
    }

    fn check_not_poisoned(&self) -> Result<()> {
        match self.health.poison_reason() {
            Some(reason) => Err(Error::Poisoned(reason)),
            None => Ok(()),
        }
    }

    fn check_writable(&self) -> Result<()> {
        self.check_not_poisoned()?;
        if self.background.is_shut_down() {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// Records a failed durability operation: the engine refuses writes until reopened.
    fn poison(&self, e: Error) -> Error {
        tracing::error!(error = %e, dir = %self.dir.display(), "engine poisoned");
        self.health.poison(&e);
        self.background.wake(false);
        e
    }

    /// A flush, compaction or commit failed before committing anything. On a full disk only
    /// the step fails (its outputs are removed; it is retried once space is freed, and writes
    /// that would wait for it are refused meanwhile); anything else poisons the engine.
    fn abort_step(&self, e: Error) -> Error {
        if !e.is_disk_full() {
            return self.poison(e);
        }
        tracing::warn!(error = %e, dir = %self.dir.display(), "disk full: flush or compaction postponed");
        self.health.set_disk_full(Some(e.to_string()));
        e
    }

    /// Why the last flush or compaction failed for lack of space, if it did (and nothing has
    /// been committed since).
    pub(crate) fn disk_full(&self) -> Option<String> {
        self.health.disk_full()
    }

    fn notify_bg(&self, compaction: bool) {
        self.background.wake(compaction);
    }

    /// Commits `edit` to the manifest and installs the resulting version. `flushed` is the memtable
    /// the edit persisted, removed from the sealed list.
    fn commit(
        &self,
        mut edit: VersionEdit,
        opened: &Opened,
        flushed: Option<&Arc<Memtable>>,
    ) -> Result<()> {
        let mut meta = self.meta.lock();
        // After a failed commit the manifest tail is unknown: nothing may be appended behind it.
        self.check_not_poisoned()?;
        edit.next_file_id = Some(self.files.next_id.load(Ordering::Relaxed));
        // The manifest names new files only once their directory entries are durable.
        if !edit.added.is_empty() || !edit.rd_added.is_empty() {
            if let Err(e) = crate::fs::sync_dir(&self.dir) {
                return Err(self.poison(e));
            }
        }
        if let Err(e) = meta.manifest.commit(&edit) {
            if meta.manifest.is_intact() {
                return Err(self.abort_step(e));
            }
            return Err(self.poison(e));
        }
        self.health.set_disk_full(None);
        if let Some(s) = edit.persisted_seq {
            meta.persisted_seq = meta.persisted_seq.max(s);
        }
        if let Some(l) = edit.log_number {
            meta.log_number = meta.log_number.max(l);
        }
        crate::version::apply_retention(&mut meta.retention, edit.retention.clone());
        {
            // Built before the state lock (it merges the global filter): the version changes
            // only here, under `meta`.
            let version = Arc::new(self.current().version.apply(&edit, opened));
            let mut sv = self.sv.write();
            let imms = match flushed {
                Some(m) => sv.imms.iter().filter(|x| !Arc::ptr_eq(x, m)).cloned().collect(),
                None => sv.imms.clone(),
            };
            *sv = Arc::new(SuperVersion { mem: sv.mem.clone(), imms, version });
            if flushed.is_some() {
                self.report_memtables(&sv);
            }
        }
        if meta.manifest.size() > MANIFEST_ROTATE_BYTES {
            // The edit is committed whatever happens here: a rotation that fails before
            // `CURRENT` names the new manifest leaves the old one in use (tried again at the
            // next commit); one that fails after it poisons.
            if let Err(e) = self.rotate_manifest(&mut meta) {
                if e.is_disk_full() && !self.is_poisoned() {
                    tracing::warn!(error = %e, "manifest rotation postponed");
                } else {
                    self.poison(e);
                }
            }
        }
        Ok(())
    }

    fn snapshot_edit(&self, meta: &MetaState, version: &Version) -> VersionEdit {
        let mut added = Vec::new();
        for (level, files) in version.levels.iter().enumerate() {
            added.extend(files.iter().map(|t| (level as u32, t.meta().clone())));
        }
        let mut rd_added = Vec::new();
        for (level, trees) in version.rd_levels.iter().enumerate() {
            rd_added.extend(trees.iter().map(|t| (level as u32, t.meta().clone())));
        }
        VersionEdit {
            added,
            deleted: Vec::new(),
            rd_added,
            rd_deleted: Vec::new(),
            next_file_id: Some(self.files.next_id.load(Ordering::Relaxed)),
            persisted_seq: Some(meta.persisted_seq),
            log_number: Some(meta.log_number),
            retention: meta.retention.iter().map(|(p, ms)| (p.clone(), Some(*ms))).collect(),
            range_delete_mode: Some(self.opts.range_delete_mode),
        }
    }

    fn rotate_manifest(&self, meta: &mut MetaState) -> Result<()> {
        let number = self.alloc_file_id();
        let edit = self.snapshot_edit(meta, &self.current().version);
        let old = meta.manifest.path();
        match Manifest::create(&self.dir, number, &edit, self.opts.fail_points.clone()) {
            Ok(m) => meta.manifest = m,
            Err(e) if e.is_disk_full() && !Manifest::is_current(&self.dir, number) => {
                let _ = std::fs::remove_file(self.dir.join(crate::fs::manifest_name(number)));
                return Err(e);
            }
            Err(e) => return Err(self.poison(e)),
        }
        let _ = std::fs::remove_file(old);
        Ok(())
    }
}

/// The manifest is rewritten as one snapshot record once it grows past this size.
const MANIFEST_ROTATE_BYTES: u64 = 16 << 20;
