//! Shard snapshots: an engine checkpoint (SSTs, range-index files, manifest, deletion ledger)
//! in a directory, with a descriptor listing every file's length and CRC-32 and the snapshot's
//! Raft meta. Snapshots are built from a checkpoint, streamed file by file in chunks, and
//! validated against the descriptor before they are installed.

use std::io::Read;
use std::path::{Path, PathBuf};

use openraft::{BasicNode, SnapshotMeta};
use serde::{Deserialize, Serialize};

use crate::error::ReplicaError;
use crate::types::NodeId;

/// Name of the descriptor file inside a snapshot directory.
pub const DESCRIPTOR: &str = "SNAPSHOT";

/// Raft meta of a shard snapshot.
pub type Meta = SnapshotMeta<NodeId, BasicNode>;

/// One file of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotFile {
    /// File name inside the snapshot directory.
    pub name: String,
    /// Length in bytes.
    pub len: u64,
    /// CRC-32 of the contents.
    pub crc32: u32,
}

/// What a snapshot holds: its Raft meta and its files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Descriptor {
    /// The Raft meta (last included log id, membership, snapshot id).
    pub meta: Meta,
    /// The engine sequence number the checkpoint holds everything up to.
    pub seq: u64,
    /// Every file, sorted by name.
    pub files: Vec<SnapshotFile>,
}

impl Descriptor {
    /// Total size of the files in bytes.
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.len).sum()
    }

    /// Encodes the descriptor (what [`Descriptor::decode`] reads).
    pub fn encode(&self) -> Result<Vec<u8>, ReplicaError> {
        let body = postcard::to_allocvec(self)?;
        let mut out = crc32fast::hash(&body).to_le_bytes().to_vec();
        out.extend_from_slice(&body);
        Ok(out)
    }

    /// Decodes an encoded descriptor, checking its checksum.
    pub fn decode(bytes: &[u8], dir: &Path) -> Result<Descriptor, ReplicaError> {
        let (crc, body) = bytes
            .split_first_chunk::<4>()
            .ok_or_else(|| ReplicaError::invalid(dir, "descriptor is truncated"))?;
        if u32::from_le_bytes(*crc) != crc32fast::hash(body) {
            return Err(ReplicaError::invalid(dir, "descriptor checksum mismatch"));
        }
        let d: Descriptor = ebb_storage::decode_exact(body)
            .map_err(|e| ReplicaError::invalid(dir, format!("descriptor {e}")))?;
        for f in &d.files {
            if !valid_name(&f.name) {
                return Err(ReplicaError::invalid(dir, format!("bad file name {:?}", f.name)));
            }
        }
        Ok(d)
    }
}

/// A file name a snapshot may hold: plain, no path separators, not the descriptor.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name != DESCRIPTOR
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\', '\0'])
}

/// A shard snapshot: the directory holding it. This is the Raft snapshot data; replication
/// streams its files and the receiver rebuilds the directory before installing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardSnapshot {
    dir: PathBuf,
}

