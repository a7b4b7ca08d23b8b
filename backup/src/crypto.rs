//! Encryption of backup objects, so a copy of the store taken out of EbbDB's hands becomes
//! unreadable once EbbDB destroys the keys (crypto-shredding).
//!
//! - Every object of an encrypted set is sealed with a key of its own (ChaCha20-Poly1305, in
//!   chunks of [`CHUNK`] bytes, each authenticated, the last marked as last so a cut-short
//!   object does not open). The object is named by the BLAKE3 hash of what is stored (the
//!   sealed bytes), so `verify` checks it without any key.
//! - A set's manifest holds its objects' keys sealed with the set's key ([`ObjectKeys`]);
//!   the set's key is kept by the server that took it, outside the store ([`KeyDir`]).
//! - An object shared by several sets (the incremental case) keeps its key, sealed in each of
//!   their manifests. A purge writes the set's next generation with a new set key and destroys
//!   the old one; a prune's removed sets lose their keys. Once no live set's key opens an
//!   object's key, every copy of that object, wherever it was copied to, is unreadable.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};

use crate::error::{AtPath, BackupError, Result};
use crate::set::ObjectRef;

/// Plaintext bytes per sealed chunk of an object.
pub const CHUNK: usize = 1 << 20;

/// What a sealed object starts with: a format tag, then the nonce prefix of its chunks.
const MAGIC: &[u8; 8] = b"EBBSEAL1";
const PREFIX: usize = 8;
const TAG: usize = 16;

/// A 256-bit key. Shown as `Key(..)`; zeroed when dropped.
#[derive(Clone, PartialEq, Eq)]
pub struct Key([u8; 32]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        self.0.fill(0);
        // So the zeroing is not optimized away as a dead store.
        std::hint::black_box(&self.0);
    }
}

fn random(buf: &mut [u8]) -> Result<()> {
    SystemRandom::new()
        .fill(buf)
        .map_err(|_| BackupError::Source("the system's random number generator failed".into()))
}

