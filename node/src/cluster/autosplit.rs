//! Shards that split by themselves: the metadata leader measures each shard's bytes and the
//! rows its leader writes a second, and plans the split of the shard furthest over a limit
//! ([`placement::split_next`]), one split at a time and not while replicas move. Splits then
//! run as `ALTER CLUSTER SPLIT SHARD` ones do (see [`super::split`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::meta::Meta;
use super::placement::{self, ShardLoad, SplitLimits};

/// How often loads are looked at.
const CHECK: Duration = Duration::from_secs(10);

/// The window over which a shard's write rate is measured.
const WINDOW: Duration = Duration::from_secs(60);

/// How long after planning a split the next may be planned (the new shard's leader settles,
/// and its rate is measured afresh).
const COOLDOWN: Duration = Duration::from_secs(120);

/// The split policy's state on the metadata leader.
#[derive(Debug)]
pub struct AutoSplit {
    limits: SplitLimits,
    /// Per shard: the leader that reported, its rows written, and when.
    base: BTreeMap<u64, (u64, u64, Instant)>,
    /// Per shard: rows a second over the last full window.
    rates: BTreeMap<u64, f64>,
    checked: Option<Instant>,
    planned: Option<Instant>,
}

impl AutoSplit {
    /// The policy with `limits`.
    pub fn new(limits: SplitLimits) -> AutoSplit {
        AutoSplit {
            limits,
            base: BTreeMap::new(),
            rates: BTreeMap::new(),
            checked: None,
            planned: None,
        }
    }

    /// Notes a report of `shard`'s leader `leader`: `rows` written so far, at `now`.
    fn note(&mut self, shard: u64, leader: u64, rows: u64, now: Instant) {
        match self.base.get(&shard) {
            Some(&(l, r, t)) if l == leader && rows >= r => {
                let dt = now.duration_since(t);
                if dt >= WINDOW {
                    self.rates.insert(shard, (rows - r) as f64 / dt.as_secs_f64());
                    self.base.insert(shard, (leader, rows, now));
                }
            }
            // A new leader (or a restarted one) counts from its own start.
            _ => {
                self.base.insert(shard, (leader, rows, now));
            }
        }
    }

    /// One look at the loads (on the metadata leader, every [`CHECK`]); returns true if it
    /// planned a split.
    pub async fn step(&mut self, meta: &Arc<Meta>) -> bool {
        if self.limits == SplitLimits::default() || !meta.is_leader() {
            return false;
        }
        if self.checked.is_some_and(|t| t.elapsed() < CHECK) {
            return false;
        }
        self.checked = Some(Instant::now());
        let v = meta.view();
        let Some(roots) = v.settings.map(|s| s.shards) else { return false };
        let busy = v.shards.values().any(|s| s.splitting() || s.untrimmed || s.target.is_some());
        let cooling = self.planned.is_some_and(|t| t.elapsed() < COOLDOWN);
        let nodes: Vec<u64> = v.active().map(|n| n.id).collect();
        let replies = super::rebalance::ask_replicas(meta, &v, &nodes).await;
        let now = Instant::now();
        let mut loads = Vec::new();
        for (n, reports) in replies {
            for l in reports.iter().filter(|l| l.leader == Some(n)) {
                self.note(l.shard, n, l.rows_written, now);
                let Some(s) = v.shards.get(&l.shard) else { continue };
                loads.push(ShardLoad {
                    id: l.shard,
                    bytes: l.bytes,
                    rows_per_sec: self.rates.get(&l.shard).copied(),
                    splittable: s.span().halves(roots).is_some() && !v.in_split(s.id),
                });
            }
        }
        if busy || cooling {
            return false;
        }
        let Some(shard) = placement::split_next(&loads, &self.limits) else { return false };
        let load = loads.iter().find(|l| l.id == shard);
        match super::split::plan(meta, shard).await {
            Ok(child) => {
                tracing::info!(shard, child, ?load, limits = ?self.limits, "shard over its limits: splitting it");
                self.planned = Some(Instant::now());
                self.rates.remove(&shard);
                self.base.remove(&shard);
                true
            }
            Err(e) => {
                tracing::warn!(shard, %e, "planning a split");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_measured_over_a_window_from_one_leader() {
        let mut a = AutoSplit::new(SplitLimits { bytes: None, rows_per_sec: Some(10) });
        let t0 = Instant::now();
        a.note(1, 7, 1_000, t0);
        a.note(1, 7, 2_000, t0 + Duration::from_secs(30));
        assert_eq!(a.rates.get(&1), None, "not a full window yet");
        a.note(1, 7, 13_000, t0 + Duration::from_secs(60));
        assert_eq!(a.rates.get(&1), Some(&200.0));
        // Another leader starts a new window; its counter is its own.
        a.note(1, 8, 5, t0 + Duration::from_secs(70));
        a.note(1, 8, 605, t0 + Duration::from_secs(130));
        assert_eq!(a.rates.get(&1), Some(&10.0));
        // A counter that went back (a restart) starts over.
        a.note(1, 8, 3, t0 + Duration::from_secs(200));
        assert_eq!(a.base[&1].1, 3);
    }
}
