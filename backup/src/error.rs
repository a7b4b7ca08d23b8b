//! What can go wrong with a backup, typed so callers map it once (to HTTP, SQLSTATE, an exit
//! code).

use std::path::PathBuf;

/// A backup error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackupError {
    /// The destination URI is not one EbbDB can use (the URI shown is redacted).
    #[error("backup destination {uri}: {why}")]
    Uri {
        /// The URI, without credentials.
        uri: String,
        /// Why it was refused.
        why: String,
    },
    /// The object store refused or failed an operation.
    #[error("backup store: {what}: {source}")]
    Store {
        /// What was being done (an object's name, say).
        what: String,
        /// The store's error.
        #[source]
        source: object_store::Error,
    },
    /// A local file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// An object a set needs is not in the store.
    #[error("backup {set}: object {object} ({file}) is missing")]
    Missing {
        /// The set.
        set: String,
        /// The file of the set the object holds.
        file: String,
        /// The object's name in the store.
        object: String,
    },
    /// An object's content does not match its checksum or length.
    #[error("backup {set}: object {object} ({file}) is damaged: {why}")]
    Damaged {
        /// The set.
        set: String,
        /// The file of the set the object holds.
        file: String,
        /// The object's name in the store.
        object: String,
        /// What does not match.
        why: String,
    },
    /// A set's manifest could not be read (damaged, partial, or of a format this build does not
    /// know).
    #[error("backup {set}: manifest {object}: {why}")]
    Manifest {
        /// The set.
        set: String,
        /// The manifest's name in the store.
        object: String,
        /// What is wrong with it.
        why: String,
    },
    /// No set of that id is at the destination.
    #[error("no backup {0} at this destination")]
    NoSuchSet(String),
    /// The destination holds no backup set.
    #[error("the destination holds no backup set")]
    Empty,
    /// What a backup copies could not be read (a shard's part could not be taken).
    #[error("taking a part: {0}")]
    Source(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// Another backup, prune or purge holds the destination in a way this one cannot share
    /// (see [`crate::lock`]); try again once it finished.
    #[error("the backup destination is busy: {0}")]
    Busy(String),
    /// An encrypted set's key is not where EbbDB keeps keys: it was destroyed with the set
    /// (the set was pruned or purged), or the key directory given is not the server's.
    #[error("backup {set} is encrypted and its key {key} is not in {}", dir.display())]
    NoKey {
        /// The set.
        set: String,
        /// The key's id.
        key: String,
        /// Where it was looked for.
        dir: PathBuf,
    },
    /// Encrypted content did not decrypt: the wrong key, or content changed after it was
    /// sealed.
    #[error("{what} does not decrypt with its key (the wrong key, or changed content)")]
    Decrypt {
        /// What was being decrypted.
        what: String,
    },
    /// The destination holds the backups of another server or cluster: deletes issued on one
    /// must not be applied to the other's sets, so each keeps its own destination.
    #[error(
        "{destination} holds the backups of another server or cluster (origin {origin}); back \
         up to a directory or bucket prefix of this one's own"
    )]
    OtherOrigin {
        /// The destination (without credentials).
        destination: String,
        /// The origin recorded there.
        origin: String,
    },
    /// The restore target is not empty.
    #[error("{}: the restore target already exists; give a new directory", .0.display())]
    TargetExists(PathBuf),
}

impl BackupError {
    /// True if a local file could not be written for lack of space.
    pub fn is_disk_full(&self) -> bool {
        match self {
            BackupError::Io { source, .. } => {
                source.kind() == std::io::ErrorKind::StorageFull
                    || source.raw_os_error() == Some(28)
            }
            _ => false,
        }
    }
}

/// A result with a [`BackupError`].
pub type Result<T> = std::result::Result<T, BackupError>;

/// Attaches a path to an I/O error.
pub(crate) trait AtPath<T> {
    fn at(self, path: &std::path::Path) -> Result<T>;
}

impl<T> AtPath<T> for std::result::Result<T, std::io::Error> {
    fn at(self, path: &std::path::Path) -> Result<T> {
        self.map_err(|source| BackupError::Io { path: path.to_path_buf(), source })
    }
}

/// Attaches what was being done to a store error.
pub(crate) trait InStore<T> {
    fn doing(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> InStore<T> for std::result::Result<T, object_store::Error> {
    fn doing(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| BackupError::Store { what: what(), source })
    }
}
