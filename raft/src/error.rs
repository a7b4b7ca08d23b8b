//! Errors of the Raft log.

use std::path::PathBuf;

/// An error of the on-disk Raft log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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

/// An error of a shard replica's state machine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplicaError {
    /// The storage engine failed.
    #[error(transparent)]
    Storage(#[from] ebb_storage::Error),
    /// An I/O error outside the engine (snapshot files, the generation file).
    #[error("shard I/O on {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Replication state that does not decode.
    #[error("undecodable replication state: {0}")]
    Encoding(#[from] postcard::Error),
    /// A log index too large to derive engine sequence numbers from.
    #[error("log index {0} is too large for engine sequence numbers")]
    IndexTooLarge(u64),
    /// A log entry in a format a newer build writes: applying it as anything else would make this
    /// replica differ from those that read it, so the replica stops at it.
    #[error("log entry {index}: {source}; upgrade this node to the build its peers run")]
    NewerFormat {
        /// The entry's log index.
        index: u64,
        /// What this build does not read.
        #[source]
        source: ebb_storage::BatchDecodeError,
    },
    /// A snapshot that fails validation (missing or damaged files, a bad descriptor).
    #[error("invalid snapshot {dir}: {why}")]
    InvalidSnapshot {
        /// The snapshot directory.
        dir: PathBuf,
        /// What is wrong.
        why: String,
    },
}

impl ReplicaError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> ReplicaError {
        let path = path.into();
        move |source| ReplicaError::Io { path, source }
    }

    pub(crate) fn invalid(dir: &std::path::Path, why: impl Into<String>) -> ReplicaError {
        ReplicaError::InvalidSnapshot { dir: dir.to_path_buf(), why: why.into() }
    }
}