/// A new backup origin (see [`crate::BackupStore::claim`]): 128 random bits, in hex.
pub fn new_origin() -> Result<String> {
    let mut b = [0u8; 16];
    random(&mut b)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

impl Key {
    /// A new random key.
    pub fn random() -> Result<Key> {
        let mut k = [0u8; 32];
        random(&mut k)?;
        Ok(Key(k))
    }

    /// The key in hex.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The key `hex` holds, if it holds one.
    pub fn from_hex(hex: &str) -> Option<Key> {
        let hex = hex.trim();
        if hex.len() != 64 {
            return None;
        }
        let mut k = [0u8; 32];
        for (i, b) in k.iter_mut().enumerate() {
            *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(Key(k))
    }

    fn aead(&self) -> LessSafeKey {
        // A 32-byte key is always a valid ChaCha20-Poly1305 key.
        LessSafeKey::new(
            UnboundKey::new(&CHACHA20_POLY1305, &self.0)
                .unwrap_or_else(|_| unreachable!("a 32-byte ChaCha20-Poly1305 key")),
        )
    }
}

/// The length of an object sealing `plain` bytes.
pub fn sealed_len(plain: u64) -> u64 {
    let chunks = plain.div_ceil(CHUNK as u64).max(1);
    (MAGIC.len() + PREFIX) as u64 + plain + chunks * TAG as u64
}

fn nonce(prefix: &[u8; PREFIX], counter: u32) -> Nonce {
    let mut n = [0u8; NONCE_LEN];
    n[..PREFIX].copy_from_slice(prefix);
    n[PREFIX..].copy_from_slice(&counter.to_be_bytes());
    Nonce::assume_unique_for_key(n)
}

/// Seals `plain` (in memory) with `key`.
pub fn seal(key: &Key, plain: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(sealed_len(plain.len() as u64) as usize);
    let mut sealer = Sealer::new(key, &mut out)?;
    let mut chunks = plain.chunks(CHUNK).peekable();
    if chunks.peek().is_none() {
        sealer.chunk(&mut out, &[], true)?;
    }
    while let Some(c) = chunks.next() {
        let last = chunks.peek().is_none();
        sealer.chunk(&mut out, c, last)?;
    }
    Ok(out)
}

struct Sealer {
    aead: LessSafeKey,
    prefix: [u8; PREFIX],
    counter: u32,
}

impl Sealer {
    /// Writes the header to `out`.
    fn new(key: &Key, out: &mut Vec<u8>) -> Result<Sealer> {
        let mut prefix = [0u8; PREFIX];
        random(&mut prefix)?;
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&prefix);
        Ok(Sealer { aead: key.aead(), prefix, counter: 0 })
    }

    fn chunk(&mut self, out: &mut Vec<u8>, plain: &[u8], last: bool) -> Result<()> {
        let mut buf = plain.to_vec();
        let n = nonce(&self.prefix, self.counter);
        self.counter = self.counter.checked_add(1).ok_or_else(|| {
            BackupError::Source("an object too large to seal (over 4 PiB)".into())
        })?;
        self.aead
            .seal_in_place_append_tag(n, Aad::from([u8::from(last)]), &mut buf)
            .map_err(|_| BackupError::Source("sealing failed".into()))?;
        out.extend_from_slice(&buf);
        Ok(())
    }
}

/// Opens `sealed` (in memory) with `key`; `what` names it in errors.
pub fn open(key: &Key, sealed: &[u8], what: &str) -> Result<Vec<u8>> {
    let bad = || BackupError::Decrypt { what: what.to_string() };
    let header = MAGIC.len() + PREFIX;
    if sealed.len() < header + TAG || &sealed[..MAGIC.len()] != MAGIC {
        return Err(bad());
    }
    let mut prefix = [0u8; PREFIX];
    prefix.copy_from_slice(&sealed[MAGIC.len()..header]);
    let aead = key.aead();
    let body = &sealed[header..];
    let mut out = Vec::with_capacity(body.len());
    let mut chunks = body.chunks(CHUNK + TAG).peekable();
    let mut counter = 0u32;
    while let Some(c) = chunks.next() {
        let last = chunks.peek().is_none();
        let mut buf = c.to_vec();
        let n = nonce(&prefix, counter);
        counter = counter.checked_add(1).ok_or_else(bad)?;
        let plain =
            aead.open_in_place(n, Aad::from([u8::from(last)]), &mut buf).map_err(|_| bad())?;
        out.extend_from_slice(plain);
    }
    Ok(out)
}

/// Seals the file at `src` into a new file at `dst` (blocking); returns the sealed object's
/// hash and length.
pub fn seal_file(key: &Key, src: &Path, dst: &Path) -> Result<ObjectRef> {
    let mut input = std::fs::File::open(src).at(src)?;
    let len = input.metadata().at(src)?.len();
    let mut output = std::fs::File::create(dst).at(dst)?;
    let mut hasher = blake3::Hasher::new();
    let mut out = Vec::with_capacity(CHUNK + TAG + MAGIC.len() + PREFIX);
    let mut sealer = Sealer::new(key, &mut out)?;
    let chunks = len.div_ceil(CHUNK as u64).max(1);
    let mut buf = vec![0u8; CHUNK];
    for i in 0..chunks {
        let want = (len - i * CHUNK as u64).min(CHUNK as u64) as usize;
        input.read_exact(&mut buf[..want]).at(src)?;
        sealer.chunk(&mut out, &buf[..want], i + 1 == chunks)?;
        hasher.update(&out);
        output.write_all(&out).at(dst)?;
        out.clear();
    }
    output.flush().at(dst)?;
    Ok(ObjectRef { hash: hasher.finalize().to_hex().to_string(), len: sealed_len(len) })
}

/// Opens the sealed file at `src` into a new file at `dst` (blocking); returns the BLAKE3
/// hash and length of what it held. `what` names it in errors.
pub fn open_file(key: &Key, src: &Path, dst: &Path, what: &str) -> Result<ObjectRef> {
    let bad = || BackupError::Decrypt { what: what.to_string() };
    let mut input = std::fs::File::open(src).at(src)?;
    let total = input.metadata().at(src)?.len();
    let header = (MAGIC.len() + PREFIX) as u64;
    if total < header + TAG as u64 {
        return Err(bad());
    }
    let mut head = [0u8; MAGIC.len() + PREFIX];
    input.read_exact(&mut head).at(src)?;
    if &head[..MAGIC.len()] != MAGIC {
        return Err(bad());
    }
    let mut prefix = [0u8; PREFIX];
    prefix.copy_from_slice(&head[MAGIC.len()..]);
    let aead = key.aead();
    let mut output = std::fs::File::create(dst).at(dst)?;
    let mut hasher = blake3::Hasher::new();
    let (mut left, mut counter, mut len) = (total - header, 0u32, 0u64);
    let mut buf = vec![0u8; CHUNK + TAG];
    while left > 0 {
        let n = left.min((CHUNK + TAG) as u64) as usize;
        left -= n as u64;
        input.read_exact(&mut buf[..n]).at(src)?;
        let nc = nonce(&prefix, counter);
        counter = counter.checked_add(1).ok_or_else(bad)?;
        let last = left == 0;
        let plain = aead
            .open_in_place(nc, Aad::from([u8::from(last)]), &mut buf[..n])
            .map_err(|_| bad())?;
        hasher.update(plain);
        output.write_all(plain).at(dst)?;
        len += plain.len() as u64;
    }
    output.sync_all().at(dst)?;
    Ok(ObjectRef { hash: hasher.finalize().to_hex().to_string(), len })
}

/// The key of one object of an encrypted set, and what it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectKey {
    /// The object's key, in hex.
    pub key: String,
    /// The hash and length of the file it holds.
    pub plain: ObjectRef,
}

