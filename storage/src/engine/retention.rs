//! Retention: per key prefix (a table), rows whose delete key (time) is older than
//! `now - retention` are invisible at once, refused on write, dropped by compactions, and purged
//! from the files by time-window deletes the caller issues with [`Engine::purge_expired`] (under
//! Raft the leader proposes them, so every replica purges at the same sequence number).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::{Engine, Inner};
use crate::batch::{BatchOp, WriteBatch};
use crate::version::VersionEdit;
use crate::{Error, Result};

/// A retention rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rule {
    prefix: Vec<u8>,
    retention_ms: u64,
}

/// The rules of a recovered manifest.
pub(super) fn rules_of(map: &BTreeMap<Vec<u8>, u64>) -> Vec<Rule> {
    map.iter().map(|(p, ms)| Rule { prefix: p.clone(), retention_ms: *ms }).collect()
}

/// The smallest key above every key starting with `prefix` (empty: none, the end).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return end;
        }
    }
    Vec::new()
}

impl Engine {
    /// Sets (or with `None` removes) the retention of every key starting with `prefix`: rows
    /// older than `now - retention` by their delete key are invisible at once and purged later.
    /// Rules must not nest (one prefix may not start with another).
    pub fn set_retention(
        &self,
        prefix: impl Into<Bytes>,
        retention: Option<Duration>,
    ) -> Result<()> {
        let prefix: Bytes = prefix.into();
        let inner = &self.inner;
        inner.check_writable()?;
        let nested = inner.deletes.rules.read().iter().any(|r| {
            r.prefix != prefix.as_ref()
                && (r.prefix.starts_with(&prefix) || prefix.starts_with(&r.prefix))
        });
        if nested {
            return Err(Error::InvalidArgument(
                "retention prefixes may not nest inside one another".into(),
            ));
        }
        let ms = retention.map(|d| d.as_millis().min(u64::MAX as u128) as u64);
        if ms == Some(0) {
            return Err(Error::InvalidArgument("retention must be positive".into()));
        }
        let edit = VersionEdit { retention: vec![(prefix.to_vec(), ms)], ..Default::default() };
        inner.commit(edit, &Default::default(), None)?;
        let rules = rules_of(&inner.meta.lock().retention);
        *inner.deletes.rules.write() = Arc::new(rules);
        Ok(())
    }

    /// The retention rules: key prefix and retention.
    pub fn retention_rules(&self) -> Vec<(Vec<u8>, Duration)> {
        self.inner
            .rules()
            .iter()
            .map(|r| (r.prefix.clone(), Duration::from_millis(r.retention_ms)))
            .collect()
    }

    /// Writes one time-window delete per retention rule at sequence numbers `seq, seq + 1, ...`,
    /// covering every row of the prefix older than its horizon now, so the background drops
    /// their pages. Returns how many sequence numbers it used (0: no rules).
    pub fn purge_expired(&self, seq: u64) -> Result<u64> {
        let batch = self.expired_batch(self.inner.opts.clock.now_ms());
        if batch.is_empty() {
            return Ok(0);
        }
        self.write(&batch, seq)?;
        Ok(batch.len() as u64)
    }

    /// The time-window deletes [`Engine::purge_expired`] writes at `now_ms` (issued then), for
    /// a caller that sequences writes itself, as a replicated shard does.
    pub fn expired_batch(&self, now_ms: u64) -> WriteBatch {
        let mut batch = WriteBatch::new();
        for r in self.inner.deletes.rules.read().iter() {
            let horizon = self.inner.horizon(r, now_ms);
            batch.delete_time_range(0, horizon, r.prefix.clone(), prefix_end(&r.prefix));
        }
        if !batch.is_empty() {
            batch.set_issued_at(now_ms);
        }
        batch
    }
}

impl Inner {
    /// Delete key below which rows of `r` have expired at `now_ms`.
    fn horizon(&self, r: &Rule, now_ms: u64) -> u64 {
        self.opts.time_to_delete_key.convert(now_ms.saturating_sub(r.retention_ms))
    }

    /// The rule covering `key`, if any.
    fn rule_for<'a>(rules: &'a [Rule], key: &[u8]) -> Option<&'a Rule> {
        rules.iter().find(|r| key.starts_with(&r.prefix))
    }

    /// The current rules (a reader keeps the list it started with).
    pub(crate) fn rules(&self) -> Arc<Vec<Rule>> {
        self.deletes.rules.read().clone()
    }

    /// True if `key` has expired under `rules` now.
    pub(crate) fn expired(&self, rules: &[Rule], key: &[u8]) -> bool {
        match Self::rule_for(rules, key) {
            None => false,
            Some(r) => {
                let now = self.opts.clock.now_ms();
                self.opts.delete_key.extract(key) < self.horizon(r, now)
            }
        }
    }

    /// True if no rule in `rules` can have expired a key in `[lo, hi]` whose delete key is at
    /// least `min_dkey` (a rule whose prefix range meets the keys must cover both ends, and its
    /// horizon must lie at or below `min_dkey`).
    pub(crate) fn keeps_all(
        &self,
        rules: &[Rule],
        (lo, hi): (&[u8], &[u8]),
        min_dkey: u64,
    ) -> bool {
        let now = self.opts.clock.now_ms();
        rules.iter().all(|r| {
            let end = prefix_end(&r.prefix);
            let meets = r.prefix.as_slice() <= hi && (end.is_empty() || lo < end.as_slice());
            !meets
                || (lo.starts_with(&r.prefix)
                    && hi.starts_with(&r.prefix)
                    && min_dkey >= self.horizon(r, now))
        })
    }

    /// Refuses a batch writing a row older than its retention horizon at the batch's issue time
    /// (so a replayed log entry gets the decision it got the first time).
    pub(super) fn check_retention(&self, batch: &WriteBatch) -> Result<()> {
        let rules = self.rules();
        if rules.is_empty() {
            return Ok(());
        }
        let now = batch.issued_at().unwrap_or_else(|| self.opts.clock.now_ms());
        for op in batch.ops() {
            if let BatchOp::Put { key, .. } = op {
                if let Some(r) = Self::rule_for(&rules, key) {
                    let (delete_key, horizon) =
                        (self.opts.delete_key.extract(key), self.horizon(r, now));
                    if delete_key < horizon {
                        return Err(Error::BeyondRetention { delete_key, horizon });
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn prefix_end_is_the_next_prefix() {
        assert_eq!(prefix_end(b"ab"), b"ac".to_vec());
        assert_eq!(prefix_end(&[1, 0xFF]), vec![2]);
        assert_eq!(prefix_end(&[0xFF, 0xFF]), Vec::<u8>::new());
        assert_eq!(prefix_end(b""), Vec::<u8>::new());
    }
}
