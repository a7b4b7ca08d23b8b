//! A shard replica on disk: the engine (in a generation directory, replaced whole when a
//! snapshot is installed), its snapshots, and how log entries are applied to it.
//!
//! Layout of a replica's root directory:
//! - `ENGINE`: the current engine generation;
//! - `engine-{gen:08}/`: the engine;
//! - `snapshots/{id}/`: the current snapshot (and the one before it, which may still be
//!   streaming to a follower);
//! - `incoming/{id}/`: a snapshot being received.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ebb_storage::{BatchDecodeError, BatchOp, Engine, Options, WriteBatch};
use openraft::{EntryPayload, LogId, StoredMembership};
use parking_lot::{Mutex, RwLock};

use super::applied::{self, Membership, MAX_BATCH_OPS, RESERVED_PREFIX};
use super::snapshot::{sync_dir, write_atomic, Descriptor, Meta, ShardSnapshot};
use crate::error::ReplicaError;
use crate::types::{Command, CompressedBatchError, NodeId, Response, TypeConfig};

/// Applies a replica's committed write batches: the one path that writes a change to the engine
/// and installs what it changes in state derived from the engine (a catalog), alike on every
/// replica. A replica without one writes batches to its engine as they are.
pub trait Applier: Send + Sync {
    /// Writes `batch` (the applied-state keys included) to `engine` at sequence number `seq`
    /// and installs what it changes. An error every replica meets alike
    /// ([`ebb_storage::Error::InvalidArgument`], [`ebb_storage::Error::BeyondRetention`]) must
    /// leave the derived state as it was: the entry is then applied as a no-op.
    fn apply(
        &self,
        engine: &Arc<Engine>,
        batch: &WriteBatch,
        seq: u64,
    ) -> Result<(), ebb_storage::Error>;
    /// A snapshot replaced the engine with `engine`.
    fn replaced(&self, engine: &Arc<Engine>);
    /// Removes from `batch` what must not be applied: the writes `engine` records as applied
    /// already (an earlier attempt at them committed first). Must decide alike on every
    /// replica: from `batch` and `engine` only.
    fn admit(
        &self,
        _engine: &Arc<Engine>,
        _batch: &mut WriteBatch,
    ) -> Result<Admitted, ebb_storage::Error> {
        Ok(Admitted::All)
    }
}

/// What [`Applier::admit`] let through of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Admitted {
    /// All of it.
    All,
    /// Some of it: other parts had been applied already.
    Part,
    /// None of it: the entry is applied as a no-op and answered as a duplicate.
    Nothing,
}

/// How many snapshots a replica keeps: the current one and the one before it.
const KEEP_SNAPSHOTS: usize = 2;

/// One shard replica: the engine the Raft state machine applies entries to.
pub struct Replica {
    pub(super) root: PathBuf,
    opts: Options,
    engine: RwLock<Arc<Engine>>,
    pub(super) generation: Mutex<u64>,
    /// Serializes applying entries, building snapshots and installing them.
    apply_lock: Mutex<()>,
    pub(super) current: Mutex<Option<(Descriptor, ShardSnapshot)>>,
    applier: RwLock<Option<Arc<dyn Applier>>>,
    /// Held while the log watermark is recomputed and while files are copied into a snapshot
    /// (which lowers it first), so neither undoes the other.
    pub(super) watermark_lock: Mutex<()>,
}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica").field("root", &self.root).finish()
    }
}

