//! Free space on a data directory's file system, and the reserve that keeps a full disk from
//! stopping the work that frees space.
//!
//! Below the reserve, writes that add data are refused ([`Reserve::check`]) while deletes,
//! erasures, drops and compactions go on: they need a little space to write their output
//! before the space they free is given back, and the reserve is that space.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Sizes of a file system, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    /// Size of the file system.
    pub total: u64,
    /// Free to unprivileged writers.
    pub available: u64,
}

/// The sizes of the file system holding `dir`.
pub fn space(dir: &Path) -> std::io::Result<Space> {
    let s = rustix::fs::statvfs(dir).map_err(std::io::Error::from)?;
    let unit = s.f_frsize.max(1);
    Ok(Space { total: s.f_blocks.saturating_mul(unit), available: s.f_bavail.saturating_mul(unit) })
}

/// The default reserve of a file system of `total` bytes: 5% of it, at most 2 GiB.
pub fn default_reserve(total: u64) -> u64 {
    (total / 20).min(2 << 30)
}

/// A write was refused: the file system's free space is below the reserve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "disk full: {available} bytes free on the file system of {}, below the reserve of {reserve} \
     bytes; writes are refused until space is freed (DELETE, ERASE and DROP still work)",
    .dir.display()
)]
pub struct BelowReserve {
    /// The data directory.
    pub dir: PathBuf,
    /// Bytes free.
    pub available: u64,
    /// The reserve.
    pub reserve: u64,
}

/// How long a measurement of free space is reused.
const FRESH: Duration = Duration::from_millis(100);

/// The reserve of one data directory. Free space is measured at most every 100 ms.
#[derive(Debug)]
pub struct Reserve {
    dir: PathBuf,
    bytes: u64,
    last: Mutex<Option<(Instant, Space)>>,
}

impl Reserve {
    /// A reserve of `bytes` on the file system of `dir` (0: none).
    pub fn new(dir: impl Into<PathBuf>, bytes: u64) -> Reserve {
        Reserve { dir: dir.into(), bytes, last: Mutex::new(None) }
    }

    /// The reserve in bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The file system's sizes (measured at most 100 ms ago).
    pub fn space(&self) -> std::io::Result<Space> {
        let mut last = self.last.lock();
        if let Some((at, s)) = *last {
            if at.elapsed() < FRESH {
                return Ok(s);
            }
        }
        let s = space(&self.dir)?;
        *last = Some((Instant::now(), s));
        Ok(s)
    }

    /// `Err` if free space is below the reserve. A file system that cannot be measured counts
    /// as above it (the writes themselves will fail if it is full).
    pub fn check(&self) -> Result<(), BelowReserve> {
        if self.bytes == 0 {
            return Ok(());
        }
        match self.space() {
            Ok(s) if s.available < self.bytes => Err(BelowReserve {
                dir: self.dir.clone(),
                available: s.available,
                reserve: self.bytes,
            }),
            Ok(_) => Ok(()),
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "cannot measure free space");
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_refuses_below_it_and_measures_the_real_file_system() {
        let dir = tempfile::tempdir().unwrap();
        let s = space(dir.path()).unwrap();
        assert!(s.total > 0 && s.available <= s.total);
        assert!(Reserve::new(dir.path(), 0).check().is_ok());
        assert!(Reserve::new(dir.path(), 1).check().is_ok());
        let err = Reserve::new(dir.path(), u64::MAX).check().unwrap_err();
        assert_eq!(err.reserve, u64::MAX);
        assert!(err.to_string().contains("disk full"), "{err}");
        assert_eq!(default_reserve(10 << 30), 512 << 20);
        assert_eq!(default_reserve(1 << 40), 2 << 30);
    }
}
