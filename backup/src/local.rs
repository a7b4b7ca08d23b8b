//! Work on local files: hashing and sealing one at a time ([`on_one_core`]), and copying a
//! file while hashing it ([`copy_hashing`]), the path between a server and a directory
//! destination in both directions.
//!
//! A copy reads and writes through one reused buffer of [`COPY_CHUNK`] bytes, which stays in
//! the processor's cache, as `dd bs=1M` does: a buffer the size of the file (or a new buffer
//! for every part) is fresh memory the kernel must fault in and the copy must go through main
//! memory for, which made backups to a directory several times slower than `cp`.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::error::{AtPath, BackupError, Result};
use crate::set::ObjectRef;
use crate::throttle::Throttle;

/// Hashing, sealing and local copies run one at a time (on the blocking pool, beside the
/// lanes' other work): a backup takes at most one core from the server it copies, whatever
/// its lanes.
static ONE_CORE: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// Runs `f` (hashing, sealing or a chunk of a copy) on the blocking pool, one at a time (see
/// [`ONE_CORE`]).
pub(crate) async fn on_one_core<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T> {
    let _core = ONE_CORE.acquire().await.map_err(|e| BackupError::Source(Box::new(e)))?;
    tokio::task::spawn_blocking(f).await.map_err(|e| BackupError::Source(Box::new(e)))
}

/// Which cores a copy may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cores {
    /// One at a time with the other hashing and sealing (see [`ONE_CORE`]): a backup of a
    /// server that goes on serving.
    One,
    /// As many as copies run at once: a restore (of a server that is not running yet).
    Any,
}

/// The size of a copy's reads and writes.
pub(crate) const COPY_CHUNK: usize = 1 << 20;

/// Where a copy stands between two chunks.
struct Copying {
    from: (std::fs::File, PathBuf),
    to: (std::fs::File, PathBuf),
    hasher: blake3::Hasher,
    buf: Vec<u8>,
    len: u64,
}

impl Copying {
    /// Copies the next chunk; the bytes copied (0 at the end).
    fn step(&mut self) -> Result<usize> {
        let mut n = 0;
        while n < self.buf.len() {
            let got = self.from.0.read(&mut self.buf[n..]).at(&self.from.1)?;
            if got == 0 {
                break;
            }
            n += got;
        }
        self.hasher.update(&self.buf[..n]);
        self.to.0.write_all(&self.buf[..n]).at(&self.to.1)?;
        self.len += n as u64;
        Ok(n)
    }
}

/// Copies the file at `from` to the new file `to` (which must not exist), hashing what it
/// copies, each chunk taken from `throttle`. Stops once more than `most` bytes were
/// copied (the object returned is then longer than `most`). The copy is not synced; on an
/// error, `to` is removed.
pub(crate) async fn copy_hashing(
    from: &Path,
    to: &Path,
    throttle: &Throttle,
    most: u64,
    cores: Cores,
) -> Result<ObjectRef> {
    let src = std::fs::File::open(from).at(from)?;
    let dst = std::fs::OpenOptions::new().write(true).create_new(true).open(to).at(to)?;
    let mut c = Copying {
        from: (src, from.to_path_buf()),
        to: (dst, to.to_path_buf()),
        hasher: blake3::Hasher::new(),
        buf: vec![0u8; COPY_CHUNK],
        len: 0,
    };
    let copied = async {
        loop {
            let step = move || {
                let n = c.step();
                (c, n)
            };
            let (back, n) = match cores {
                Cores::One => on_one_core(step).await?,
                Cores::Any => tokio::task::spawn_blocking(step)
                    .await
                    .map_err(|e| BackupError::Source(Box::new(e)))?,
            };
            c = back;
            let n = n?;
            throttle.take(n as u64).await;
            if n == 0 || c.len > most {
                return Ok::<_, BackupError>(c);
            }
        }
    };
    match copied.await {
        Ok(c) => Ok(ObjectRef { hash: c.hasher.finalize().to_hex().to_string(), len: c.len }),
        Err(e) => {
            let _ = std::fs::remove_file(to);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_copy_holds_what_it_hashed() {
        let dir = tempfile::tempdir().unwrap();
        let (from, to) = (dir.path().join("from"), dir.path().join("to"));
        let body: Vec<u8> = (0..(COPY_CHUNK * 2 + 17)).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&from, &body).unwrap();
        let object =
            copy_hashing(&from, &to, &Throttle::none(), u64::MAX, Cores::One).await.unwrap();
        assert_eq!(object.len, body.len() as u64);
        assert_eq!(object.hash, blake3::hash(&body).to_hex().to_string());
        assert_eq!(std::fs::read(&to).unwrap(), body);
        // The target must be new.
        assert!(copy_hashing(&from, &to, &Throttle::none(), u64::MAX, Cores::One).await.is_err());
        // A limit stops the copy early.
        let short = dir.path().join("short");
        let object = copy_hashing(&from, &short, &Throttle::none(), 10, Cores::Any).await.unwrap();
        assert!(object.len > 10 && object.len <= COPY_CHUNK as u64, "{object:?}");
    }
}
