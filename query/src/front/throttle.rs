//! Failed logins, by user and client address: after [`MAX_FAILURES`] wrong passwords (or
//! tokens) for one user from one address within [`WINDOW`], that user is refused from that
//! address for [`BLOCK`] without its credentials being checked, so guessing is slow and a flood
//! of wrong passwords cannot keep the server busy hashing; others behind the same address (a
//! NAT, an ingress) keep logging in. An address that fails [`MAX_ADDRESS_FAILURES`] times
//! within the window, whatever the users (spraying one password over many), is refused for all
//! of them. At most [`MAX_ADDRESSES`] records are kept (memory stays bounded); past that the
//! oldest go first. Password hashing itself runs at most [`HASHING`] at a time.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Failed logins of one user from one address within [`WINDOW`].
pub const MAX_FAILURES: u32 = 10;
/// Failed logins of one address, whatever the users, within [`WINDOW`].
pub const MAX_ADDRESS_FAILURES: u32 = 100;
/// The window failures are counted in.
pub const WINDOW: Duration = Duration::from_secs(60);
/// How long an address that failed too often is refused.
pub const BLOCK: Duration = Duration::from_secs(60);
/// Addresses tracked at most.
pub const MAX_ADDRESSES: usize = 10_000;
/// Password hashes verified at once (each Argon2id verification holds about 19 MiB).
pub const HASHING: usize = 8;

/// What a refused login is told.
pub fn too_many(wait: Duration) -> String {
    format!("too many failed login attempts: try again in {} s", wait.as_secs() + 1)
}

#[derive(Debug, Clone, Copy)]
struct Record {
    failures: u32,
    since: Instant,
    blocked_until: Option<Instant>,
}

/// What failures are counted by: a user (`""` for a token) at an address, or an address. The
/// user is kept as a hash of the name the client sent: a record costs the same whatever its
/// length.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    UserAt(u64, Option<IpAddr>),
    Address(Option<IpAddr>),
}

impl Key {
    fn user_at(user: &str, client: Option<IpAddr>) -> Key {
        Key::UserAt(xxhash_rust::xxh3::xxh3_64(user.as_bytes()), client)
    }
}

/// The failed logins of recent users and client addresses.
#[derive(Debug, Default)]
pub struct Throttle {
    records: Mutex<HashMap<Key, Record>>,
}

impl Throttle {
    /// If `user` is refused from `client` at `now`: for how much longer.
    pub fn blocked(&self, user: &str, client: Option<IpAddr>, now: Instant) -> Option<Duration> {
        let records = self.records.lock();
        [Key::user_at(user, client), Key::Address(client)]
            .iter()
            .filter_map(|k| records.get(k)?.blocked_until)
            .filter(|until| *until > now)
            .map(|until| until - now)
            .max()
    }

    /// Notes a failed login of `user` from `client` at `now`.
    pub fn failed(&self, user: &str, client: Option<IpAddr>, now: Instant) {
        let mut records = self.records.lock();
        Self::count(&mut records, Key::user_at(user, client), MAX_FAILURES, now);
        Self::count(&mut records, Key::Address(client), MAX_ADDRESS_FAILURES, now);
    }

    fn count(records: &mut HashMap<Key, Record>, client: Key, max: u32, now: Instant) {
        if records.len() >= MAX_ADDRESSES && !records.contains_key(&client) {
            records.retain(|_, r| {
                now.duration_since(r.since) < WINDOW || r.blocked_until.is_some_and(|u| u > now)
            });
            if records.len() >= MAX_ADDRESSES {
                let oldest = records.iter().min_by_key(|(_, r)| r.since).map(|(k, _)| k.clone());
                if let Some(k) = oldest {
                    records.remove(&k);
                }
            }
        }
        let r = records.entry(client.clone()).or_insert(Record {
            failures: 0,
            since: now,
            blocked_until: None,
        });
        if now.duration_since(r.since) >= WINDOW {
            *r = Record { failures: 0, since: now, blocked_until: r.blocked_until };
        }
        r.failures += 1;
        if r.failures >= max {
            r.blocked_until = Some(now + BLOCK);
            r.failures = 0;
            r.since = now;
            tracing::warn!(client = ?client, "too many failed logins: refusing for {} s", BLOCK.as_secs());
        }
    }

    /// Notes a successful login of `user` from `client`: its failures are forgotten.
    pub fn succeeded(&self, user: &str, client: Option<IpAddr>) {
        let mut records = self.records.lock();
        let key = Key::user_at(user, client);
        if records.get(&key).is_some_and(|r| r.blocked_until.is_none()) {
            records.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_failing_too_often_from_an_address_is_refused_for_a_while() {
        let t = Throttle::default();
        let (a, b) = (Some("10.0.0.1".parse().unwrap()), Some("10.0.0.2".parse().unwrap()));
        let now = Instant::now();
        for i in 0..MAX_FAILURES - 1 {
            t.failed("eve", a, now + Duration::from_secs(u64::from(i)));
        }
        assert_eq!(t.blocked("eve", a, now + Duration::from_secs(10)), None);
        t.failed("eve", a, now + Duration::from_secs(10));
        assert!(t.blocked("eve", a, now + Duration::from_secs(11)).is_some());
        let later = now + Duration::from_secs(11);
        assert_eq!(t.blocked("eve", b, later), None, "other addresses are not refused");
        assert_eq!(t.blocked("alice", a, later), None, "nor others behind the same address");
        assert_eq!(t.blocked("eve", a, now + Duration::from_secs(10) + BLOCK), None, "it ends");
        // Failures spread over more than the window never block.
        for i in 0..3 * MAX_FAILURES {
            t.failed("eve", b, now + WINDOW / MAX_FAILURES * 2 * i);
        }
        assert_eq!(t.blocked("eve", b, now + WINDOW * 6), None);
        // A success forgets the failures.
        for _ in 0..MAX_FAILURES - 1 {
            t.failed("bob", None, now);
        }
        t.succeeded("bob", None);
        t.failed("bob", None, now);
        assert_eq!(t.blocked("bob", None, now), None);
        // An address spraying many users is refused for all of them.
        let c = Some("10.0.0.3".parse().unwrap());
        for i in 0..MAX_ADDRESS_FAILURES {
            t.failed(&format!("user{i}"), c, now);
        }
        assert!(t.blocked("someone", c, now).is_some());
        // Memory stays bounded.
        for i in 0..(MAX_ADDRESSES as u32 + 100) {
            t.failed("eve", Some(IpAddr::from(i.to_be_bytes())), now);
        }
        assert!(t.records.lock().len() <= MAX_ADDRESSES);
    }
}
