//! Batched fsync: appends queue their callbacks here; one thread syncs the files written since
//! its last round once and then reports every queued append durable (group commit).

use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

use openraft::storage::LogFlushed;

use crate::types::TypeConfig;

/// An append waiting for durability: the files it wrote and its callback.
pub(crate) struct FlushJob {
    pub files: Vec<Arc<File>>,
    pub done: LogFlushed<TypeConfig>,
}

/// Handle of the flush thread; the thread stops when the handle is dropped.
#[derive(Debug)]
pub(crate) struct Flusher {
    tx: Sender<FlushJob>,
}

impl Flusher {
    /// Starts the thread. A failed fsync sets `poisoned` and fails every queued append.
    pub fn start(poisoned: Arc<AtomicBool>) -> Flusher {
        let (tx, rx) = channel::<FlushJob>();
        std::thread::Builder::new()
            .name("ebb-raft-fsync".into())
            .spawn(move || run(rx, poisoned))
            .map(|_| ())
            .unwrap_or_else(|e| tracing::error!("cannot start the raft log fsync thread: {e}"));
        Flusher { tx }
    }

    /// Queues `job`; its callback runs once its files are synced.
    pub fn submit(&self, job: FlushJob) {
        if let Err(e) = self.tx.send(job) {
            // The thread is gone (it could not be started): report the append failed.
            e.0.done.log_io_completed(Err(std::io::Error::other(
                "raft log fsync thread is not running",
            )));
        }
    }
}

fn run(rx: Receiver<FlushJob>, poisoned: Arc<AtomicBool>) {
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        jobs.extend(rx.try_iter());
        let mut files: Vec<Arc<File>> = Vec::new();
        for f in jobs.iter().flat_map(|j| &j.files) {
            if !files.iter().any(|g| Arc::ptr_eq(f, g)) {
                files.push(f.clone());
            }
        }
        let mut failure = None;
        if poisoned.load(Ordering::Acquire) {
            failure = Some("an earlier fsync failed".to_string());
        }
        for f in &files {
            if failure.is_some() {
                break;
            }
            let synced = f.sync_data();
            if synced.is_ok() {
                ebb_storage::durable::synced_file(f);
            }
            if let Err(e) = synced {
                tracing::error!("raft log fsync failed, refusing further writes: {e}");
                poisoned.store(true, Ordering::Release);
                failure = Some(e.to_string());
            }
        }
        for j in jobs {
            let res = match &failure {
                None => Ok(()),
                Some(msg) => Err(std::io::Error::other(format!("raft log fsync: {msg}"))),
            };
            j.done.log_io_completed(res);
        }
    }
}