impl ObjectKey {
    /// The key.
    pub fn key(&self) -> Result<Key> {
        Key::from_hex(&self.key)
            .ok_or_else(|| BackupError::Decrypt { what: "an object key".into() })
    }
}

/// The keys of an encrypted set's objects, by the object's name (its hash).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectKeys {
    /// By object hash.
    pub objects: BTreeMap<String, ObjectKey>,
}

/// How an encrypted set's manifest holds its objects' keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetEncryption {
    /// The id of the set's key (a file of the server's [`KeyDir`]).
    pub key: String,
    /// The [`ObjectKeys`], sealed with the set's key, in base64.
    pub objects: String,
}

impl SetEncryption {
    /// `keys`, the keys of `set`'s objects, sealed with `key`, whose id is `id`. Refused if
    /// an object of the set has no key in `keys` (the set could not be restored).
    pub fn seal(
        set: &crate::BackupSet,
        id: &str,
        key: &Key,
        keys: &ObjectKeys,
    ) -> Result<SetEncryption> {
        if let Some(f) = set
            .all_parts()
            .flat_map(|p| &p.files)
            .find(|f| !keys.objects.contains_key(&f.object.hash))
        {
            return Err(BackupError::Manifest {
                set: set.id.clone(),
                object: f.object.key().to_string(),
                why: format!("no key for the object holding {} (not written)", f.name),
            });
        }
        let json = serde_json::to_vec(keys).map_err(|e| BackupError::Source(Box::new(e)))?;
        let sealed = seal(key, &json)?;
        Ok(SetEncryption {
            key: id.to_string(),
            objects: base64::engine::general_purpose::STANDARD.encode(sealed),
        })
    }

    /// The object keys, opened with `key`; `set` names the set in errors.
    pub fn open(&self, key: &Key, set: &str) -> Result<ObjectKeys> {
        let what = format!("backup {set}'s object keys");
        let sealed = base64::engine::general_purpose::STANDARD
            .decode(&self.objects)
            .map_err(|_| BackupError::Decrypt { what: what.clone() })?;
        let json = open(key, &sealed, &what)?;
        serde_json::from_slice(&json).map_err(|_| BackupError::Decrypt { what })
    }
}

/// Where a server keeps the keys of its encrypted sets: a directory (readable only by the
/// server's user) of `<id>.key` files, each a key in hex. A destroyed key is overwritten, its
/// file removed and the directory synced.
#[derive(Debug, Clone)]
pub struct KeyDir {
    dir: PathBuf,
}

