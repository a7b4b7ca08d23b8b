//! The series index of one table: tag values to series id and back.
//!
//! A series is identified by its tag values in the table's tag order (a tag absent from the
//! series is `None`). Its canonical encoding, `(tag number varint, length varint, bytes)*` for
//! the present tags in tag order, is what the catalog stores and what lookups hash.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use super::varint;
use crate::error::QueryError;

/// Tag values of one series: the tags it has, ascending by tag number. Only those are held,
/// so a series with one tag in a table of a thousand tags costs one value, not a thousand
/// slots (the tag numbers come from the network: one line may name the table's last tag).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TagValues(Arc<[(usize, Box<str>)]>);

impl TagValues {
    /// The value of tag number `tag`, if the series has it.
    pub fn get(&self, tag: usize) -> Option<&str> {
        let at = self.0.binary_search_by_key(&tag, |(i, _)| *i).ok()?;
        Some(&self.0[at].1)
    }

    /// `(tag number, value)` of each tag the series has, ascending by tag number.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &str)> + '_ {
        self.0.iter().map(|(i, v)| (*i, &**v))
    }

    /// Number of tags the series has.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True if the series has no tags.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// From values by position (the position is the tag number; `None`: the series lacks it).
impl FromIterator<Option<String>> for TagValues {
    fn from_iter<I: IntoIterator<Item = Option<String>>>(values: I) -> Self {
        let present = values.into_iter().enumerate();
        Self(present.filter_map(|(i, v)| Some((i, v?.into_boxed_str()))).collect())
    }
}

/// The series of one table.
#[derive(Debug, Default, Clone)]
pub struct SeriesIndex {
    /// Keyed by a randomly seeded fast hash: keys come from the network.
    by_key: HashMap<Vec<u8>, u64, ahash::RandomState>,
    tags_of: HashMap<u64, TagValues>,
    /// The cluster hash of each series (see `crate::model::hashspace`), as the catalog
    /// noted it: what a shard of a split cluster filters its scans by.
    hash_of: HashMap<u64, u64>,
    /// Series per `(tag number, value)`: `tag = value` without a pass over every series.
    postings: HashMap<(usize, String), BTreeSet<u64>>,
    /// Newest row time written per series since open (rows at or below it may exist already).
    max_time: HashMap<u64, i64>,
}

/// Canonical encoding of `(tag number, value)` pairs sorted by tag number.
pub fn encode_series_key<'a>(tags: impl Iterator<Item = (usize, &'a str)>, out: &mut Vec<u8>) {
    out.clear();
    for (i, v) in tags {
        varint::put(out, i as u64);
        varint::put(out, v.len() as u64);
        out.extend_from_slice(v.as_bytes());
    }
}

/// Decodes a canonical series key into values for `tag_count` tags.
pub fn decode_series_key(key: &[u8], tag_count: usize) -> Result<TagValues, QueryError> {
    let bad = || QueryError::Corrupt("undecodable series key".into());
    let mut vals: Vec<(usize, Box<str>)> = Vec::new();
    let mut pos = 0;
    while pos < key.len() {
        let i = varint::get(key, &mut pos).ok_or_else(bad)? as usize;
        let len = varint::get(key, &mut pos).ok_or_else(bad)? as usize;
        let end = pos.checked_add(len).ok_or_else(bad)?;
        let s = std::str::from_utf8(key.get(pos..end).ok_or_else(bad)?).map_err(|_| bad())?;
        pos = end;
        if i >= tag_count {
            return Err(bad());
        }
        vals.push((i, s.into()));
    }
    // Canonical keys name each tag once, ascending; a key written otherwise reads as the last
    // value it gives each tag.
    if vals.windows(2).any(|w| w[0].0 >= w[1].0) {
        vals.reverse();
        vals.sort_by_key(|(i, _)| *i);
        vals.dedup_by_key(|(i, _)| *i);
    }
    Ok(TagValues(vals.into()))
}

impl SeriesIndex {
    /// The series with canonical key `key`.
    pub fn get(&self, key: &[u8]) -> Option<u64> {
        self.by_key.get(key).copied()
    }

    /// Registers series `id` (loading the catalog, or after a committed write).
    pub fn insert(&mut self, key: Vec<u8>, id: u64, tags: TagValues) {
        self.by_key.insert(key, id);
        self.unpost(id);
        for (i, v) in tags.iter() {
            self.postings.entry((i, v.to_owned())).or_default().insert(id);
        }
        self.tags_of.insert(id, tags);
    }

    /// Removes series `id` from the postings of its tag values.
    fn unpost(&mut self, id: u64) {
        let Some(tags) = self.tags_of.get(&id) else { return };
        for (i, v) in tags.iter() {
            let key = (i, v.to_owned());
            if let Some(ids) = self.postings.get_mut(&key) {
                ids.remove(&id);
                if ids.is_empty() {
                    self.postings.remove(&key);
                }
            }
        }
    }

