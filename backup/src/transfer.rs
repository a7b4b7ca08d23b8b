//! Moving parts between a local directory and the store: [`upload_part`] backs up a checkpoint
//! directory (copying only objects the store lacks), [`download_part`] brings one back
//! (checking every object).

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncReadExt;

use crate::crypto::{Key, ObjectKey, ObjectKeys};
use crate::error::{AtPath, BackupError, Result};
use crate::local::on_one_core;
use crate::lock::Lock;
use crate::progress::Progress;
use crate::set::{FileEntry, LogPosition, ObjectRef, Part};
use crate::store::{BackupStore, LANES};
use crate::throttle::Throttle;

/// Hashes of engine files already read, by file identity, so an unchanged file is not read
/// again to learn its hash. Only files the engine never changes once written (tables `.sst`,
/// range-index files `.rdi`) are kept; others (the manifest, WAL, ledger) are read each time.
/// Kept in a file between backups.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct HashCache {
    known: HashMap<String, String>,
    #[serde(skip)]
    seen: HashSet<String>,
    /// Whether it knew files when it was loaded (a server that backed up before).
    #[serde(skip)]
    warm: bool,
}

impl HashCache {
    /// The cache saved at `path` (empty if there is none or it cannot be read).
    pub fn load(path: &Path) -> HashCache {
        std::fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice::<HashCache>(&b).ok())
            .map(|c| HashCache { warm: !c.known.is_empty(), ..c })
            .unwrap_or_default()
    }

    /// Saves the entries used since it was loaded (others are of files gone since).
    pub fn save(&self, path: &Path) -> Result<()> {
        let kept: HashMap<&String, &String> =
            self.known.iter().filter(|(k, _)| self.seen.contains(*k)).collect();
        let tmp = path.with_extension("tmp");
        let body = serde_json::to_vec(&serde_json::json!({ "known": kept })).unwrap_or_default();
        std::fs::write(&tmp, body).at(&tmp)?;
        std::fs::rename(&tmp, path).at(path)?;
        Ok(())
    }

    /// The identity of the file `meta` describes: device, inode, length and modification
    /// time (hard links share them; a file written anew gets a new inode or time).
    fn identity(meta: &std::fs::Metadata) -> String {
        format!(
            "{}:{}:{}:{}.{}",
            meta.dev(),
            meta.ino(),
            meta.len(),
            meta.mtime(),
            meta.mtime_nsec()
        )
    }

    /// The file `meta` describes (at `path`) as an object, if it is an immutable engine file
    /// (tables `.sst`, range-index files `.rdi`) whose identity is known; and that identity,
    /// to [`HashCache::learn`] its hash by.
    fn lookup(
        &mut self,
        path: &Path,
        meta: &std::fs::Metadata,
    ) -> (Option<String>, Option<ObjectRef>) {
        let immutable = path.extension().is_some_and(|e| e == "sst" || e == "rdi");
        let Some(id) = immutable.then(|| Self::identity(meta)) else { return (None, None) };
        self.seen.insert(id.clone());
        let known =
            self.known.get(&id).map(|hash| ObjectRef { hash: hash.clone(), len: meta.len() });
        (Some(id), known)
    }

    /// Keeps `hash` as the hash of the file of identity `id`.
    fn learn(&mut self, id: String, hash: String) {
        self.known.insert(id, hash);
    }
}

/// The file at `path` as an object, and its content if it had to be read to learn its hash (a
/// file of at most [`READ_WHOLE`] bytes is read whole, so an upload sends what was hashed
/// without reading it again): read through `throttle` unless `cache` knows it. Hashing runs
/// on the blocking pool, so files hashed at once use every core.
async fn hash_cached(
    cache: &parking_lot::Mutex<&mut HashCache>,
    path: &Path,
    throttle: &Throttle,
) -> Result<(ObjectRef, Option<Vec<u8>>)> {
    let meta = tokio::fs::metadata(path).await.at(path)?;
    let (id, known) = cache.lock().lookup(path, &meta);
    if let Some(object) = known {
        return Ok((object, None));
    }
    let (object, body) = if meta.len() <= READ_WHOLE {
        let body = tokio::fs::read(path).await.at(path)?;
        throttle.take(body.len() as u64).await;
        let (hash, body) = on_one_core(move || (blake3::hash(&body), body)).await?;
        (ObjectRef { hash: hash.to_hex().to_string(), len: body.len() as u64 }, Some(body))
    } else {
        (hash_file(path, throttle).await?, None)
    };
    if let Some(id) = id {
        cache.lock().learn(id, object.hash.clone());
    }
    Ok((object, body))
}