impl ShardSnapshot {
    /// The snapshot in `dir` (not read or validated yet).
    pub fn at(dir: impl Into<PathBuf>) -> ShardSnapshot {
        ShardSnapshot { dir: dir.into() }
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Reads its descriptor.
    pub fn descriptor(&self) -> Result<Descriptor, ReplicaError> {
        let path = self.dir.join(DESCRIPTOR);
        let bytes = std::fs::read(&path).map_err(ReplicaError::io(&path))?;
        Descriptor::decode(&bytes, &self.dir)
    }

    /// Checks every listed file against its length and checksum, and that nothing else is
    /// there. Returns the descriptor.
    pub fn validate(&self) -> Result<Descriptor, ReplicaError> {
        let d = self.descriptor()?;
        let mut present = Vec::new();
        for e in std::fs::read_dir(&self.dir).map_err(ReplicaError::io(&self.dir))? {
            let e = e.map_err(ReplicaError::io(&self.dir))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name != DESCRIPTOR {
                present.push(name);
            }
        }
        present.sort();
        let listed: Vec<&str> = d.files.iter().map(|f| f.name.as_str()).collect();
        if present != listed {
            return Err(ReplicaError::invalid(
                &self.dir,
                format!("files {present:?} do not match the descriptor's {listed:?}"),
            ));
        }
        for f in &d.files {
            let (len, crc) = checksum(&self.dir.join(&f.name))?;
            if (len, crc) != (f.len, f.crc32) {
                return Err(ReplicaError::invalid(
                    &self.dir,
                    format!(
                        "{}: {len} bytes crc {crc:08x}, expected {} bytes crc {:08x}",
                        f.name, f.len, f.crc32
                    ),
                ));
            }
        }
        Ok(d)
    }

    /// Writes the descriptor of the checkpoint in `dir` (every file in it), making `dir` a
    /// snapshot. The descriptor is written last, through a rename.
    pub fn seal(dir: &Path, meta: Meta, seq: u64) -> Result<ShardSnapshot, ReplicaError> {
        let mut files = Vec::new();
        for e in std::fs::read_dir(dir).map_err(ReplicaError::io(dir))? {
            let e = e.map_err(ReplicaError::io(dir))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name == DESCRIPTOR || name.ends_with(".tmp") {
                continue;
            }
            let (len, crc32) = checksum(&e.path())?;
            files.push(SnapshotFile { name, len, crc32 });
        }
        files.sort_by(|a, b| a.name.cmp(&b.name));
        let d = Descriptor { meta, seq, files };
        write_atomic(&dir.join(DESCRIPTOR), &d.encode()?)?;
        Ok(ShardSnapshot { dir: dir.to_path_buf() })
    }

    /// Fills the new directory `target` with the snapshot's engine files: immutable files
    /// (SSTs, range-index files) are hard-linked, files an engine appends to are copied.
    pub fn materialize(&self, d: &Descriptor, target: &Path) -> Result<(), ReplicaError> {
        ebb_storage::durable::create_dir_all(target).map_err(ReplicaError::io(target))?;
        for f in &d.files {
            let (src, dst) = (self.dir.join(&f.name), target.join(&f.name));
            if f.name == super::erasure::WATERMARK_FILE {
                continue; // about the snapshot, not part of the engine
            }
            let immutable = f.name.ends_with(".sst") || f.name.ends_with(".rdi");
            if !immutable || std::fs::hard_link(&src, &dst).is_err() {
                copy_synced(&src, &dst)?;
            }
        }
        sync_dir(target)
    }

    /// Copies (hard-links where possible) the whole snapshot, descriptor included, into the
    /// new directory `target`.
    pub fn copy_to(&self, target: &Path) -> Result<ShardSnapshot, ReplicaError> {
        let d = self.descriptor()?;
        ebb_storage::durable::create_dir_all(target).map_err(ReplicaError::io(target))?;
        for f in &d.files {
            let (src, dst) = (self.dir.join(&f.name), target.join(&f.name));
            if std::fs::hard_link(&src, &dst).is_err() {
                copy_synced(&src, &dst)?;
            }
        }
        write_atomic(&target.join(DESCRIPTOR), &d.encode()?)?;
        Ok(ShardSnapshot { dir: target.to_path_buf() })
    }
}

/// Copies `src` to `dst` and fsyncs the copy (its directory entry is the caller's to sync).
fn copy_synced(src: &Path, dst: &Path) -> Result<(), ReplicaError> {
    std::fs::copy(src, dst).map_err(ReplicaError::io(dst))?;
    let f = std::fs::File::open(dst).map_err(ReplicaError::io(dst))?;
    f.sync_all().map_err(ReplicaError::io(dst))?;
    ebb_storage::durable::synced_file(&f);
    Ok(())
}

/// Length and CRC-32 of a file.
pub fn checksum(path: &Path) -> Result<(u64, u32), ReplicaError> {
    let mut f = std::fs::File::open(path).map_err(ReplicaError::io(path))?;
    let mut h = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut len = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(ReplicaError::io(path))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        len += n as u64;
    }
    Ok((len, h.finalize()))
}

/// Writes `bytes` to `path` through a temporary file, fsync and rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ReplicaError> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(ReplicaError::io(&tmp))?;
    f.write_all(bytes).and_then(|_| f.sync_all()).map_err(ReplicaError::io(&tmp))?;
    ebb_storage::durable::synced_file(&f);
    std::fs::rename(&tmp, path).map_err(ReplicaError::io(path))?;
    match path.parent() {
        Some(p) => sync_dir(p),
        None => Ok(()),
    }
}

/// Fsyncs a directory.
pub fn sync_dir(dir: &Path) -> Result<(), ReplicaError> {
    std::fs::File::open(dir).and_then(|f| f.sync_all()).map_err(ReplicaError::io(dir))?;
    ebb_storage::durable::synced_dir(dir);
    Ok(())
}
