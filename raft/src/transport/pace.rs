//! Pacing of snapshot streams: every snapshot a node sends (a replica moving to a new node, a
//! follower far behind) draws from one budget of bytes per second, so moving replicas leaves
//! the disk and network to foreground writes and queries.

use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// A node's budget for the snapshot bytes it sends.
#[derive(Debug, Default)]
pub struct Pacer {
    /// Bytes per second (`None`: unlimited), and when the budget is next free.
    state: Mutex<(Option<u64>, Option<Instant>)>,
}

impl Pacer {
    /// Sets the budget (`None`: unlimited).
    pub fn set_rate(&self, bytes_per_sec: Option<u64>) {
        self.state.lock().0 = bytes_per_sec.filter(|r| *r > 0);
    }

    /// The budget.
    pub fn rate(&self) -> Option<u64> {
        self.state.lock().0
    }

    /// Waits until `bytes` more may be sent: senders share the budget, each waiting its turn.
    pub async fn take(&self, bytes: u64) {
        let start = {
            let mut st = self.state.lock();
            let Some(rate) = st.0 else { return };
            let now = Instant::now();
            let start = st.1.filter(|t| *t > now).unwrap_or(now);
            st.1 = Some(start + Duration::from_secs_f64(bytes as f64 / rate as f64));
            start
        };
        tokio::time::sleep_until(start).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // On tokio's paused clock: the times below are the pacer's, whatever the machine's load.
    #[tokio::test(start_paused = true)]
    async fn senders_share_one_budget() {
        let p = std::sync::Arc::new(Pacer::default());
        let t0 = Instant::now();
        p.take(1 << 30).await;
        assert_eq!(t0.elapsed(), Duration::ZERO, "unlimited by default");
        p.set_rate(Some(4 << 20));
        // Two senders of 1 MiB in 128 KiB chunks: 2 MiB at 4 MiB/s. The last chunk starts
        // after 1.875 MiB of budget (sleeps never end early).
        let send = |p: std::sync::Arc<Pacer>| async move {
            for _ in 0..8 {
                p.take(128 << 10).await;
            }
        };
        let t0 = Instant::now();
        tokio::join!(send(p.clone()), send(p.clone()));
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(468) && took < Duration::from_millis(500),
            "{took:?}"
        );
        p.set_rate(None);
        let t0 = Instant::now();
        p.take(u64::MAX).await;
        assert_eq!(t0.elapsed(), Duration::ZERO);
    }
}