impl KeyDir {
    /// The keys in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> KeyDir {
        KeyDir { dir: dir.into() }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, id: &str) -> Result<PathBuf> {
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return Err(BackupError::Source(format!("{id:?} is not a key id").into()));
        }
        Ok(self.dir.join(format!("{id}.key")))
    }

    /// A new key, kept (synced) under a new id: the id and the key.
    pub fn create(&self) -> Result<(String, Key)> {
        let mut raw = [0u8; 12];
        random(&mut raw)?;
        let id: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        let key = Key::random()?;
        self.keep(&id, &key)?;
        Ok((id, key))
    }

    /// Keeps `key` (synced) as key `id`, as another server of the cluster made it. A key
    /// already kept under `id` stays as it is. The key is written to a temporary file of its
    /// own, then linked into place (never over another).
    pub fn keep(&self, id: &str, key: &Key) -> Result<()> {
        let path = self.path(id)?;
        if self.get(id, "").is_ok() {
            return Ok(());
        }
        crate::transfer::private_dir(&self.dir)?;
        let tmp = self.dir.join(format!("{}.{PARTIAL}", new_origin()?));
        let written = (|| {
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)
                .at(&tmp)?;
            f.write_all(key.to_hex().as_bytes()).at(&tmp)?;
            f.sync_all().at(&tmp)?;
            // A file there that holds no key (cut short) is replaced.
            if path.exists() && self.get(id, "").is_err() {
                std::fs::remove_file(&path).at(&path)?;
            }
            match std::fs::hard_link(&tmp, &path) {
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
                r => r.at(&path),
            }
        })();
        // Linked, the temporary name shares the key's bytes: only that name goes.
        match &written {
            Ok(()) => {
                let _ = std::fs::remove_file(&tmp);
            }
            Err(_) => {
                let _ = destroy_file(&tmp);
            }
        }
        written?;
        sync(&self.dir)
    }

    /// Destroys what keeps left half-written (a server stopped midway) over `older` ago: key
    /// material no id names.
    pub fn clear_partial(&self, older: std::time::Duration) -> Result<()> {
        let Ok(rd) = std::fs::read_dir(&self.dir) else { return Ok(()) };
        for e in rd.flatten() {
            let partial = e.file_name().to_str().is_some_and(|n| n.ends_with(PARTIAL));
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|m| m.elapsed().ok())
                .is_some_and(|age| age >= older);
            if partial && old {
                destroy_file(&e.path())?;
            }
        }
        Ok(())
    }

    /// How long ago key `id` was kept here (`None` if it is not).
    pub fn age(&self, id: &str) -> Option<std::time::Duration> {
        let path = self.path(id).ok()?;
        std::fs::metadata(path).and_then(|m| m.modified()).ok()?.elapsed().ok()
    }

    /// Key `id` of set `set`.
    pub fn get(&self, id: &str, set: &str) -> Result<Key> {
        let path = self.path(id)?;
        let missing = || BackupError::NoKey {
            set: set.to_string(),
            key: id.to_string(),
            dir: self.dir.clone(),
        };
        match std::fs::read_to_string(&path) {
            Ok(hex) => Key::from_hex(&hex).ok_or_else(missing),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(missing()),
            Err(e) => Err(BackupError::Io { path, source: e }),
        }
    }

    /// The ids of every key kept.
    pub fn ids(&self) -> Vec<String> {
        let Ok(rd) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        let mut out: Vec<String> = rd
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.strip_suffix(".key").map(str::to_string))
            .collect();
        out.sort();
        out
    }

    /// Destroys key `id`: its bytes overwritten and synced, the file removed, the directory
    /// synced. A key already gone is no error.
    pub fn destroy(&self, id: &str) -> Result<()> {
        let path = self.path(id)?;
        if destroy_file(&path)? {
            sync(&self.dir)?;
        }
        Ok(())
    }
}

/// The suffix of a key file being written.
const PARTIAL: &str = "partial";

