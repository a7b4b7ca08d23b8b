//! Wall-clock time for delete deadlines and the deletion ledger, replaceable by a manual clock in
//! tests so deadline properties run on logical time.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, from the system or from a [`ManualClock`].
#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> u64 + Send + Sync>);

impl Clock {
    /// The system clock.
    pub fn system() -> Self {
        Clock(Arc::new(|| {
            SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
        }))
    }

    /// A clock that reads `manual`.
    pub fn manual(manual: &ManualClock) -> Self {
        let t = manual.0.clone();
        Clock(Arc::new(move || t.load(Ordering::Acquire)))
    }

    /// Current time in milliseconds since the Unix epoch.
    #[inline]
    pub fn now_ms(&self) -> u64 {
        (self.0)()
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::system()
    }
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Clock({})", self.now_ms())
    }
}

/// A clock moved by hand (tests, simulations).
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock reading `start_ms`.
    pub fn new(start_ms: u64) -> Self {
        ManualClock(Arc::new(AtomicU64::new(start_ms)))
    }

    /// Moves the clock forward by `ms`.
    pub fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::AcqRel);
    }

    /// Current reading.
    pub fn now_ms(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}
