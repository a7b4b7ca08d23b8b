//! Background threads: one flushes sealed memtables (and seals old ones), one compacts.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::history::CompactionRecord;
use super::Inner;
use crate::Result;

/// The engine's background work: what its threads are asked to do, the condition they wait
/// on, the locks that serialise flushes and compactions, and the compactions done lately.
#[derive(Debug)]
pub(super) struct Background {
    pub(super) state: Mutex<BgState>,
    pub(super) cv: Condvar,
    /// One compaction (or time-window execution) at a time.
    pub(super) compaction: Mutex<()>,
    /// One flush at a time.
    pub(super) flush: Mutex<()>,
    pub(super) history: Mutex<std::collections::VecDeque<CompactionRecord>>,
}

#[derive(Debug, Default)]
pub(super) struct BgState {
    pub(super) shutdown: bool,
    pub(super) compaction_requested: bool,
}

impl Background {
    pub(super) fn new() -> Background {
        Background {
            state: Mutex::new(BgState { shutdown: false, compaction_requested: true }),
            cv: Condvar::new(),
            compaction: Mutex::new(()),
            flush: Mutex::new(()),
            history: super::history::new_history(),
        }
    }

    /// Wakes the threads (asking for a compaction round if `compaction`).
    pub(super) fn wake(&self, compaction: bool) {
        let mut bg = self.state.lock();
        if compaction {
            bg.compaction_requested = true;
        }
        self.cv.notify_all();
    }

    /// Tells the threads to stop.
    pub(super) fn shut_down(&self) {
        self.state.lock().shutdown = true;
        self.cv.notify_all();
    }

    pub(super) fn is_shut_down(&self) -> bool {
        self.state.lock().shutdown
    }
}

/// Starts the flush and compaction threads.
pub(super) fn spawn(inner: &Arc<Inner>) -> Vec<JoinHandle<()>> {
    let mut threads = Vec::new();
    let i = inner.clone();
    threads.push(spawn_named("ebb-flush", move || flush_loop(&i)));
    let i = inner.clone();
    threads.push(spawn_named("ebb-compact", move || compaction_loop(&i)));
    if let (true, crate::SyncMode::Interval(every)) = (inner.opts.wal, inner.opts.sync) {
        let i = inner.clone();
        threads.push(spawn_named("ebb-wal-sync", move || wal_sync_loop(&i, every)));
    }
    threads
}

/// Fsyncs the WAL every `every` (`SyncMode::Interval`).
fn wal_sync_loop(inner: &Inner, every: Duration) {
    loop {
        {
            let mut bg = inner.background.state.lock();
            if !bg.shutdown {
                inner.background.cv.wait_for(&mut bg, every);
            }
            if bg.shutdown {
                return;
            }
        }
        if inner.is_poisoned() {
            continue;
        }
        if let Err(e) = inner.sync_wal(None) {
            tracing::error!(error = %e, "WAL fsync failed");
        }
    }
}

fn spawn_named(name: &str, f: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(f)
        .unwrap_or_else(|e| panic!("cannot start thread {name}: {e}"))
}

fn tick(inner: &Inner) -> Duration {
    let age = inner.opts.memtable_max_age.map_or(Duration::from_secs(1), |a| a / 4);
    let age = match inner.opts.delete_deadline {
        Some(d) => age.min(d / 40),
        None => age,
    };
    age.clamp(Duration::from_millis(10), Duration::from_secs(1))
}

fn flush_loop(inner: &Inner) {
    loop {
        {
            let mut bg = inner.background.state.lock();
            if bg.shutdown {
                return;
            }
            if inner.current().imms.is_empty() {
                inner.background.cv.wait_for(&mut bg, tick(inner));
            }
            if bg.shutdown {
                return;
            }
        }
        if inner.is_poisoned() {
            continue;
        }
        let res = inner.seal_if_old().and_then(|_| {
            while inner.flush_oldest()? {}
            Ok(())
        });
        if inner.opts.delete_deadline.is_some() {
            // Deadlines expire with time, not only after flushes.
            inner.notify_bg(true);
        }
        // Readers release obsolete files at any time.
        if let Err(e) = inner.advance_ledger() {
            inner.poison(e);
        }
        match res {
            // Postponed (see `Inner::abort_step`): try again after a while.
            Err(e) if e.is_disk_full() && !inner.is_poisoned() => backoff(inner),
            Err(e) => {
                inner.poison(e);
            }
            Ok(()) => {}
        }
    }
}

/// Waits a second (or until shutdown) before retrying work a full disk stopped.
fn backoff(inner: &Inner) {
    let mut bg = inner.background.state.lock();
    if !bg.shutdown {
        inner.background.cv.wait_for(&mut bg, Duration::from_secs(1));
    }
}

fn compaction_loop(inner: &Inner) {
    loop {
        {
            let mut bg = inner.background.state.lock();
            while !bg.shutdown && !bg.compaction_requested {
                inner.background.cv.wait(&mut bg);
            }
            if bg.shutdown {
                return;
            }
            bg.compaction_requested = false;
        }
        loop {
            if inner.is_poisoned() || inner.background.is_shut_down() {
                break;
            }
            match inner.compact_once() {
                Ok(true) => inner.notify_bg(false),
                Ok(false) => break,
                Err(e) if e.is_disk_full() && !inner.is_poisoned() => {
                    backoff(inner);
                    inner.notify_bg(true);
                    break;
                }
                Err(e) => {
                    inner.poison(e);
                    break;
                }
            }
        }
    }
}

impl Inner {
    /// Runs pending flushes and compactions to completion in the calling thread.
    pub(super) fn wait_idle(&self) -> Result<()> {
        self.check_writable()?;
        self.seal_if_old()?;
        loop {
            while self.flush_oldest()? {}
            if !self.compact_once()? {
                return self.advance_ledger();
            }
        }
    }
}