/// Overwrites the file at `path` (synced) and removes it; false if there was none.
fn destroy_file(path: &Path) -> Result<bool> {
    match std::fs::OpenOptions::new().write(true).open(path) {
        Ok(mut f) => {
            f.write_all(&[0u8; 64]).at(path)?;
            f.sync_all().at(path)?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(BackupError::Io { path: path.to_path_buf(), source: e }),
    }
    match std::fs::remove_file(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        r => r.at(path).map(|()| true),
    }
}

fn sync(dir: &Path) -> Result<()> {
    std::fs::File::open(dir).and_then(|f| f.sync_all()).at(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_seal_and_open_in_memory_and_as_files() {
        let key = Key::random().unwrap();
        let dir = tempfile::tempdir().unwrap();
        for len in [0usize, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 17] {
            let plain: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
            let sealed = seal(&key, &plain).unwrap();
            assert_eq!(sealed.len() as u64, sealed_len(len as u64), "{len}");
            assert_eq!(open(&key, &sealed, "x").unwrap(), plain, "{len}");
            // Cut short at a chunk boundary, a flipped byte, another key: refused.
            if len > CHUNK {
                let cut = &sealed[..MAGIC.len() + PREFIX + CHUNK + TAG];
                assert!(open(&key, cut, "x").is_err(), "{len}: a cut-short object opened");
            }
            let mut flipped = sealed.clone();
            let at = flipped.len() / 2;
            flipped[at] ^= 1;
            assert!(open(&key, &flipped, "x").is_err(), "{len}");
            assert!(open(&Key::random().unwrap(), &sealed, "x").is_err(), "{len}");
            // As files, streaming.
            let (src, dst, back) =
                (dir.path().join("p"), dir.path().join("s"), dir.path().join("b"));
            std::fs::write(&src, &plain).unwrap();
            let obj = seal_file(&key, &src, &dst).unwrap();
            let stored = std::fs::read(&dst).unwrap();
            assert_eq!(obj.len, stored.len() as u64);
            assert_eq!(obj.hash, blake3::hash(&stored).to_hex().to_string());
            assert_eq!(open(&key, &stored, "x").unwrap(), plain);
            let got = open_file(&key, &dst, &back, "x").unwrap();
            assert_eq!(std::fs::read(&back).unwrap(), plain);
            assert_eq!(got.hash, blake3::hash(&plain).to_hex().to_string());
        }
    }

    #[test]
    fn a_destroyed_key_is_gone_and_its_keys_do_not_open() {
        let dir = tempfile::tempdir().unwrap();
        let keys = KeyDir::new(dir.path().join("keys"));
        let (id, key) = keys.create().unwrap();
        assert_eq!(keys.ids(), std::slice::from_ref(&id));
        assert_eq!(keys.get(&id, "s").unwrap(), key);
        let mut objects = ObjectKeys::default();
        objects.objects.insert(
            "h".into(),
            ObjectKey {
                key: Key::random().unwrap().to_hex(),
                plain: ObjectRef { hash: "p".into(), len: 3 },
            },
        );
        let file = |hash: &str| crate::FileEntry {
            name: "1.sst".into(),
            object: ObjectRef { hash: hash.into(), len: 3 },
        };
        let mut set = crate::BackupSet {
            format: crate::set::FORMAT,
            id: "s".into(),
            kind: crate::SetKind::Cluster,
            started_ms: 1,
            finished_ms: 2,
            generation: 1,
            server_version: "test".into(),
            purged: Vec::new(),
            meta: Some(crate::Part { shard: 0, seq: 1, applied: None, files: vec![file("m")] }),
            parts: vec![crate::Part { shard: 1, seq: 1, applied: None, files: vec![file("h")] }],
            encryption: None,
            origin: None,
        };
        let e = SetEncryption::seal(&set, &id, &key, &objects);
        assert!(matches!(e, Err(BackupError::Manifest { .. })), "the metadata part has no key");
        set.meta = None;
        let enc = SetEncryption::seal(&set, &id, &key, &objects).unwrap();
        assert!(!enc.objects.contains(&objects.objects["h"].key), "keys are sealed");
        assert_eq!(enc.open(&key, "s").unwrap(), objects);
        // Another server keeps a copy under the same id.
        let other = KeyDir::new(dir.path().join("other"));
        other.keep(&id, &key).unwrap();
        other.keep(&id, &Key::random().unwrap()).unwrap();
        assert_eq!(other.get(&id, "s").unwrap(), key, "a kept key stays as it is");
        keys.destroy(&id).unwrap();
        assert!(keys.ids().is_empty());
        assert!(matches!(keys.get(&id, "s"), Err(BackupError::NoKey { .. })));
        assert!(enc.open(&Key::random().unwrap(), "s").is_err());
        keys.destroy(&id).unwrap();
        assert!(keys.path("../x").is_err());
    }
}
