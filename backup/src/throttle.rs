//! A bytes-per-second limit on what a backup reads and writes (a token bucket holding up to one
//! second of bytes), shared by every transfer of one backup, restore or verify.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// A transfer rate limit; `Throttle::none()` lets everything through.
#[derive(Debug)]
pub struct Throttle {
    rate: Option<u64>,
    bucket: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    /// Bytes that may pass now (negative: owed).
    tokens: f64,
    at: Instant,
}

impl Throttle {
    /// At most `bytes_per_sec` on average (`None`: unlimited).
    pub fn new(bytes_per_sec: Option<u64>) -> Throttle {
        let rate = bytes_per_sec.filter(|r| *r > 0);
        let tokens = rate.unwrap_or(0) as f64;
        Throttle { rate, bucket: Mutex::new(Bucket { tokens, at: Instant::now() }) }
    }

    /// No limit.
    pub fn none() -> Throttle {
        Throttle::new(None)
    }

    /// The limit, if any.
    pub fn rate(&self) -> Option<u64> {
        self.rate
    }

    /// Waits until `n` more bytes may pass.
    pub async fn take(&self, n: u64) {
        let wait = self.debit(n, Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }

    /// Takes `n` bytes from the bucket at `now`: how long the caller must wait for them.
    fn debit(&self, n: u64, now: Instant) -> Duration {
        let Some(rate) = self.rate else { return Duration::ZERO };
        let rate = rate as f64;
        let mut b = self.bucket.lock();
        let refill = now.saturating_duration_since(b.at).as_secs_f64() * rate;
        b.tokens = (b.tokens + refill).min(rate);
        b.at = now;
        b.tokens -= n as f64;
        if b.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-b.tokens / rate)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_is_kept_on_average() {
        let t = Throttle::new(Some(1000));
        let start = Instant::now();
        // The first second's worth passes at once; then each 500 bytes owe half a second.
        assert_eq!(t.debit(1000, start), Duration::ZERO);
        assert_eq!(t.debit(500, start), Duration::from_millis(500));
        // Half a second later the debt is paid and 500 more owe another half second.
        let later = start + Duration::from_millis(500);
        assert_eq!(t.debit(500, later), Duration::from_millis(500));
        // After a long pause the bucket holds one second at most.
        let much_later = later + Duration::from_secs(60);
        assert_eq!(t.debit(1000, much_later), Duration::ZERO);
        assert!(t.debit(1, much_later) > Duration::ZERO);
        assert_eq!(Throttle::none().debit(u64::MAX, start), Duration::ZERO);
    }
}
