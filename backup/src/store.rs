//! The backup store: content-addressed objects and set manifests at a [`Destination`].
//!
//! Layout:
//!
//! ```text
//! EBB-BACKUP                      "ebbdb backup format 1": what this destination is
//! objects/<ab>/<blake3 hex>       immutable file contents, named by their hash
//! sets/<id>/<generation:08>.set   set manifests (see crate::set)
//! locks/{shared,exclusive}/<id>   who is backing up or pruning (see crate::lock)
//! incoming/<random>               a directory destination's objects being copied in
//! ```
//!
//! An object is uploaded only if no object of its hash is stored, so a file already backed up
//! (an SST file is immutable; replicas and later sets share it) is never copied again.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as Key;
use object_store::{
    GetResult, GetResultPayload, ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::error::{AtPath, BackupError, InStore, Result};
use crate::local::{copy_hashing, Cores};
use crate::progress::Progress;
use crate::set::{self, BackupSet, FileEntry, ObjectRef};
use crate::throttle::Throttle;
use crate::uri::Destination;

/// The marker naming a destination as EbbDB's, and its layout's format.
const MARKER: &str = "EBB-BACKUP";
const MARKER_TEXT: &str = "ebbdb backup format 1\n";

/// Reads and writes files in chunks of this size (and uploads them in parts of it: S3 wants
/// every part but the last to be at least 5 MiB).
const CHUNK: usize = 8 << 20;

/// Objects are read from a directory destination, and written to files, in chunks of this size.
const READ_CHUNK: usize = 1 << 20;

/// Files hashed, uploaded, downloaded or checked at once.
pub(crate) const LANES: usize = 4;

/// The largest manifest this build reads (a set of a million files is about 150 MiB).
const MAX_MANIFEST: u64 = 256 << 20;

/// The server or cluster whose backups a destination holds (see [`BackupStore::claim`]).
const ORIGIN: &str = "ORIGIN";

/// The largest marker read.
const MAX_MARKER: u64 = 4 << 10;

/// Where a directory destination's objects are copied in, before each is renamed to its name.
const INCOMING: &str = "incoming";

/// Files above this go up in parts.
const MULTIPART_ABOVE: u64 = 16 << 20;

/// A destination's backup sets and objects.
#[derive(Debug)]
pub struct BackupStore {
    dest: Destination,
    store: Arc<dyn ObjectStore>,
    throttle: Throttle,
    /// What was written or removed at a directory destination and is not synced yet.
    pending: parking_lot::Mutex<Pending>,
}

/// Files and directories of a directory destination to sync.
#[derive(Debug, Default)]
struct Pending {
    files: std::collections::HashSet<std::path::PathBuf>,
    dirs: std::collections::HashSet<std::path::PathBuf>,
}

/// A set as listed: its manifest, or why it cannot be read.
#[derive(Debug)]
pub struct Listed {
    /// The set's id.
    pub id: String,
    /// Its newest manifest, or the error reading it.
    pub set: Result<BackupSet>,
}

impl BackupStore {
    /// The store at `dest` for a new backup (a directory is created; the marker written).
    pub async fn create(dest: &Destination, throttle: Throttle) -> Result<BackupStore> {
        let store = dest.open(true)?;
        let s = BackupStore { dest: dest.clone(), store, throttle, pending: Default::default() };
        let marker = Key::from(MARKER);
        match s.store.get(&marker).await {
            Ok(_) => s.check_marker().await?,
            Err(object_store::Error::NotFound { .. }) => {
                let body = PutPayload::from_static(MARKER_TEXT.as_bytes());
                s.store.put(&marker, body).await.doing(|| format!("writing {MARKER}"))?;
            }
            Err(source) => {
                return Err(BackupError::Store { what: format!("reading {MARKER}"), source })
            }
        }
        Ok(s)
    }

    /// The store at `dest`, which must already hold backups.
    pub async fn open(dest: &Destination, throttle: Throttle) -> Result<BackupStore> {
        let store = dest.open(false)?;
        let s = BackupStore { dest: dest.clone(), store, throttle, pending: Default::default() };
        s.check_marker().await?;
        Ok(s)
    }

    /// The server or cluster whose backups the destination holds, if one claimed it.
    pub async fn origin(&self) -> Result<Option<String>> {
        match self.get_small(&Key::from(ORIGIN), MAX_MARKER).await {
            Ok(b) => Ok(Some(String::from_utf8_lossy(&b).trim().to_string())),
            Err(BackupError::Store { source: object_store::Error::NotFound { .. }, .. }) => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Claims the destination for `origin` (a server's or cluster's backup origin), or
    /// answers [`BackupError::OtherOrigin`] if another holds it. One destination holds one
    /// origin's sets: request ids are unique only within an origin, and a delete must reach
    /// only the sets of the data it deleted from (pgBackRest refuses a repository of another
    /// database system the same way).
    pub async fn claim(&self, origin: &str) -> Result<()> {
        let key = Key::from(ORIGIN);
        for _ in 0..2 {
            match self.origin().await? {
                Some(o) if o == origin => return Ok(()),
                Some(o) => {
                    return Err(BackupError::OtherOrigin {
                        destination: self.dest.to_string(),
                        origin: o,
                    })
                }
                None => {}
            }
            let body = PutPayload::from(format!("{origin}\n").into_bytes());
            let opts = object_store::PutOptions::from(object_store::PutMode::Create);
            match self.store.put_opts(&key, body.clone(), opts).await {
                Ok(_) => return self.durable(&key, true).await,
                // Claimed meanwhile: read who did.
                Err(object_store::Error::AlreadyExists { .. }) => continue,
                // A store without conditional writes: last writer wins, then checked.
                Err(object_store::Error::NotImplemented { .. }) => {
                    self.store.put(&key, body).await.doing(|| format!("writing {ORIGIN}"))?;
                    self.durable(&key, true).await?;
                }
                Err(source) => {
                    return Err(BackupError::Store { what: format!("writing {ORIGIN}"), source })
                }
            }
        }
        match self.origin().await? {
            Some(o) if o == origin => Ok(()),
            o => Err(BackupError::OtherOrigin {
                destination: self.dest.to_string(),
                origin: o.unwrap_or_default(),
            }),
        }
    }

    /// The destination.
    pub fn destination(&self) -> &Destination {
        &self.dest
    }

    /// Makes what was just written at (or removed from) `key` durable, at a directory
    /// destination (the object store's local file system does not sync; S3 and its kind are
    /// durable once they answer): the file, then each directory from its own up to the root.
    pub(crate) async fn durable(&self, key: &Key, written: bool) -> Result<()> {
        let Destination::Dir(root) = &self.dest else { return Ok(()) };
        let (root, path) = (root.clone(), root.join(key.as_ref()));
        let synced = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            if written {
                std::fs::File::open(&path)?.sync_all()?;
            }
            let mut dir = path.parent();
            while let Some(d) = dir {
                std::fs::File::open(d)?.sync_all()?;
                if d == root {
                    break;
                }
                dir = d.parent();
            }
            Ok(())
        })
        .await
        .map_err(|e| BackupError::Source(Box::new(e)))?;
        synced.map_err(|source| BackupError::Io { path: self.dest_path(key), source })
    }

    /// Notes that what was just written at (or removed from) `key` must be made durable
    /// before a manifest names it (see [`BackupStore::sync_pending`]): objects are synced in
    /// batches, each directory once per batch, not four syncs an object.
    pub(crate) fn durable_later(&self, key: &Key, written: bool) -> Result<()> {
        let Destination::Dir(root) = &self.dest else { return Ok(()) };
        let path = root.join(key.as_ref());
        let mut p = self.pending.lock();
        if written {
            p.files.insert(path.clone());
        } else {
            p.files.remove(&path);
        }
        let mut dir = path.parent();
        while let Some(d) = dir {
            p.dirs.insert(d.to_path_buf());
            if d == root.as_path() {
                break;
            }
            dir = d.parent();
        }
        Ok(())
    }

    /// Makes durable every object written or removed since the last call, at a directory
    /// destination: the files (several at once), then their directories, deepest first.
    pub async fn sync_pending(&self) -> Result<()> {
        let Pending { files, dirs } = std::mem::take(&mut *self.pending.lock());
        if files.is_empty() && dirs.is_empty() {
            return Ok(());
        }
        let files: Vec<std::path::PathBuf> = files.into_iter().collect();
        let lanes = 4.min(files.len()).max(1);
        let mut tasks = Vec::with_capacity(lanes);
        for lane in 0..lanes {
            let mine: Vec<std::path::PathBuf> =
                files.iter().skip(lane).step_by(lanes).cloned().collect();
            tasks.push(tokio::task::spawn_blocking(
                move || -> std::result::Result<(), (std::path::PathBuf, std::io::Error)> {
                    for f in mine {
                        match std::fs::File::open(&f).and_then(|h| h.sync_all()) {
                            // Removed since (its directory is synced below).
                            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                            r => r.map_err(|e| (f.clone(), e))?,
                        }
                    }
                    Ok(())
                },
            ));
        }
        let mut first = None;
        for t in tasks {
            match t.await.map_err(|e| BackupError::Source(Box::new(e)))? {
                Ok(()) => {}
                Err((path, source)) => first = first.or(Some(BackupError::Io { path, source })),
            }
        }
        if let Some(e) = first {
            return Err(e);
        }
        let mut dirs: Vec<std::path::PathBuf> = dirs.into_iter().collect();
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        tokio::task::spawn_blocking(move || -> Result<()> {
            for d in dirs {
                std::fs::File::open(&d).and_then(|h| h.sync_all()).at(&d)?;
            }
            Ok(())
        })
        .await
        .map_err(|e| BackupError::Source(Box::new(e)))?
    }

    fn dest_path(&self, key: &Key) -> std::path::PathBuf {
        match &self.dest {
            Destination::Dir(root) => root.join(key.as_ref()),
            _ => std::path::PathBuf::from(key.as_ref()),
        }
    }

    /// The throttle every transfer (and every read of a local file to hash it) goes through.
    pub fn throttle(&self) -> &Throttle {
        &self.throttle
    }

    /// The object store itself.
    pub(crate) fn raw(&self) -> &dyn ObjectStore {
        self.store.as_ref()
    }

    /// The object store itself, shared (for work that outlives a borrow, as lock renewal).
    pub(crate) fn shared(&self) -> Arc<dyn ObjectStore> {
        self.store.clone()
    }

    /// Reads the small object `key` whole, refusing one above `max` bytes (a store is not
    /// trusted to size what a server holds in memory).
    pub(crate) async fn get_small(&self, key: &Key, max: u64) -> Result<Bytes> {
        let got = self.store.get(key).await.doing(|| format!("reading {key}"))?;
        if got.meta.size > max {
            return Err(BackupError::Manifest {
                set: String::new(),
                object: key.to_string(),
                why: format!("{} bytes; the most this build reads is {max}", got.meta.size),
            });
        }
        got.bytes().await.doing(|| format!("reading {key}"))
    }

    async fn check_marker(&self) -> Result<()> {
        let marker = Key::from(MARKER);
        let got = match self.get_small(&marker, MAX_MARKER).await {
            Ok(g) => g,
            Err(BackupError::Store { source: object_store::Error::NotFound { .. }, .. }) => {
                return Err(BackupError::Uri {
                    uri: self.dest.to_string(),
                    why: "holds no EbbDB backups".into(),
                })
            }
            Err(e) => return Err(e),
        };
        if got.as_ref() != MARKER_TEXT.as_bytes() {
            return Err(BackupError::Uri {
                uri: self.dest.to_string(),
                why: format!(
                    "its {MARKER} says {:?}; this build reads {:?}",
                    String::from_utf8_lossy(&got).trim(),
                    MARKER_TEXT.trim()
                ),
            });
        }
        Ok(())
    }

    /// The size of every stored object, by hash.
    pub async fn object_sizes(&self) -> Result<HashMap<String, u64>> {
        let prefix = Key::from("objects");
        let metas: Vec<_> = self
            .store
            .list(Some(&prefix))
            .try_collect()
            .await
            .doing(|| "listing objects".to_string())?;
        Ok(metas
            .into_iter()
            .filter_map(|m| Some((m.location.filename()?.to_string(), m.size)))
            .collect())
    }

    /// At a directory destination, copies the file at `path` in as an object, hashing it as
    /// it is copied (one read of the file, where hashing first and copying after reads it
    /// twice): into `incoming/`, then renamed to its hash's name. `expected` is the object the
    /// file is known to be, if it is (a file that changed since is refused). `None` at other
    /// destinations: the caller hashes the file, then uploads it if the store lacks it.
    pub async fn copy_in(
        &self,
        path: &Path,
        expected: Option<&ObjectRef>,
    ) -> Result<Option<ObjectRef>> {
        let Destination::Dir(root) = &self.dest else { return Ok(None) };
        let incoming = root.join(INCOMING);
        crate::transfer::private_dir(&incoming)?;
        let tmp = incoming.join(crate::crypto::new_origin()?);
        // Removed on every way out but the rename, a task cancelled midway included.
        let mut partial = Partial { path: tmp.clone(), placed: false };
        let mut object =
            copy_hashing(path, &tmp, &self.throttle, set::MAX_OBJECT, Cores::One).await;
        // Synced here, in the file's lane, so its write-back overlaps the copies of the
        // others (synced all at the end, the disk idles while files are copied, then the
        // copier while the disk writes).
        if object.is_ok() {
            let t = tmp.clone();
            let synced = tokio::task::spawn_blocking(move || {
                std::fs::File::open(&t).and_then(|f| f.sync_all()).at(&t)
            })
            .await
            .map_err(|e| BackupError::Source(Box::new(e)));
            if let Err(e) = synced.and_then(|r| r) {
                object = Err(e);
            }
        }
        let object = object?;
        let wrong = object.len > set::MAX_OBJECT || expected.is_some_and(|e| *e != object);
        let key = object.key();
        let dst = root.join(key.as_ref());
        let placed = async {
            if wrong {
                return Err(changed(path));
            }
            if let Some(fan) = dst.parent() {
                tokio::fs::create_dir_all(fan).await.at(fan)?;
            }
            // An object of the same name holds the same bytes; one of another size was cut
            // short, and is replaced.
            tokio::fs::rename(&tmp, &dst).await.at(&dst)
        };
        placed.await?;
        partial.placed = true;
        // The file is synced: only its directories are left to sync.
        self.durable_later(&key, false)?;
        Ok(Some(object))
    }

    /// Removes what copies into a directory destination left behind (a server stopped
    /// midway). Only under the exclusive lock: no backup is copying then.
    pub(crate) async fn clear_incoming(&self) -> Result<()> {
        let Destination::Dir(root) = &self.dest else { return Ok(()) };
        let incoming = root.join(INCOMING);
        match tokio::fs::remove_dir_all(&incoming).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e).at(&incoming),
            _ => Ok(()),
        }
    }

    /// Uploads `body` (read and hashed by the caller) as `object`.
    pub async fn put_bytes(&self, object: &ObjectRef, body: Vec<u8>) -> Result<()> {
        let key = object.key();
        self.throttle.take(body.len() as u64).await;
        self.store.put(&key, PutPayload::from(body)).await.doing(|| format!("uploading {key}"))?;
        self.durable_later(&key, true)
    }

    /// Uploads the file at `path` as `object` (its hash and length, computed by the caller).
    pub async fn put_file(&self, path: &Path, object: &ObjectRef) -> Result<()> {
        let key = object.key();
        let mut file = tokio::fs::File::open(path).await.at(path)?;
        let what = || format!("uploading {} as {key}", path.display());
        if object.len <= MULTIPART_ABOVE {
            let mut buf = Vec::with_capacity(object.len as usize);
            file.read_to_end(&mut buf).await.at(path)?;
            self.check_read(path, object, &buf)?;
            self.throttle.take(buf.len() as u64).await;
            self.store.put(&key, PutPayload::from(buf)).await.doing(what)?;
            return self.durable_later(&key, true);
        }
        let upload = self.store.put_multipart(&key).await.doing(what)?;
        let mut w = WriteMultipart::new_with_chunk_size(upload, CHUNK);
        let sent = async {
            let mut hasher = blake3::Hasher::new();
            let mut len = 0u64;
            loop {
                let mut buf = vec![0u8; CHUNK];
                let n = read_full(&mut file, &mut buf).await.at(path)?;
                if n == 0 {
                    break;
                }
                buf.truncate(n);
                hasher.update(&buf);
                len += n as u64;
                self.throttle.take(n as u64).await;
                w.wait_for_capacity(4).await.doing(what)?;
                w.put(Bytes::from(buf));
            }
            if len != object.len || hasher.finalize().to_hex().as_str() != object.hash {
                return Err(changed(path));
            }
            Ok(())
        };
        match sent.await {
            Ok(()) => {
                w.finish().await.doing(what)?;
                self.durable_later(&key, true)
            }
            Err(e) => {
                // An upload left open costs storage until the store's lifecycle rules end it.
                if let Err(abort) = w.abort().await {
                    tracing::warn!(object = %key, error = %abort, "aborting an upload");
                }
                Err(e)
            }
        }
    }

    fn check_read(&self, path: &Path, object: &ObjectRef, buf: &[u8]) -> Result<()> {
        if buf.len() as u64 != object.len || blake3::hash(buf).to_hex().as_str() != object.hash {
            return Err(changed(path));
        }
        Ok(())
    }

    /// Reads object `object` (file `file` of set `set`, for errors), checking its length and
    /// hash as it streams; each chunk goes to `sink`.
    pub async fn read_object(
        &self,
        set: &str,
        file: &str,
        object: &ObjectRef,
        mut sink: Sink<'_>,
    ) -> Result<()> {
        let key = object.key();
        let entry = FileEntry { name: file.to_string(), object: object.clone() };
        let missing = || self.missing(set, &entry);
        let damaged = |why: String| self.damaged(set, &entry, why);
        let got = match self.store.get(&key).await {
            Ok(g) => g,
            Err(object_store::Error::NotFound { .. }) => return Err(missing()),
            Err(source) => {
                return Err(BackupError::Store { what: format!("reading {key}"), source })
            }
        };
        let mut stream = chunks(got);
        let mut hasher = blake3::Hasher::new();
        let mut len = 0u64;
        while let Some(chunk) = stream.try_next().await.doing(|| format!("reading {key}"))? {
            self.throttle.take(chunk.len() as u64).await;
            len += chunk.len() as u64;
            if len > object.len {
                return Err(damaged(format!("longer than its {} bytes", object.len)));
            }
            hasher.update(&chunk);
            match &mut sink {
                Sink::File(out, path) => out.write_all(&chunk).await.at(path)?,
                Sink::Memory(out) => out.extend_from_slice(&chunk),
                Sink::Discard => {}
            }
        }
        if len != object.len {
            return Err(damaged(format!("{len} bytes where the set says {}", object.len)));
        }
        if hasher.finalize().to_hex().as_str() != object.hash {
            return Err(damaged("its content does not match its checksum".into()));
        }
        Ok(())
    }

    /// File `entry` of set `set` has no object.
    fn missing(&self, set: &str, entry: &FileEntry) -> BackupError {
        BackupError::Missing {
            set: set.to_string(),
            file: entry.name.clone(),
            object: entry.object.key().to_string(),
        }
    }

    /// File `entry` of set `set` has an object that is not what the set says, for `why`.
    fn damaged(&self, set: &str, entry: &FileEntry, why: String) -> BackupError {
        BackupError::Damaged {
            set: set.to_string(),
            file: entry.name.clone(),
            object: entry.object.key().to_string(),
            why,
        }
    }

    /// Writes file `entry` of set `set` to `path` (a new file), checked against its hash.
    pub async fn get_file(&self, set: &str, entry: &FileEntry, path: &Path) -> Result<()> {
        if let Destination::Dir(root) = &self.dest {
            let from = root.join(entry.object.key().as_ref());
            if !tokio::fs::try_exists(&from).await.at(&from)? {
                return Err(self.missing(set, entry));
            }
            let object = entry.object.clone();
            let got = copy_hashing(&from, path, &self.throttle, object.len, Cores::Any).await?;
            let why = if got.len > object.len {
                Some(format!("longer than its {} bytes", object.len))
            } else if got.len != object.len {
                Some(format!("{} bytes where the set says {}", got.len, object.len))
            } else if got.hash != object.hash {
                Some("its content does not match its checksum".to_string())
            } else {
                None
            };
            if let Some(why) = why {
                let _ = tokio::fs::remove_file(path).await;
                return Err(self.damaged(set, entry, why));
            }
            return tokio::fs::File::open(path).await.at(path)?.sync_all().await.at(path);
        }
        let out = tokio::fs::File::create_new(path).await.at(path)?;
        let mut out = tokio::io::BufWriter::with_capacity(READ_CHUNK, out);
        self.read_object(set, &entry.name, &entry.object, Sink::File(&mut out, path)).await?;
        out.flush().await.at(path)?;
        out.get_ref().sync_all().await.at(path)?;
        Ok(())
    }

    /// Writes `set`'s manifest (its generation's).
    pub async fn put_set(&self, set: &BackupSet) -> Result<()> {
        // Every object it names is durable before it is.
        self.sync_pending().await?;
        let key = set.manifest_key();
        self.store
            .put(&key, PutPayload::from(set.encode()))
            .await
            .doing(|| format!("writing {key}"))?;
        self.durable(&key, true).await
    }

    /// The generations of each set's manifests, by set id.
    async fn manifests(&self) -> Result<BTreeMap<String, Vec<u64>>> {
        let prefix = Key::from("sets");
        let metas: Vec<_> = self
            .store
            .list(Some(&prefix))
            .try_collect()
            .await
            .doing(|| "listing sets".to_string())?;
        let mut sets: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for m in metas {
            if let Some((id, generation)) = set::parse_manifest_key(m.location.as_ref()) {
                sets.entry(id).or_default().push(generation);
            }
        }
        for g in sets.values_mut() {
            g.sort_unstable();
        }
        Ok(sets)
    }

    /// Every set, oldest first, each its newest manifest or why that cannot be read.
    pub async fn list(&self) -> Result<Vec<Listed>> {
        let mut out = Vec::new();
        for (id, generations) in self.manifests().await? {
            let newest = generations.last().copied().unwrap_or(1);
            let set = self.read_manifest(&id, newest).await;
            out.push(Listed { id, set });
        }
        Ok(out)
    }

    /// The id for a new set started at `now_ms`: its time, or just after the newest set here
    /// if this server's clock is behind it ([`set::next_set_id`]).
    pub async fn next_set_id(&self, now_ms: u64) -> Result<String> {
        let sets = self.manifests().await?;
        Ok(set::next_set_id(now_ms, sets.keys().next_back().map(String::as_str)))
    }

    /// Set `id`'s newest manifest.
    pub async fn set(&self, id: &str) -> Result<BackupSet> {
        let sets = self.manifests().await?;
        let generations = sets.get(id).ok_or_else(|| BackupError::NoSuchSet(id.to_string()))?;
        let newest = generations.last().copied().unwrap_or(1);
        self.read_manifest(id, newest).await
    }

    /// The newest set that can be read (the default for a restore).
    pub async fn newest(&self) -> Result<BackupSet> {
        let listed = self.list().await?;
        let last = listed.into_iter().next_back().ok_or(BackupError::Empty)?;
        last.set
    }

    async fn read_manifest(&self, id: &str, generation: u64) -> Result<BackupSet> {
        let key = set::manifest_key(id, generation);
        let bytes = match self.get_small(&key, MAX_MANIFEST).await {
            Err(BackupError::Manifest { object, why, .. }) => {
                return Err(BackupError::Manifest { set: id.to_string(), object, why })
            }
            r => r?,
        };
        BackupSet::decode(&bytes, key.as_ref())
    }

    /// Removes every manifest of set `id` (its objects stay until a prune finds them unused).
    pub async fn remove_set(&self, id: &str) -> Result<()> {
        let generations = self.manifests().await?.remove(id).unwrap_or_default();
        // Oldest first: a failure partway leaves the newest generation, never an older one
        // that lacks requests a purge applied (and names objects it removed).
        for g in generations {
            let key = set::manifest_key(id, g);
            self.store.delete(&key).await.doing(|| format!("removing {key}"))?;
            self.durable(&key, false).await?;
        }
        Ok(())
    }

    /// Removes older generations of `set`'s manifest (once a newer one is written).
    pub async fn remove_older_generations(&self, set: &BackupSet) -> Result<()> {
        let generations = self.manifests().await?.remove(&set.id).unwrap_or_default();
        for g in generations.into_iter().filter(|g| *g < set.generation) {
            let key = set::manifest_key(&set.id, g);
            self.store.delete(&key).await.doing(|| format!("removing {key}"))?;
            self.durable(&key, false).await?;
        }
        Ok(())
    }

    /// Removes the object of hash `hash`.
    pub async fn remove_object(&self, hash: &str) -> Result<()> {
        let key = set::object_key(hash);
        match self.store.delete(&key).await {
            // Removed for good: a power cut must not bring back an object holding deleted data
            // (made durable with the others removed, by `sync_pending`).
            Ok(()) => self.durable_later(&key, false),
            Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(source) => Err(BackupError::Store { what: format!("removing {key}"), source }),
        }
    }

    /// Counts progress for tests and callers that read objects whole.
    pub async fn read_to_vec(&self, set: &str, entry: &FileEntry) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(entry.object.len as usize);
        self.read_object(set, &entry.name, &entry.object, Sink::Memory(&mut out)).await?;
        Ok(out)
    }

    /// Checks file `f`'s object (of set `set`), counting it into `progress`.
    async fn check_file(&self, set: &str, f: &FileEntry, progress: &Progress) -> Result<()> {
        let r = self.read_object(set, &f.name, &f.object, Sink::Discard).await;
        progress.file_done(f.object.len, false);
        r
    }

    /// Checks every object of `set`, reporting each missing or damaged one (not just the
    /// first), and counting into `progress`.
    pub async fn verify(&self, set: &BackupSet, progress: &Progress) -> Result<Vec<BackupError>> {
        progress.add_total(set.files() as u64, set.bytes());
        let mut problems = Vec::new();
        // (Made first: see `transfer::download_part`.)
        let checks: Vec<_> = set
            .all_parts()
            .flat_map(|p| &p.files)
            .map(|f| self.check_file(&set.id, f, progress))
            .collect();
        let mut checked = futures::stream::iter(checks).buffered(LANES);
        while let Some(r) = checked.next().await {
            match r {
                Ok(()) => {}
                Err(e @ (BackupError::Missing { .. } | BackupError::Damaged { .. })) => {
                    problems.push(e)
                }
                Err(e) => return Err(e),
            }
        }
        Ok(problems)
    }
}

