//! A limit on a test's running time. A test that stops making progress (an await that never
//! returns) would otherwise hold the whole run until CI's own limit, with nothing to show for
//! it; past its limit the watchdog writes the test's name and its last recorded steps to
//! stderr and aborts the process, so the run fails at once and says where.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Steps kept for the report.
const KEPT: usize = 32;

/// Armed while it lives; dropping it disarms it.
pub(crate) struct Watchdog {
    steps: Arc<Mutex<VecDeque<(Duration, String)>>>,
    started: Instant,
    _disarm: mpsc::Sender<()>,
}

impl Watchdog {
    /// Arms a limit of `limit` for the test running on this thread.
    pub(crate) fn arm(limit: Duration) -> Watchdog {
        let test = std::thread::current().name().unwrap_or("a test").to_string();
        let steps: Arc<Mutex<VecDeque<(Duration, String)>>> = Arc::default();
        let (tx, rx) = mpsc::channel::<()>();
        let seen = Arc::clone(&steps);
        std::thread::spawn(move || {
            // Only a timeout fires: a drop of the sender disconnects the channel.
            if rx.recv_timeout(limit) != Err(mpsc::RecvTimeoutError::Timeout) {
                return;
            }
            // Straight to stderr: the test harness captures only the print macros.
            let mut report = format!("\n{test} ran past its limit of {limit:?}; last steps:\n");
            for (at, step) in seen.lock().map(|s| s.clone()).unwrap_or_default() {
                report.push_str(&format!("  {:>8.1}s  {step}\n", at.as_secs_f64()));
            }
            report.push_str("aborting the test run\n");
            let _ = std::io::stderr().write_all(report.as_bytes());
            std::process::abort();
        });
        Watchdog { steps, started: Instant::now(), _disarm: tx }
    }

    /// Records a step of the test (the report shows the last few).
    pub(crate) fn step(&self, what: impl Into<String>) {
        if let Ok(mut s) = self.steps.lock() {
            if s.len() == KEPT {
                s.pop_front();
            }
            s.push_back((self.started.elapsed(), what.into()));
        }
    }
}
