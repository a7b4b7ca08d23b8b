//! Failed logins, by client address: after [`MAX_FAILURES`] wrong passwords or tokens within
//! [`WINDOW`], an address is refused for [`BLOCK`] without its credentials being checked, so
//! guessing is slow and a flood of wrong passwords cannot keep the server busy hashing. At most
//! [`MAX_ADDRESSES`] addresses are tracked (memory stays bounded); past that the oldest records
//! go first. Password hashing itself runs at most [`HASHING`] at a time.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Failed logins an address may make within [`WINDOW`].
pub const MAX_FAILURES: u32 = 10;
/// The window failures are counted in.
pub const WINDOW: Duration = Duration::from_secs(60);
/// How long an address that failed too often is refused.
pub const BLOCK: Duration = Duration::from_secs(60);
/// Addresses tracked at most.
pub const MAX_ADDRESSES: usize = 10_000;
/// Password hashes verified at once (each Argon2id verification holds about 19 MiB).
pub const HASHING: usize = 8;

#[derive(Debug, Clone, Copy)]
struct Record {
    failures: u32,
    since: Instant,
    blocked_until: Option<Instant>,
}

/// The failed logins of recent client addresses.
#[derive(Debug, Default)]
pub struct Throttle {
    records: Mutex<HashMap<Option<IpAddr>, Record>>,
}

impl Throttle {
    /// If `client` is refused at `now`: for how much longer.
    pub fn blocked(&self, client: Option<IpAddr>, now: Instant) -> Option<Duration> {
        let records = self.records.lock();
        let until = records.get(&client)?.blocked_until?;
        (until > now).then(|| until - now)
    }

    /// Notes a failed login of `client` at `now`.
    pub fn failed(&self, client: Option<IpAddr>, now: Instant) {
        let mut records = self.records.lock();
        if records.len() >= MAX_ADDRESSES && !records.contains_key(&client) {
            records.retain(|_, r| {
                now.duration_since(r.since) < WINDOW || r.blocked_until.is_some_and(|u| u > now)
            });
            if records.len() >= MAX_ADDRESSES {
                let oldest = records.iter().min_by_key(|(_, r)| r.since).map(|(k, _)| *k);
                if let Some(k) = oldest {
                    records.remove(&k);
                }
            }
        }
        let r = records.entry(client).or_insert(Record {
            failures: 0,
            since: now,
            blocked_until: None,
        });
        if now.duration_since(r.since) >= WINDOW {
            *r = Record { failures: 0, since: now, blocked_until: r.blocked_until };
        }
        r.failures += 1;
        if r.failures >= MAX_FAILURES {
            r.blocked_until = Some(now + BLOCK);
            r.failures = 0;
            r.since = now;
            tracing::warn!(client = ?client, "too many failed logins: refusing the address for {} s", BLOCK.as_secs());
        }
    }

    /// Notes a successful login of `client`: its failures are forgotten.
    pub fn succeeded(&self, client: Option<IpAddr>) {
        let mut records = self.records.lock();
        if records.get(&client).is_some_and(|r| r.blocked_until.is_none()) {
            records.remove(&client);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_failing_too_often_is_refused_for_a_while() {
        let t = Throttle::default();
        let (a, b) = (Some("10.0.0.1".parse().unwrap()), Some("10.0.0.2".parse().unwrap()));
        let now = Instant::now();
        for i in 0..MAX_FAILURES - 1 {
            t.failed(a, now + Duration::from_secs(u64::from(i)));
        }
        assert_eq!(t.blocked(a, now + Duration::from_secs(10)), None);
        t.failed(a, now + Duration::from_secs(10));
        assert!(t.blocked(a, now + Duration::from_secs(11)).is_some());
        assert_eq!(t.blocked(b, now + Duration::from_secs(11)), None, "others are not refused");
        assert_eq!(t.blocked(a, now + Duration::from_secs(10) + BLOCK), None, "it ends");
        // Failures spread over more than the window never block.
        for i in 0..3 * MAX_FAILURES {
            t.failed(b, now + WINDOW / MAX_FAILURES * 2 * i);
        }
        assert_eq!(t.blocked(b, now + WINDOW * 6), None);
        // A success forgets the failures.
        for _ in 0..MAX_FAILURES - 1 {
            t.failed(None, now);
        }
        t.succeeded(None);
        t.failed(None, now);
        assert_eq!(t.blocked(None, now), None);
        // Memory stays bounded.
        for i in 0..(MAX_ADDRESSES as u32 + 100) {
            t.failed(Some(IpAddr::from(i.to_be_bytes())), now);
        }
        assert!(t.records.lock().len() <= MAX_ADDRESSES);
    }
}
