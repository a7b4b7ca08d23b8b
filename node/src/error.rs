//! Errors of the server and the command-line tool.

use std::net::SocketAddr;
use std::path::PathBuf;

use ebb_query::QueryError;

/// What can go wrong starting or stopping the server, or in `ebb sql` / `ebb import`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// A setting (flag, environment variable or configuration file) is invalid.
    #[error("configuration: {0}")]
    Config(String),
    /// An address could not be listened on.
    #[error("cannot listen for {what} on {addr}: {source}")]
    Listen {
        /// The protocol (`HTTP`, `PostgreSQL`, `gRPC`).
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The data directory could not be created.
    #[error("cannot create data directory {dir}: {source}")]
    DataDir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The database in the data directory could not be opened.
    #[error("cannot open {dir}: {source}")]
    Open {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: QueryError,
    },
    /// The final flush at shutdown failed; the WAL still holds the data.
    #[error("flush on shutdown failed: {0}")]
    Flush(QueryError),
    /// A background task panicked or was cancelled.
    #[error("task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// Local I/O (reading a file to import, the terminal, a socket's address).
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The cluster layer failed (a Raft group would not start, no leader, no quorum).
    #[error("cluster: {0}")]
    Cluster(String),
    /// A request to a server failed, or the server answered with an error.
    #[error("{0}")]
    Client(String),
    /// `ebb import` could not send a batch, or the server refused it.
    #[error(transparent)]
    Import(#[from] crate::cli::import::ImportError),
    /// A backup or restore failed.
    #[error(transparent)]
    Backup(Box<ebb_backup::BackupError>),
}

impl From<ebb_backup::BackupError> for NodeError {
    fn from(e: ebb_backup::BackupError) -> Self {
        NodeError::Backup(Box::new(e))
    }
}

impl From<String> for NodeError {
    /// A client-side failure described in words.
    fn from(message: String) -> NodeError {
        NodeError::Client(message)
    }
}

/// `Result` with [`NodeError`].
pub type Result<T, E = NodeError> = std::result::Result<T, E>;