/// Where [`BackupStore::read_object`] puts what it reads.
#[derive(Debug)]
pub enum Sink<'a> {
    /// Appended to a file (named for errors).
    File(&'a mut tokio::io::BufWriter<tokio::fs::File>, &'a Path),
    /// Appended to memory.
    Memory(&'a mut Vec<u8>),
    /// Only checked.
    Discard,
}

/// An object's content, chunk by chunk. A directory destination's object is read here in
/// chunks of [`READ_CHUNK`]: the object store's own reader yields 8 KiB at a time, each a trip
/// to the blocking thread pool, which made restores several times slower than a copy.
fn chunks(got: GetResult) -> BoxStream<'static, object_store::Result<Bytes>> {
    match got.payload {
        GetResultPayload::File(file, _) => {
            let file = tokio::fs::File::from_std(file);
            futures::stream::try_unfold(file, |mut file| async move {
                let mut buf = vec![0u8; READ_CHUNK];
                let n = read_full(&mut file, &mut buf).await.map_err(|source| {
                    object_store::Error::Generic {
                        store: "LocalFileSystem",
                        source: Box::new(source),
                    }
                })?;
                if n == 0 {
                    return Ok(None);
                }
                buf.truncate(n);
                Ok(Some((Bytes::from(buf), file)))
            })
            .boxed()
        }
        GetResultPayload::Stream(s) => s,
    }
}

/// A file being copied into a directory destination: removed when dropped unless it was
/// placed (renamed to its object's name).
struct Partial {
    path: std::path::PathBuf,
    placed: bool,
}

impl Drop for Partial {
    fn drop(&mut self) {
        if !self.placed {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// A file that changed while it was read (an engine file never should).
fn changed(path: &Path) -> BackupError {
    BackupError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::other("the file changed while it was backed up"),
    }
}

/// Reads until `buf` is full or the file ends; the bytes read.
async fn read_full(file: &mut tokio::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        let got = file.read(&mut buf[n..]).await?;
        if got == 0 {
            break;
        }
        n += got;
    }
    Ok(n)
}