    /// Forgets series `id`.
    pub fn remove(&mut self, key: &[u8]) -> Option<u64> {
        let id = self.by_key.remove(key)?;
        self.unpost(id);
        self.tags_of.remove(&id);
        self.hash_of.remove(&id);
        self.max_time.remove(&id);
        Some(id)
    }

    /// The series whose tag number `tag` is `value`, ascending.
    pub fn with_tag(&self, tag: usize, value: &str) -> Vec<u64> {
        self.postings
            .get(&(tag, value.to_string()))
            .map_or_else(Vec::new, |ids| ids.iter().copied().collect())
    }

    /// Forgets series `id` (by id: its key is rebuilt from its tag values).
    pub fn remove_id(&mut self, id: u64) -> bool {
        let Some(tags) = self.tags_of.get(&id) else { return false };
        let mut key = Vec::new();
        encode_series_key(tags.iter(), &mut key);
        if self.by_key.get(&key) == Some(&id) {
            self.by_key.remove(&key);
        } else {
            self.by_key.retain(|_, v| *v != id); // a key stored in another form
        }
        self.unpost(id);
        self.tags_of.remove(&id);
        self.hash_of.remove(&id);
        self.max_time.remove(&id);
        true
    }

    /// Notes the cluster hash of series `id`.
    pub fn set_hash(&mut self, id: u64, hash: u64) {
        self.hash_of.insert(id, hash);
    }

    /// The cluster hash of series `id`, if noted.
    pub fn hash(&self, id: u64) -> Option<u64> {
        self.hash_of.get(&id).copied()
    }

    /// Tag values of series `id` (a tag added to the table after it, or one it lacks, is
    /// absent).
    pub fn tags(&self, id: u64) -> Option<&TagValues> {
        self.tags_of.get(&id)
    }

    /// Number of series.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Every `(series id, tag values)`.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &TagValues)> {
        self.tags_of.iter().map(|(id, t)| (*id, t))
    }

    /// The newest row time written to series `id` since open, if known.
    pub fn max_time(&self, id: u64) -> Option<i64> {
        self.max_time.get(&id).copied()
    }

    /// Records that rows up to `t` exist in series `id`.
    pub fn note_time(&mut self, id: u64, t: i64) {
        let e = self.max_time.entry(id).or_insert(t);
        *e = (*e).max(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_as_long_as_their_last_tag() {
        let mut k = Vec::new();
        encode_series_key([(0, "a"), (2, "x,y")].into_iter(), &mut k);
        let v = decode_series_key(&k, 4).unwrap();
        assert_eq!(v.iter().collect::<Vec<_>>(), [(0, "a"), (2, "x,y")]);
        assert_eq!((v.get(0), v.get(1), v.get(2), v.get(3)), (Some("a"), None, Some("x,y"), None));
        assert!(decode_series_key(&k, 2).is_err(), "tag number beyond the table's tags");
        assert!(decode_series_key(&[5], 9).is_err());
        let mut idx = SeriesIndex::default();
        idx.insert(k.clone(), 7, v);
        assert_eq!(idx.with_tag(2, "x,y"), vec![7]);
        assert!(idx.with_tag(0, "x,y").is_empty());
        assert_eq!(idx.tags(7).map(|t| t.len()), Some(2));
        assert_eq!(idx.get(&k), Some(7));
        idx.note_time(7, 5);
        idx.note_time(7, 3);
        assert_eq!(idx.max_time(7), Some(5));
        assert_eq!(idx.remove(&k), Some(7));
        assert!(idx.is_empty());
        assert!(idx.with_tag(2, "x,y").is_empty() && idx.postings.is_empty());
    }

    /// Tag numbers come from the network: a series with only the last of a table's thousand tags
    /// holds one value (it held a thousand slots, so 100,000 such series in one 2 MB write
    /// kept 2.4 GB).
    #[test]
    fn a_series_holds_only_the_tags_it_has() {
        let mut k = Vec::new();
        encode_series_key([(999, "v")].into_iter(), &mut k);
        let v = decode_series_key(&k, 1000).unwrap();
        assert_eq!(v.len(), 1);
        assert_eq!(std::mem::size_of_val(&*v.0), std::mem::size_of::<(usize, Box<str>)>());
        assert_eq!(v.get(999), Some("v"));
        // Not canonical: a tag twice (the last value counts), or out of order.
        let mut odd = Vec::new();
        encode_series_key([(4, "a"), (3, "b"), (4, "c")].into_iter(), &mut odd);
        let v = decode_series_key(&odd, 9).unwrap();
        assert_eq!(v.iter().collect::<Vec<_>>(), [(3, "b"), (4, "c")]);
        let dense: TagValues = vec![None, Some("x".to_string()), None].into_iter().collect();
        assert_eq!(dense.iter().collect::<Vec<_>>(), [(1, "x")]);
    }
}
