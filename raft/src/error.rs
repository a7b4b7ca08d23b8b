//! Errors of the Raft log.

use std::path::PathBuf;

/// An error of the on-disk Raft log.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// An I/O error.
    #[error("raft log I/O on {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A record or file failed validation.
    #[error("raft log corrupt: {0}")]
    Corrupt(String),
    /// An earlier fsync failed: the log refuses writes until it is reopened.
    #[error("raft log poisoned by an earlier failed fsync; restart the node")]
    Poisoned,
}

impl LogError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> LogError {
        let path = path.into();
        move |source| LogError::Io { path, source }
    }
}
