//! The series hash space a cluster's shards divide between them: a series' hash, and the span
//! of hashes a shard holds (see the node's shard map for how spans tile the roots).
//!
//! A series' hash is xxh3 of its key (the measurement and the tags sorted by key); the router
//! hashes line-protocol lines with [`series_hash`], and a shard hashes the series of its
//! catalog with [`hash_of_series`], to the same value.

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use xxhash_rust::xxh3::xxh3_64;

use crate::model::schema::TableDef;
use crate::model::series::TagValues;

/// The hash of the series of `measurement` with `tags` (tag order does not matter).
/// The router hashes every line it routes, so a usual series is hashed on the stack.
pub fn series_hash<K: AsRef<str>, V: AsRef<str>>(measurement: &str, tags: &[(K, V)]) -> u64 {
    let mut sorted: SmallVec<[(&str, &str); 16]> =
        tags.iter().map(|(k, v)| (k.as_ref(), v.as_ref())).collect();
    // Writers usually send tags sorted by key, as line protocol recommends.
    if !sorted.is_sorted() {
        sorted.sort_unstable();
    }
    let mut key: SmallVec<[u8; 512]> = SmallVec::new();
    key.extend_from_slice(measurement.as_bytes());
    for (k, v) in sorted {
        key.push(0);
        key.extend_from_slice(k.as_bytes());
        key.push(0);
        key.extend_from_slice(v.as_bytes());
    }
    xxh3_64(&key)
}

/// The hashes a shard holds: those of root `root` (hash modulo the root count) in
/// `[lo, end)` (`end` `None`: up to the largest hash).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Span {
    /// The root (0-based).
    pub root: u32,
    /// Smallest hash held.
    pub lo: u64,
    /// First hash past the span, if any.
    pub end: Option<u64>,
}

impl Span {
    /// All of root `root`.
    pub fn root(root: u32) -> Span {
        Span { root, lo: 0, end: None }
    }

    /// True if the span holds `hash` (of a series of root `root`).
    pub fn holds(&self, hash: u64, roots: u32) -> bool {
        hash % u64::from(roots.max(1)) == u64::from(self.root)
            && hash >= self.lo
            && self.end.is_none_or(|e| hash < e)
    }

    /// The two halves of the span, split at the middle of its hash range; `None` if it is too
    /// narrow to split (a span must keep at least `roots` hashes, so each half still holds
    /// hashes of its root).
    pub fn halves(&self, roots: u32) -> Option<(Span, Span)> {
        let end = self.end.map_or(1u128 << 64, u128::from);
        let width = end - u128::from(self.lo);
        if width < 2 * u128::from(roots.max(1)) {
            return None;
        }
        let mid = u64::try_from(u128::from(self.lo) + width / 2).ok()?;
        Some((Span { end: Some(mid), ..*self }, Span { lo: mid, ..*self }))
    }
}

/// The hash of series `tags` (by tag number) of table `def`: [`series_hash`] of its
/// measurement and named tags.
pub fn hash_of_series(def: &TableDef, tags: &TagValues) -> u64 {
    let named: Vec<(&str, &str)> =
        tags.iter().filter_map(|(i, v)| Some((def.tags.get(i)?.as_str(), v))).collect();
    series_hash(def.hash_name(), &named)
}

/// The hashes a shard answers a query for: `span` of a cluster with `roots` roots. A shard
/// whose span is being split still holds rows of both halves; a query names the span it
/// wants from each shard so none is counted twice (see the node's shard splits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HashFilter {
    /// The cluster's root count.
    pub roots: u32,
    /// The span.
    pub span: Span,
}

impl HashFilter {
    /// True if series hash `hash` is in the span.
    pub fn holds(&self, hash: u64) -> bool {
        self.span.holds(hash, self.roots)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_series_hash_as_lines_do() {
        let def = TableDef {
            id: 1,
            database: "db".into(),
            name: "cpu".into(),
            tags: vec!["host".into(), "dc".into(), "rack".into()],
            fields: Vec::new(),
            retention_ns: None,
            rollup: None,
        };
        let tags: TagValues =
            [Some("a".to_string()), Some("x".to_string()), None].into_iter().collect();
        assert_eq!(hash_of_series(&def, &tags), series_hash("cpu", &[("dc", "x"), ("host", "a")]));
    }

    /// The hash as first defined: what routing tables and split shards already hold.
    fn reference(measurement: &str, tags: &[(String, String)]) -> u64 {
        let mut sorted: Vec<(&str, &str)> = tags.iter().map(|(k, v)| (&k[..], &v[..])).collect();
        sorted.sort_unstable();
        let mut key = measurement.as_bytes().to_vec();
        for (k, v) in sorted {
            key.extend([&[0u8][..], k.as_bytes(), &[0], v.as_bytes()].concat());
        }
        xxh3_64(&key)
    }

    proptest::proptest! {
        #[test]
        fn the_series_hash_does_not_change(
            m in "[a-z]{1,12}",
            tags in proptest::collection::vec(("[a-z_]{0,40}", ".{0,200}"), 0..24),
        ) {
            proptest::prop_assert_eq!(series_hash(&m, &tags), reference(&m, &tags));
            let mut sorted = tags.clone();
            sorted.sort();
            proptest::prop_assert_eq!(series_hash(&m, &sorted), reference(&m, &tags));
        }
    }

    /// Hashes are on disk (shard spans) and on the wire: these values may never change.
    #[test]
    fn golden_series_hashes() {
        let got = [
            series_hash::<&str, &str>("cpu", &[]),
            series_hash("cpu", &[("host", "a")]),
            series_hash("cpu", &[("host", "a"), ("dc", "x")]),
            series_hash("m\u{e9}t\u{e9}o", &[("ville", "Z\u{fc}rich"), ("", "")]),
        ];
        assert_eq!(got, GOLDEN, "{got:#x?}");
    }

    const GOLDEN: [u64; 4] =
        [0xecaa9c725d358abe, 0xfdd6f8839b407710, 0x0b64208843f2427c, 0x3e73998cd40f708e];

    #[test]
    fn halves_split_a_span_in_two() {
        let (a, b) = Span::root(1).halves(4).unwrap();
        assert_eq!((a.lo, a.end, b.lo, b.end), (0, Some(1 << 63), 1 << 63, None));
        for h in [1u64, 5, (1 << 63) + 1, u64::MAX - 2] {
            assert!(Span::root(1).holds(h, 4));
            assert!(a.holds(h, 4) != b.holds(h, 4));
        }
        assert!(Span { root: 0, lo: 0, end: Some(3) }.halves(2).is_none());
    }
}
