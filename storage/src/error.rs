//! Typed errors of the storage engine.

use std::path::PathBuf;

/// Result type of the storage engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors the engine returns. Every corruption names the file and byte offset it was found at.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O operation on `path` failed.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// File or directory the operation was on.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Stored data failed validation (checksum, magic, bounds, decoding).
    #[error("corruption in {path} at offset {offset}: {reason}")]
    Corruption {
        /// The corrupt file.
        path: PathBuf,
        /// Byte offset of the corrupt record, page or block.
        offset: u64,
        /// What check failed.
        reason: String,
    },
    /// A file written in a format this build does not read (a newer build wrote it). Nothing of
    /// it is read: a reader never guesses at a format it does not know.
    #[error(
        "{path}: {what} format {found}; this build (ebb {}) reads {what} formats {}-{}",
        env!("CARGO_PKG_VERSION"), supported.start(), supported.end()
    )]
    UnsupportedFormat {
        /// The file.
        path: PathBuf,
        /// What kind of file (`table`, `range index`, `manifest`, ...).
        what: &'static str,
        /// The format the file says it is in.
        found: u32,
        /// The formats this build reads.
        supported: std::ops::RangeInclusive<u32>,
    },
    /// A record this build does not read, which a newer build wrote (a replicated record whose
    /// kind or fields are new). Applying it as anything else would make this copy differ from
    /// those a newer build keeps.
    #[error("{what}: {why}; this build (ebb {build}) does not read it: was it written by a newer build?", build = env!("CARGO_PKG_VERSION"))]
    Unreadable {
        /// The record.
        what: String,
        /// Why it does not read.
        why: String,
    },
    /// A durability operation (fsync, manifest commit) failed earlier; the engine refuses writes
    /// until it is reopened.
    #[error("engine is poisoned after a failed durability operation: {0}")]
    Poisoned(String),
    /// The caller passed an argument the engine cannot accept.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A write is older than its table's retention horizon: it would be invisible at once and
    /// purged, so it is refused.
    #[error("write at delete key {delete_key} is older than the retention horizon {horizon}")]
    BeyondRetention {
        /// Delete key (time) of the refused write.
        delete_key: u64,
        /// The horizon: rows with a smaller delete key have expired.
        horizon: u64,
    },
    /// The engine has been closed.
    #[error("engine is closed")]
    Closed,
    /// Another process or engine instance holds the directory lock.
    #[error("data directory {0} is locked by another engine instance")]
    Locked(PathBuf),
    /// A fail point injected this error (tests only).
    #[error("injected failure at fail point `{0}`")]
    Injected(&'static str),
}

/// A copy, for each of several callers one failure is reported to (the I/O error's kind and
/// message are kept).
impl Clone for Error {
    fn clone(&self) -> Self {
        match self {
            Error::Io { path, source } => Error::Io {
                path: path.clone(),
                source: std::io::Error::new(source.kind(), source.to_string()),
            },
            Error::Corruption { path, offset, reason } => {
                Error::Corruption { path: path.clone(), offset: *offset, reason: reason.clone() }
            }
            Error::UnsupportedFormat { path, what, found, supported } => Error::UnsupportedFormat {
                path: path.clone(),
                what,
                found: *found,
                supported: supported.clone(),
            },
            Error::Unreadable { what, why } => {
                Error::Unreadable { what: what.clone(), why: why.clone() }
            }
            Error::Poisoned(s) => Error::Poisoned(s.clone()),
            Error::InvalidArgument(s) => Error::InvalidArgument(s.clone()),
            Error::BeyondRetention { delete_key, horizon } => {
                Error::BeyondRetention { delete_key: *delete_key, horizon: *horizon }
            }
            Error::Closed => Error::Closed,
            Error::Locked(p) => Error::Locked(p.clone()),
            Error::Injected(s) => Error::Injected(s),
        }
    }
}

impl Error {
    /// Wraps an I/O error with the path it happened on.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }

    /// Builds a corruption error.
    pub fn corruption(path: impl Into<PathBuf>, offset: u64, reason: impl Into<String>) -> Self {
        Error::Corruption { path: path.into(), offset, reason: reason.into() }
    }

    /// Builds the error of a file in a format this build does not read.
    pub fn unsupported_format(
        path: impl Into<PathBuf>,
        what: &'static str,
        found: u32,
        supported: std::ops::RangeInclusive<u32>,
    ) -> Self {
        Error::UnsupportedFormat { path: path.into(), what, found, supported }
    }

    /// True if this error reports corrupt data.
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corruption { .. })
    }

    /// True if the file system ran out of space (or quota).
    pub fn is_disk_full(&self) -> bool {
        matches!(
            self,
            Error::Io { source, .. } if matches!(
                source.kind(),
                std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
            )
        )
    }
}

/// Adds a path to `std::io::Result`s.
pub(crate) trait IoContext<T> {
    /// Maps an I/O error to [`Error::Io`] naming `path`.
    fn at(self, path: &std::path::Path) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn at(self, path: &std::path::Path) -> Result<T> {
        self.map_err(|e| Error::io(path, e))
    }
}