/// Files up to this size are read whole to be hashed, and uploaded from memory.
const READ_WHOLE: u64 = 16 << 20;

/// The hash and length of the file at `path`, read through `throttle`.
pub async fn hash_file(path: &Path, throttle: &Throttle) -> Result<ObjectRef> {
    let mut f = tokio::fs::File::open(path).await.at(path)?;
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut len = 0u64;
    loop {
        let n = f.read(&mut buf).await.at(path)?;
        if n == 0 {
            break;
        }
        throttle.take(n as u64).await;
        (hasher, buf) = on_one_core(move || {
            hasher.update(&buf[..n]);
            (hasher, buf)
        })
        .await?;
        len += n as u64;
    }
    Ok(ObjectRef { hash: hasher.finalize().to_hex().to_string(), len })
}

/// The regular files directly in `dir`, by name.
pub fn files_in(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).at(dir)? {
        let e = e.at(dir)?;
        if e.file_type().at(&e.path())?.is_file() {
            if let Some(name) = e.file_name().to_str() {
                out.push((name.to_string(), e.path()));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// What a part's upload needs besides its directory.
#[derive(Debug)]
pub struct PartSource<'a> {
    /// The shard (0 on a single node).
    pub shard: u64,
    /// The checkpoint directory (its files are immutable while the upload runs).
    pub dir: &'a Path,
    /// The engine sequence number it holds everything up to.
    pub seq: u64,
    /// Its last Raft log entry, for a shard replica.
    pub applied: Option<LogPosition>,
}

/// What the upload of an encrypted set's parts knows and learns of object keys.
#[derive(Debug, Default)]
pub struct Encrypting {
    /// Objects sealed before (by the sets whose keys were learnt, or by this upload), by the
    /// hash of the file each holds: the object and its key.
    by_plain: HashMap<String, (ObjectRef, ObjectKey)>,
    /// The keys of the objects the set names so far.
    pub used: ObjectKeys,
}

impl Encrypting {
    /// Learns the objects of a live set whose keys are `keys`, so a file one of them holds is
    /// not sealed and copied again.
    pub fn learn(&mut self, keys: &ObjectKeys) {
        for (hash, k) in &keys.objects {
            let object =
                ObjectRef { hash: hash.clone(), len: crate::crypto::sealed_len(k.plain.len) };
            self.by_plain.insert(k.plain.hash.clone(), (object, k.clone()));
        }
    }

    /// The object sealed before that holds `plain`, if the store has it whole (the set then
    /// names it with its key).
    fn reuse(&mut self, plain: &ObjectRef, stored: &HashMap<String, u64>) -> Option<ObjectRef> {
        let (object, key) = self.by_plain.get(&plain.hash)?;
        if stored.get(&object.hash) != Some(&object.len) {
            return None;
        }
        self.used.objects.insert(object.hash.clone(), key.clone());
        Some(object.clone())
    }

    /// Every object sealed before that it knows, with its key (what a part taken on another
    /// server of the cluster starts from).
    pub fn known(&self) -> ObjectKeys {
        let mut keys = ObjectKeys::default();
        for (object, key) in self.by_plain.values() {
            keys.objects.insert(object.hash.clone(), key.clone());
        }
        keys
    }

    /// Takes `keys`, those of the objects a part sealed elsewhere names, as used by the set.
    pub fn adopt(&mut self, keys: &ObjectKeys) {
        self.learn(keys);
        for (hash, k) in &keys.objects {
            self.used.objects.insert(hash.clone(), k.clone());
        }
    }

    /// Keeps `object`, sealed with `key`, as the one holding `key.plain`.
    fn record(&mut self, object: &ObjectRef, key: ObjectKey) {
        self.by_plain.insert(key.plain.hash.clone(), (object.clone(), key.clone()));
        self.used.objects.insert(object.hash.clone(), key);
    }
}

/// The object holding `plain` (sealed with a new key and uploaded unless one already at the
/// store holds it), and whether it was copied. `body` is the file's content if read.
async fn seal_object(
    enc: &parking_lot::Mutex<&mut Encrypting>,
    store: &BackupStore,
    path: &Path,
    plain: &ObjectRef,
    body: Option<Vec<u8>>,
    stored: &parking_lot::Mutex<&mut HashMap<String, u64>>,
) -> Result<(ObjectRef, bool)> {
    {
        let stored = stored.lock();
        if let Some(object) = enc.lock().reuse(plain, &stored) {
            return Ok((object, false));
        }
    }
    let key = Key::random()?;
    let body = match body {
        Some(b) => Some(b),
        None if plain.len <= READ_WHOLE => Some(tokio::fs::read(path).await.at(path)?),
        None => None,
    };
    let object = match body {
        Some(body) => {
            let k = key.clone();
            let (object, sealed) = on_one_core(move || {
                let sealed = crate::crypto::seal(&k, &body)?;
                let object = ObjectRef {
                    hash: blake3::hash(&sealed).to_hex().to_string(),
                    len: sealed.len() as u64,
                };
                Ok::<_, BackupError>((object, sealed))
            })
            .await??;
            store.put_bytes(&object, sealed).await?;
            object
        }
        None => {
            let tmp = sibling(path, "sealed");
            let (k, src, dst) = (key.clone(), path.to_path_buf(), tmp.clone());
            let sealed = on_one_core(move || crate::crypto::seal_file(&k, &src, &dst)).await?;
            let put = match sealed {
                Ok(object) => store.put_file(&tmp, &object).await.map(|()| object),
                Err(e) => Err(e),
            };
            let _ = tokio::fs::remove_file(&tmp).await;
            put?
        }
    };
    enc.lock().record(&object, ObjectKey { key: key.to_hex(), plain: plain.clone() });
    stored.lock().insert(object.hash.clone(), object.len);
    Ok((object, true))
}

/// At a directory destination, the object holding the file at `path`, and whether it was
/// copied: the one it is known to be if the store has it whole, else the file copied in.
/// `None` at other destinations.
///
/// A file `cache` does not know is hashed as it is copied (one read, not two) when it is new
/// since the last backup, as a rule: when the cache knew files before this backup, or the
/// store holds nothing yet. Otherwise (a server restored from this store, or one whose cache
/// was lost) it is hashed first, so a file the store already holds is not copied again.
async fn copy_local(
    store: &BackupStore,
    cache: &parking_lot::Mutex<&mut HashCache>,
    stored: &parking_lot::Mutex<&mut HashMap<String, u64>>,
    path: &Path,
) -> Result<Option<(ObjectRef, bool)>> {
    if !matches!(store.destination(), crate::uri::Destination::Dir(_)) {
        return Ok(None);
    }
    let meta = tokio::fs::metadata(path).await.at(path)?;
    let (id, mut known) = cache.lock().lookup(path, &meta);
    if known.is_none() && !cache.lock().warm && !stored.lock().is_empty() {
        known = Some(hash_file(path, store.throttle()).await?);
    }
    if let Some(object) = &known {
        if stored.lock().get(&object.hash) == Some(&object.len) {
            if let Some(id) = id {
                cache.lock().learn(id, object.hash.clone());
            }
            return Ok(Some((object.clone(), false)));
        }
    }
    let Some(object) = store.copy_in(path, known.as_ref()).await? else { return Ok(None) };
    if let Some(id) = id {
        cache.lock().learn(id, object.hash.clone());
    }
    stored.lock().insert(object.hash.clone(), object.len);
    Ok(Some((object, true)))
}

/// Backs up `src` into `store` under `lock` (renewed as it goes): each file's object is
/// uploaded unless `stored` (the store's objects and their sizes, kept current here) already
/// has it whole. With `encrypting`, each file is sealed with a key of its own (recorded in
/// it) unless an object sealed before holds it. Returns the part for the set's manifest.
pub async fn upload_part(
    store: &BackupStore,
    lock: &Lock,
    src: PartSource<'_>,
    stored: &mut HashMap<String, u64>,
    cache: &mut HashCache,
    progress: &Progress,
    encrypting: Option<&mut Encrypting>,
) -> Result<Part> {
    let files = files_in(src.dir)?;
    let mut sizes = 0u64;
    for (_, path) in &files {
        sizes += std::fs::metadata(path).at(path)?.len();
    }
    progress.add_total(files.len() as u64, sizes);
    let stored = parking_lot::Mutex::new(stored);
    let cache = parking_lot::Mutex::new(cache);
    let encrypting = encrypting.map(parking_lot::Mutex::new);
    let one = |(name, path): (String, PathBuf)| {
        let (stored, cache, encrypting) = (&stored, &cache, &encrypting);
        async move {
            store.keep(lock).await?;
            if encrypting.is_none() {
                if let Some((object, copy)) = copy_local(store, cache, stored, &path).await? {
                    progress.file_done(object.len, copy);
                    return Ok(FileEntry { name, object });
                }
            }
            let (plain, body) = hash_cached(cache, &path, store.throttle()).await?;
            if let Some(enc) = encrypting {
                let (object, copy) = seal_object(enc, store, &path, &plain, body, stored).await?;
                progress.file_done(plain.len, copy);
                return Ok(FileEntry { name, object });
            }
            let object = plain;
            // An object of the wrong size (cut short by a store that does not write
            // atomically) is replaced.
            let copy = stored.lock().get(&object.hash) != Some(&object.len);
            if copy {
                match body {
                    Some(body) => store.put_bytes(&object, body).await?,
                    None => store.put_file(&path, &object).await?,
                }
                stored.lock().insert(object.hash.clone(), object.len);
            }
            progress.file_done(object.len, copy);
            Ok::<_, BackupError>(FileEntry { name, object })
        }
    };
    // Several files at once, in the part's order: hashing uses every core, and uploads to a
    // remote store overlap their round trips.
    let entries = in_lanes(files.into_iter().map(one).collect()).await?;
    // Durable when the part is handed on (a cluster's part is named by a manifest another
    // node writes).
    store.sync_pending().await?;
    Ok(Part { shard: src.shard, seq: src.seq, applied: src.applied, files: entries })
}

/// Runs `jobs` [`LANES`] at a time, in order, until one fails: jobs not begun by then are
/// skipped and those under way finish (an upload cut off midway would leave a multipart upload
/// open at the store; a restore's file, a write racing the removal of its directory), so none
/// runs once this returns. Their results in order, or the first error in that order.
async fn in_lanes<T>(jobs: Vec<impl std::future::Future<Output = Result<T>>>) -> Result<Vec<T>> {
    let failed = std::sync::atomic::AtomicBool::new(false);
    let failed = &failed;
    let guarded: Vec<_> = jobs
        .into_iter()
        .map(|job| async move {
            if failed.load(std::sync::atomic::Ordering::Relaxed) {
                return None;
            }
            let r = job.await;
            if r.is_err() {
                failed.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            Some(r)
        })
        .collect();
    let results: Vec<Option<Result<T>>> =
        futures::stream::iter(guarded).buffered(LANES).collect().await;
    // A job skipped began after one before it in order had failed: that error comes first.
    results.into_iter().flatten().collect()
}

/// Writes `part` of set `set` into the new directory `dir`, checking every object; on any
/// error nothing is left at `dir` (the files go to a sibling temporary directory first).
/// An encrypted set's objects are opened with their keys, `keys` (and what each holds checked
/// against the hash its key records).
pub async fn download_part(
    store: &BackupStore,
    set: &str,
    part: &Part,
    dir: &Path,
    progress: &Progress,
    keys: Option<&ObjectKeys>,
) -> Result<()> {
    if dir.exists() {
        return Err(BackupError::TargetExists(dir.to_path_buf()));
    }
    let tmp = sibling(dir, "restore-tmp");
    let _ = tokio::fs::remove_dir_all(&tmp).await;
    private_dir(&tmp)?;
    progress.add_total(part.files.len() as u64, part.bytes());
    // Several objects at once (each write and sync overlaps the others' reads); the first
    // error in the part's order is the one reported.
    // (The futures are made first: a closure making them would borrow for any lifetime,
    // which the futures of a server's handlers cannot be proven `Send` with.)
    let fetches: Vec<_> =
        part.files.iter().map(|f| fetch_file(store, set, f, &tmp, progress, keys)).collect();
    let fetched = in_lanes(fetches).await;
    if let Err(e) = fetched {
        let _ = tokio::fs::remove_dir_all(&tmp).await;
        return Err(e);
    }
    sync_dir(&tmp)?;
    tokio::fs::rename(&tmp, dir).await.at(dir)?;
    if let Some(parent) = dir.parent() {
        sync_dir(parent)?;
    }
    Ok(())
}

/// Writes file `f` of part of set `set` into `tmp`, checked (and opened with its key from
/// `keys`, for an encrypted set).
async fn fetch_file(
    store: &BackupStore,
    set: &str,
    f: &FileEntry,
    tmp: &Path,
    progress: &Progress,
    keys: Option<&ObjectKeys>,
) -> Result<()> {
    if !crate::set::valid_file_name(&f.name) {
        return Err(BackupError::Damaged {
            set: set.to_string(),
            file: f.name.clone(),
            object: f.object.key().to_string(),
            why: "the set names a file outside its part".into(),
        });
    }
    let Some(keys) = keys else {
        store.get_file(set, f, &tmp.join(&f.name)).await?;
        progress.file_done(f.object.len, true);
        return Ok(());
    };
    let damaged = |why: &str| BackupError::Damaged {
        set: set.to_string(),
        file: f.name.clone(),
        object: f.object.key().to_string(),
        why: why.to_string(),
    };
    let k = keys.objects.get(&f.object.hash).ok_or_else(|| damaged("the set has no key for it"))?;
    let sealed = tmp.join(format!(".{}.sealed", f.name));
    store.get_file(set, f, &sealed).await?;
    let (key, src, dst, what) =
        (k.key()?, sealed.clone(), tmp.join(&f.name), f.object.key().to_string());
    let opened =
        tokio::task::spawn_blocking(move || crate::crypto::open_file(&key, &src, &dst, &what))
            .await
            .map_err(|e| BackupError::Source(Box::new(e)))??;
    let _ = tokio::fs::remove_file(&sealed).await;
    if opened != k.plain {
        return Err(damaged("what it holds does not match the hash its key records"));
    }
    progress.file_done(f.object.len, true);
    Ok(())
}

/// `dir` with `.suffix` after its name.
pub fn sibling(dir: &Path, suffix: &str) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{suffix}"));
    dir.with_file_name(name)
}

/// Creates `dir` (and its missing parents) readable only by this user: it holds a database's
/// files.
pub fn private_dir(dir: &Path) -> Result<()> {
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).at(dir)
}

fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir).and_then(|f| f.sync_all()).at(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test]
    async fn lanes_stop_at_a_failure_and_finish_what_runs() {
        let (began, finished) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let (b, f) = (&began, &finished);
        let jobs: Vec<_> = (0..20)
            .map(|i| async move {
                b.fetch_add(1, Ordering::SeqCst);
                if i == 1 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    return Err(BackupError::Busy("job 1".into()));
                }
                tokio::time::sleep(Duration::from_millis(40)).await;
                f.fetch_add(1, Ordering::SeqCst);
                Ok(i)
            })
            .collect();
        let r = in_lanes(jobs).await;
        assert!(matches!(&r, Err(BackupError::Busy(w)) if w == "job 1"), "{r:?}");
        let (began, finished) = (began.load(Ordering::SeqCst), finished.load(Ordering::SeqCst));
        assert_eq!(began, finished + 1, "every job begun but the failed one ran to its end");
        assert!(began < 20, "jobs after the failure were skipped: {began}");
        let ok: Vec<_> = (0..6).map(|i| async move { Ok::<_, BackupError>(i) }).collect();
        assert_eq!(in_lanes(ok).await.unwrap(), vec![0, 1, 2, 3, 4, 5], "in order");
    }
}
