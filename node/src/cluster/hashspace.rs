//! Which shard holds a series: the series hash space and the shards' spans of it.
//!
//! A series' hash is xxh3 of its key (the measurement and the tags sorted by key). A cluster is
//! created with `R` shards, its roots: root `r` (shard id `r + 1`) holds the series whose hash is
//! `r` modulo `R` (so clusters made before shards could split route as they always did). A
//! shard splits in two by halving its span, the range of hashes it holds within its root; the
//! halves stay in the root, so a series never changes root, and the spans of a root always tile
//! its whole hash range, every hash in exactly one span.

use std::collections::BTreeMap;

pub use ebb_query::model::hashspace::{series_hash, Span};

/// Errors in a shard map.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MapError {
    /// A root's spans leave hashes to no shard, or give some to two.
    #[error("root {root}: spans do not tile its hashes ({why})")]
    NotTiled {
        /// The root.
        root: u32,
        /// What is wrong.
        why: String,
    },
    /// A span names a root the cluster does not have.
    #[error("shard {shard}: root {root} out of range (the cluster has {roots})")]
    NoSuchRoot {
        /// The shard.
        shard: u64,
        /// Its root.
        root: u32,
        /// Roots of the cluster.
        roots: u32,
    },
}

/// Shards by the hashes they hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardMap {
    roots: u32,
    /// Per root, `(lo, shard)` sorted by `lo`, starting at 0.
    spans: Vec<Vec<(u64, u64)>>,
}

impl ShardMap {
    /// The map of `shards` (shard id and span) over `roots` roots, checked to tile every root.
    pub fn new(
        roots: u32,
        shards: impl IntoIterator<Item = (u64, Span)>,
    ) -> Result<Self, MapError> {
        let mut by_root: BTreeMap<u32, Vec<(Span, u64)>> = BTreeMap::new();
        for (id, s) in shards {
            if s.root >= roots {
                return Err(MapError::NoSuchRoot { shard: id, root: s.root, roots });
            }
            by_root.entry(s.root).or_default().push((s, id));
        }
        let mut spans = Vec::with_capacity(roots as usize);
        for root in 0..roots {
            let mut list = by_root.remove(&root).unwrap_or_default();
            list.sort_unstable();
            let tiled = |why: &str| MapError::NotTiled { root, why: why.to_string() };
            let mut next = Some(0u64);
            for (s, _) in &list {
                match next {
                    Some(n) if n == s.lo => next = s.end,
                    Some(n) if n > s.lo => return Err(tiled("spans overlap")),
                    _ => return Err(tiled("a gap between spans")),
                }
            }
            if list.is_empty() || next.is_some() {
                return Err(tiled("hashes up to the largest are held by no shard"));
            }
            spans.push(list.into_iter().map(|(s, id)| (s.lo, id)).collect());
        }
        Ok(ShardMap { roots, spans })
    }

    /// The map of a cluster whose `roots` shards (ids `1..=roots`) never split.
    pub fn unsplit(roots: u32) -> Self {
        let roots = roots.max(1);
        ShardMap { roots, spans: (0..roots).map(|r| vec![(0, u64::from(r) + 1)]).collect() }
    }

    /// The number of roots.
    pub fn roots(&self) -> u32 {
        self.roots
    }

    /// The shard holding the series with `hash`.
    pub fn shard_of(&self, hash: u64) -> u64 {
        let root = (hash % u64::from(self.roots)) as usize;
        let list = &self.spans[root];
        let at = list.partition_point(|(lo, _)| *lo <= hash);
        list[at.saturating_sub(1)].1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn unsplit_maps_route_by_hash_modulo_roots() {
        let map = ShardMap::unsplit(8);
        for h in [0u64, 1, 7, 8, 9, u64::MAX, 1 << 63] {
            assert_eq!(map.shard_of(h), h % 8 + 1);
        }
        let built = ShardMap::new(8, (0..8).map(|r| (u64::from(r) + 1, Span::root(r)))).unwrap();
        assert_eq!(built, map);
    }

    #[test]
    fn series_hash_ignores_tag_order() {
        let a = series_hash("cpu", &[("host", "a"), ("dc", "x")]);
        assert_eq!(a, series_hash("cpu", &[("dc", "x"), ("host", "a")]));
        assert_ne!(a, series_hash("cpu", &[("host", "b"), ("dc", "x")]));
        assert_ne!(a, series_hash("mem", &[("host", "a"), ("dc", "x")]));
    }

    #[test]
    fn maps_that_do_not_tile_are_refused() {
        let (a, b) = Span::root(0).halves(2).unwrap();
        let gap = ShardMap::new(2, [(1, a), (2, Span::root(1))]);
        assert!(matches!(gap, Err(MapError::NotTiled { root: 0, .. })), "{gap:?}");
        let overlap = ShardMap::new(2, [(1, Span::root(0)), (3, b), (2, Span::root(1))]);
        assert!(matches!(overlap, Err(MapError::NotTiled { root: 0, .. })), "{overlap:?}");
        let stray = ShardMap::new(1, [(1, Span::root(0)), (2, Span::root(1))]);
        assert!(matches!(stray, Err(MapError::NoSuchRoot { shard: 2, .. })), "{stray:?}");
    }

    proptest! {
        /// After any sequence of splits the spans tile every root: each hash is held by exactly
        /// one shard, the one the map names; a split hands each hash to one half.
        #[test]
        fn splits_keep_every_hash_in_exactly_one_shard(
            roots in 1u32..6,
            splits in proptest::collection::vec(any::<prop::sample::Index>(), 0..24),
            probes in proptest::collection::vec(any::<u64>(), 64),
        ) {
            let mut shards: Vec<(u64, Span)> =
                (0..roots).map(|r| (u64::from(r) + 1, Span::root(r))).collect();
            for pick in splits {
                let i = pick.index(shards.len());
                let (id, span) = shards[i];
                let Some((a, b)) = span.halves(roots) else { continue };
                for h in &probes {
                    if span.holds(*h, roots) {
                        prop_assert!(a.holds(*h, roots) != b.holds(*h, roots));
                    }
                }
                shards[i] = (id, a);
                let next = shards.iter().map(|(id, _)| *id).max().unwrap_or(0) + 1;
                shards.push((next, b));
            }
            let map = ShardMap::new(roots, shards.iter().copied()).unwrap();
            let mut probes = probes;
            probes.extend([0, u64::MAX, u64::from(roots), 1 << 63]);
            for h in probes {
                let holders: Vec<u64> =
                    shards.iter().filter(|(_, s)| s.holds(h, roots)).map(|(id, _)| *id).collect();
                prop_assert_eq!(holders, vec![map.shard_of(h)]);
            }
        }
    }
}