impl Replica {
    /// Opens (or creates) the replica in `root`, removing what a crash left half done.
    pub fn open(root: impl AsRef<Path>, opts: Options) -> Result<Arc<Replica>, ReplicaError> {
        let root = root.as_ref().to_path_buf();
        // The Raft log is the write-ahead log: entries above the engine's persisted sequence
        // number are applied again from it after a crash (openraft re-applies what the engine's
        // applied state does not cover). The log (and snapshots) hold writes too: deletes wait
        // for them.
        let opts = Options { wal: false, external_log: true, ..opts };
        ebb_storage::durable::create_dir_all(&root.join("snapshots"))
            .map_err(ReplicaError::io(&root))?;
        let gen_file = root.join("ENGINE");
        let generation = match std::fs::read_to_string(&gen_file) {
            Ok(s) => s.trim().parse::<u64>().map_err(|_| ReplicaError::Io {
                path: gen_file.clone(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, "bad generation"),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                write_atomic(&gen_file, b"1")?;
                1
            }
            Err(e) => return Err(ReplicaError::io(&gen_file)(e)),
        };
        let keep = engine_dir_name(generation);
        for e in std::fs::read_dir(&root).map_err(ReplicaError::io(&root))? {
            let e = e.map_err(ReplicaError::io(&root))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if (name.starts_with("engine-") && name != keep) || name == "incoming" {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        let engine = Engine::open(root.join(&keep), opts.clone())?;
        let current = newest_snapshot(&root.join("snapshots"))?;
        Ok(Arc::new(Replica {
            root,
            opts,
            engine: RwLock::new(Arc::new(engine)),
            generation: Mutex::new(generation),
            apply_lock: Mutex::new(()),
            current: Mutex::new(current),
            applier: RwLock::new(None),
            watermark_lock: Mutex::new(()),
        }))
    }

    /// The replica's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The options its engine runs with.
    pub(super) fn engine_options(&self) -> &Options {
        &self.opts
    }

    /// The engine (a snapshot install replaces it; hold the `Arc` only for one operation).
    pub fn engine(&self) -> Arc<Engine> {
        self.engine.read().clone()
    }

    /// Sets what applies committed write batches (before the group applies anything).
    pub fn set_applier(&self, applier: Arc<dyn Applier>) {
        *self.applier.write() = Some(applier);
    }

    /// The last applied log id and the last membership.
    pub fn applied_state(&self) -> Result<(Option<LogId<NodeId>>, Membership), ReplicaError> {
        applied::read(&self.engine())
    }

    /// The current snapshot, if any.
    pub fn current_snapshot(&self) -> Option<(Descriptor, ShardSnapshot)> {
        self.current.lock().clone()
    }

    /// A fresh directory to receive snapshot `id` into, of this receive alone (a leader may
    /// stream the same snapshot twice at once, after a timeout). Until it is installed or
    /// removed, the engine marks no delete persisted (the leader's files may hold anything).
    pub fn incoming_dir(&self, id: &str) -> Result<PathBuf, ReplicaError> {
        {
            let _w = self.watermark_lock.lock();
            self.engine().narrow_log_clearance(&ebb_storage::LogClearance::below(0));
        }
        let dir = self.root.join("incoming").join(format!("{}.{}", sanitize(id), unique_suffix()));
        let _ = std::fs::remove_dir_all(&dir);
        ebb_storage::durable::create_dir_all(&dir).map_err(ReplicaError::io(&dir))?;
        Ok(dir)
    }

    /// Applies committed entries in order: entry `i` at engine sequence numbers from
    /// `entry_seq(i)`, with the applied state in the same engine batch. An entry the engine
    /// refuses (a malformed or oversized batch, a write beyond retention) is applied as a no-op
    /// on every replica alike and answered with an error.
    pub fn apply(
        &self,
        entries: impl IntoIterator<Item = openraft::Entry<TypeConfig>>,
    ) -> Result<Vec<Response>, ReplicaError> {
        let _g = self.apply_lock.lock();
        let engine = self.engine();
        let applier = self.applier.read().clone();
        let mut replies = Vec::new();
        for entry in entries {
            let seq = applied::entry_seq(entry.log_id.index)?;
            let mut membership = None;
            let mut reply = Response { seq, error: None, duplicate: false };
            let mut batch = match entry.payload {
                EntryPayload::Blank => WriteBatch::new(),
                EntryPayload::Membership(m) => {
                    membership = Some(StoredMembership::new(Some(entry.log_id), m));
                    WriteBatch::new()
                }
                EntryPayload::Normal(cmd @ (Command::Batch(_) | Command::Lz4Batch { .. })) => {
                    let decoded = match cmd.batch_bytes() {
                        Some(Ok(bytes)) => decode_batch(bytes),
                        Some(Err(e)) => Err(e.into()),
                        None => Err(Refused::Malformed), // both commands carry a batch
                    };
                    match decoded {
                        Ok(b) => b,
                        Err(why) => {
                            reply.error = Some(why.unless_newer(entry.log_id.index)?.to_string());
                            WriteBatch::new()
                        }
                    }
                }
                EntryPayload::Normal(Command::Split { child, batch, child_batch }) => {
                    let decoded = decode_batch(batch.into())
                        .and_then(|b| Ok((b, decode_batch(child_batch.into())?)));
                    match decoded {
                        Err(why) => {
                            reply.error = Some(why.unless_newer(entry.log_id.index)?.to_string());
                            WriteBatch::new()
                        }
                        Ok(_) if engine.get(&super::split::split_key(child), None)?.is_some() => {
                            reply.duplicate = true;
                            WriteBatch::new()
                        }
                        Ok((mut parent, child_batch)) => {
                            // The fork is this node's head start: a child replica without it
                            // is sent the child's state by the child's leader. So a failure
                            // here must not stop the parent.
                            let log_id = &entry.log_id;
                            if let Err(e) =
                                super::split::fork(self, &engine, child, &child_batch, log_id, seq)
                            {
                                tracing::error!(child, %e, "forking a split's child");
                            }
                            parent.put(super::split::split_key(child), Vec::new());
                            parent
                        }
                    }
                }
                EntryPayload::Normal(Command::SetRetention { prefix, retention_ms }) => {
                    let retention = retention_ms.map(Duration::from_millis);
                    match engine.set_retention(prefix, retention) {
                        Ok(()) => {}
                        Err(e) if deterministic(&e) => reply.error = Some(e.to_string()),
                        Err(e) => return Err(e.into()),
                    }
                    WriteBatch::new()
                }
            };
            if let Some(a) = &applier {
                if a.admit(&engine, &mut batch)? == Admitted::Nothing {
                    reply.duplicate = true;
                    batch = WriteBatch::new();
                }
            }
            applied::record(&mut batch, &entry.log_id, membership.as_ref())?;
            let written = match &applier {
                Some(a) => a.apply(&engine, &batch, seq),
                None => engine.write(&batch, seq),
            };
            if let Err(e) = written {
                if !deterministic(&e) {
                    return Err(e.into());
                }
                reply.error = Some(e.to_string());
                batch = WriteBatch::new();
                applied::record(&mut batch, &entry.log_id, membership.as_ref())?;
                engine.write(&batch, seq)?;
            }
            replies.push(reply);
        }
        Ok(replies)
    }

    /// Checkpoints the engine into the new directory `target` (a backup's copy): its sequence
    /// number and the last log entry it holds, as (term, index). Taken under the apply lock,
    /// so the two match.
    pub fn checkpoint(&self, target: &Path) -> Result<(u64, Option<(u64, u64)>), ReplicaError> {
        let _g = self.apply_lock.lock();
        let engine = self.engine();
        let (last, _) = applied::read(&engine)?;
        let seq = engine.checkpoint(target)?;
        Ok((seq, last.map(|l| (l.leader_id.term, l.index))))
    }

    /// Builds a snapshot of everything applied so far and makes it the current one.
    pub fn build_snapshot(&self) -> Result<(Descriptor, ShardSnapshot), ReplicaError> {
        let snaps = self.root.join("snapshots");
        let (tmp, last_log_id, last_membership, seq) = {
            let _g = self.apply_lock.lock();
            let engine = self.engine();
            let (last, membership) = applied::read(&engine)?;
            let (term, index) = last.map(|l| (l.leader_id.term, l.index)).unwrap_or((0, 0));
            let id = format!("{index:020}-{term}-{}", unique_suffix());
            let tmp = snaps.join(format!("{id}.tmp"));
            let _ = std::fs::remove_dir_all(&tmp);
            // Taken first: what the files the checkpoint links are certainly clear of.
            let _w = self.watermark_lock.lock();
            let clear = engine.engine_clearance()?;
            engine.narrow_log_clearance(&clear);
            let seq = engine.checkpoint(&tmp)?;
            super::erasure::write_clearance(&tmp, &clear)?;
            (tmp, last, membership, seq)
        };
        let id = tmp.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let meta = Meta { last_log_id, last_membership, snapshot_id: id.clone() };
        ShardSnapshot::seal(&tmp, meta, seq)?;
        let dir = snaps.join(&id);
        std::fs::rename(&tmp, &dir).map_err(ReplicaError::io(&dir))?;
        sync_dir(&snaps)?;
        let snap = ShardSnapshot::at(dir);
        let d = snap.descriptor()?;
        self.make_current(d.clone(), snap.clone());
        Ok((d, snap))
    }

    /// Replaces the engine with the snapshot's after validating it, and makes the snapshot the
    /// current one.
    pub fn install(&self, snapshot: &ShardSnapshot, meta: &Meta) -> Result<(), ReplicaError> {
        let d = snapshot.validate()?;
        if d.meta.last_log_id != meta.last_log_id {
            return Err(ReplicaError::invalid(
                snapshot.dir(),
                format!("holds {:?}, expected {:?}", d.meta.last_log_id, meta.last_log_id),
            ));
        }
        // One install at a time, and none while entries are applied: two receives of the same
        // snapshot must not replace each other's files.
        let _g = self.apply_lock.lock();
        let own = self.root.join("snapshots").join(sanitize(&d.meta.snapshot_id));
        let own = if snapshot.dir() == own {
            snapshot.clone()
        } else if snapshot.dir().starts_with(self.root.join("incoming")) {
            let _ = std::fs::remove_dir_all(&own);
            std::fs::rename(snapshot.dir(), &own).map_err(ReplicaError::io(&own))?;
            sync_dir(&self.root.join("snapshots"))?;
            ShardSnapshot::at(own)
        } else {
            let _ = std::fs::remove_dir_all(&own);
            snapshot.copy_to(&own)?
        };
        let mut gen = self.generation.lock();
        let next = *gen + 1;
        let dir = self.root.join(engine_dir_name(next));
        let _ = std::fs::remove_dir_all(&dir);
        own.materialize(&d, &dir)?;
        let engine = Arc::new(Engine::open(&dir, self.opts.clone())?);
        let state = applied::read(&engine)?;
        if state != (meta.last_log_id, meta.last_membership.clone()) {
            drop(engine);
            let _ = std::fs::remove_dir_all(&dir);
            return Err(ReplicaError::invalid(
                own.dir(),
                format!("engine holds applied state {state:?}, meta says {meta:?}"),
            ));
        }
        write_atomic(&self.root.join("ENGINE"), next.to_string().as_bytes())?;
        let old = std::mem::replace(&mut *self.engine.write(), engine.clone());
        let old_dir = self.root.join(engine_dir_name(*gen));
        *gen = next;
        retire(old, old_dir);
        self.make_current(d, own);
        if let Some(a) = self.applier.read().clone() {
            a.replaced(&engine);
        }
        Ok(())
    }

    fn make_current(&self, d: Descriptor, snap: ShardSnapshot) {
        let mut cur = self.current.lock();
        if cur.as_ref().is_none_or(|(c, _)| c.meta.last_log_id <= d.meta.last_log_id) {
            *cur = Some((d, snap));
        }
        let keep = cur.as_ref().map(|(_, s)| s.dir().to_path_buf());
        drop(cur);
        prune_snapshots(&self.root.join("snapshots"), keep.as_deref());
    }
}

pub(super) fn engine_dir_name(generation: u64) -> String {
    format!("engine-{generation:08}")
}

/// Snapshot ids come from the leader: keep them to one plain path component.
fn sanitize(id: &str) -> String {
    let s: String = id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
        .take(128)
        .collect();
    if s.is_empty() {
        "snapshot".into()
    } else {
        s
    }
}

fn unique_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}

/// The valid snapshot with the highest last log id among `dir`'s; removes leftovers of
/// interrupted builds and snapshots that fail to read.
fn newest_snapshot(dir: &Path) -> Result<Option<(Descriptor, ShardSnapshot)>, ReplicaError> {
    let mut best: Option<(Descriptor, ShardSnapshot)> = None;
    for e in std::fs::read_dir(dir).map_err(ReplicaError::io(dir))? {
        let e = e.map_err(ReplicaError::io(dir))?;
        let snap = ShardSnapshot::at(e.path());
        match snap.descriptor() {
            Ok(d) if !e.file_name().to_string_lossy().ends_with(".tmp") => {
                if best.as_ref().is_none_or(|(b, _)| b.meta.last_log_id <= d.meta.last_log_id) {
                    best = Some((d, snap));
                }
            }
            _ => {
                tracing::warn!(dir = %e.path().display(), "removing an incomplete snapshot");
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    Ok(best)
}

/// Removes all snapshots but the newest [`KEEP_SNAPSHOTS`] and `keep`.
fn prune_snapshots(dir: &Path, keep: Option<&Path>) {
    prune_snapshots_to(dir, keep, KEEP_SNAPSHOTS);
}

/// Removes all snapshots but the newest `n` and `keep`.
pub(super) fn prune_snapshots_to(dir: &Path, keep: Option<&Path>, n_keep: usize) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    let mut names: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| !p.to_string_lossy().ends_with(".tmp"))
        .collect();
    names.sort();
    let n = names.len();
    for p in names.into_iter().take(n.saturating_sub(n_keep)) {
        if Some(p.as_path()) != keep {
            let _ = std::fs::remove_dir_all(&p);
        }
    }
}

/// Closes a replaced engine once nobody reads it any more, and removes its directory.
fn retire(engine: Arc<Engine>, dir: PathBuf) {
    let spawned = std::thread::Builder::new().name("ebb-retire-engine".into()).spawn(move || {
        let mut engine = engine;
        for _ in 0..6000 {
            match Arc::try_unwrap(engine) {
                Ok(e) => {
                    if let Err(err) = e.close() {
                        tracing::warn!(%err, "closing a replaced engine");
                    }
                    let _ = std::fs::remove_dir_all(&dir);
                    return;
                }
                Err(e) => engine = e,
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        tracing::warn!(dir = %dir.display(), "a replaced engine is still in use; left on disk");
    });
    if let Err(err) = spawned {
        tracing::warn!(%err, "could not start the engine retirement thread");
    }
}

/// Why a replicated batch is applied as a no-op (every replica refuses it alike).
#[derive(Debug, thiserror::Error)]
enum Refused {
    /// A compressed batch that does not expand.
    #[error(transparent)]
    Compressed(#[from] CompressedBatchError),
    /// Bytes that do not decode as a write batch.
    #[error("malformed write batch")]
    Malformed,
    /// A batch in a format a newer build writes. Never applied as a no-op: replicas of the newer
    /// build apply it, so this replica stops instead of diverging from them.
    #[error(transparent)]
    Newer(BatchDecodeError),
    /// More operations than a batch may hold.
    #[error("write batch of {ops} operations exceeds {MAX_BATCH_OPS}")]
    TooManyOps {
        /// Operations in the batch.
        ops: usize,
    },
    /// An operation on the keys the replica keeps its replication state under.
    #[error("write batch touches the reserved replication keys")]
    Reserved,
}

impl Refused {
    /// The refusal, to be answered on every replica alike; or, for a batch of a newer format,
    /// the error that stops this replica at log `index`.
    fn unless_newer(self, index: u64) -> Result<Refused, ReplicaError> {
        match self {
            Refused::Newer(source) => Err(ReplicaError::NewerFormat { index, source }),
            why => Ok(why),
        }
    }
}

/// Decodes a replicated batch and checks it may be applied.
fn decode_batch(bytes: std::borrow::Cow<'_, [u8]>) -> Result<WriteBatch, Refused> {
    let b = WriteBatch::decode_bytes(&bytes).map_err(|e| match e.is_newer_format() {
        true => Refused::Newer(e),
        false => Refused::Malformed,
    })?;
    if b.len() > MAX_BATCH_OPS {
        return Err(Refused::TooManyOps { ops: b.len() });
    }
    let reserved = |k: &[u8]| k.starts_with(RESERVED_PREFIX);
    let touches = b.ops().iter().any(|op| match op {
        BatchOp::Put { key, .. } | BatchOp::Delete { key } => reserved(key),
        BatchOp::DeleteRange { lo, hi } | BatchOp::DeleteTimeRange { lo, hi, .. } => {
            reserved(lo) || hi.is_empty() || hi.as_ref() > RESERVED_PREFIX
        }
    });
    if touches {
        return Err(Refused::Reserved);
    }
    Ok(b)
}

/// Errors every replica meets alike for the same entry (so applying it as a no-op keeps them
/// identical), as opposed to local failures.
fn deterministic(e: &ebb_storage::Error) -> bool {
    matches!(e, ebb_storage::Error::InvalidArgument(_) | ebb_storage::Error::BeyondRetention { .. })
}
