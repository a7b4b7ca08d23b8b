//! Progress of a backup, restore or verify, readable while it runs (the CLI prints it,
//! `system.backups` shows it).

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters a transfer advances as it goes.
#[derive(Debug, Default)]
pub struct Progress {
    files_total: AtomicU64,
    files_done: AtomicU64,
    bytes_total: AtomicU64,
    bytes_done: AtomicU64,
    bytes_copied: AtomicU64,
    objects_copied: AtomicU64,
}

/// A copy of the counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProgressSnapshot {
    /// Files to go through.
    pub files_total: u64,
    /// Files gone through.
    pub files_done: u64,
    /// Bytes of the files to go through.
    pub bytes_total: u64,
    /// Bytes of the files gone through.
    pub bytes_done: u64,
    /// Bytes actually transferred (an incremental backup skips objects already stored).
    pub bytes_copied: u64,
    /// Objects actually transferred.
    pub objects_copied: u64,
}

impl Progress {
    /// `files` more files of `bytes` bytes to go through.
    pub fn add_total(&self, files: u64, bytes: u64) {
        self.files_total.fetch_add(files, Ordering::Relaxed);
        self.bytes_total.fetch_add(bytes, Ordering::Relaxed);
    }

    /// One file of `bytes` bytes gone through; `copied` if it was transferred.
    pub fn file_done(&self, bytes: u64, copied: bool) {
        self.files_done.fetch_add(1, Ordering::Relaxed);
        self.bytes_done.fetch_add(bytes, Ordering::Relaxed);
        if copied {
            self.objects_copied.fetch_add(1, Ordering::Relaxed);
            self.bytes_copied.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// `files` files of `bytes` bytes gone through elsewhere (a part another node took), of
    /// which `objects_copied` objects of `bytes_copied` bytes were transferred.
    pub fn add_done(&self, files: u64, bytes: u64, bytes_copied: u64, objects_copied: u64) {
        self.add_total(files, bytes);
        self.files_done.fetch_add(files, Ordering::Relaxed);
        self.bytes_done.fetch_add(bytes, Ordering::Relaxed);
        self.bytes_copied.fetch_add(bytes_copied, Ordering::Relaxed);
        self.objects_copied.fetch_add(objects_copied, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn snapshot(&self) -> ProgressSnapshot {
        ProgressSnapshot {
            files_total: self.files_total.load(Ordering::Relaxed),
            files_done: self.files_done.load(Ordering::Relaxed),
            bytes_total: self.bytes_total.load(Ordering::Relaxed),
            bytes_done: self.bytes_done.load(Ordering::Relaxed),
            bytes_copied: self.bytes_copied.load(Ordering::Relaxed),
            objects_copied: self.objects_copied.load(Ordering::Relaxed),
        }
    }
}
