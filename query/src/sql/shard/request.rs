//! What a SQL session asks of a shard, typed: a scan of one table by column names and tag
//! names (each shard numbers a table's tags its own way, and holds the columns it was written),
//! and a batch of points to write.

use serde::{Deserialize, Serialize};

use crate::lp::{Line, Precision};
use crate::model::schema::TableDef;
use crate::sql::pushdown::{TagPredicate, TimeBounds};

/// A predicate on a table's tags, by tag name: [`TagPredicate`] as a request carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TagFilter {
    /// `tag = value`.
    Eq(String, String),
    /// `tag != value`: series that have the tag with another value.
    NotEq(String, String),
    /// `tag IS NULL` (`true`) or `IS NOT NULL` (`false`).
    Null(String, bool),
    /// Both.
    And(Box<TagFilter>, Box<TagFilter>),
    /// Either.
    Or(Box<TagFilter>, Box<TagFilter>),
    /// Every series (`true`) or none.
    All(bool),
}

impl TagFilter {
    /// `p`, a predicate on the tags of `def`, by tag name.
    pub fn named(p: &TagPredicate, def: &TableDef) -> TagFilter {
        let name = |i: &usize| def.tags.get(*i).cloned().unwrap_or_default();
        let both = |a: &TagPredicate, b: &TagPredicate| {
            (Box::new(TagFilter::named(a, def)), Box::new(TagFilter::named(b, def)))
        };
        match p {
            TagPredicate::Eq(i, v) => TagFilter::Eq(name(i), v.clone()),
            TagPredicate::NotEq(i, v) => TagFilter::NotEq(name(i), v.clone()),
            TagPredicate::Null(i, null) => TagFilter::Null(name(i), *null),
            TagPredicate::And(a, b) => {
                let (a, b) = both(a, b);
                TagFilter::And(a, b)
            }
            TagPredicate::Or(a, b) => {
                let (a, b) = both(a, b);
                TagFilter::Or(a, b)
            }
            TagPredicate::All(keep) => TagFilter::All(*keep),
        }
    }

    /// The predicate on the tags of `def` (a shard's definition of the table). A tag `def`
    /// does not have is NULL in every series.
    pub fn resolve(&self, def: &TableDef) -> TagPredicate {
        let tag = |t: &str| def.tags.iter().position(|x| x == t);
        match self {
            TagFilter::Eq(t, v) => match tag(t) {
                Some(i) => TagPredicate::Eq(i, v.clone()),
                None => TagPredicate::All(false),
            },
            TagFilter::NotEq(t, v) => match tag(t) {
                Some(i) => TagPredicate::NotEq(i, v.clone()),
                None => TagPredicate::All(false),
            },
            TagFilter::Null(t, null) => match tag(t) {
                Some(i) => TagPredicate::Null(i, *null),
                None => TagPredicate::All(*null),
            },
            TagFilter::And(a, b) => {
                TagPredicate::And(Box::new(a.resolve(def)), Box::new(b.resolve(def)))
            }
            TagFilter::Or(a, b) => {
                TagPredicate::Or(Box::new(a.resolve(def)), Box::new(b.resolve(def)))
            }
            TagFilter::All(keep) => TagPredicate::All(*keep),
        }
    }
}

/// The version of the encoding ([`encode`]) of the requests nodes send each other; a node
/// refuses one it does not know.
pub const WIRE_VERSION: u32 = 1;

/// `request` as it travels between nodes (JSON: a field a newer node adds with a default is
/// read by an older one).
pub fn encode<T: Serialize>(request: &T) -> Vec<u8> {
    // Requests are plain data: encoding them cannot fail.
    serde_json::to_vec(request).unwrap_or_default()
}

/// The request `body` encodes in encoding `version`.
pub fn decode<T: serde::de::DeserializeOwned>(version: u32, body: &[u8]) -> crate::Result<T> {
    if version != WIRE_VERSION {
        return Err(crate::QueryError::Unsupported(format!(
            "a request in encoding version {version}; this node reads version {WIRE_VERSION}"
        )));
    }
    serde_json::from_slice(body)
        .map_err(|e| crate::QueryError::invalid(format!("an undecodable request: {e}")))
}

/// Asks a shard for its definition of one table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableRequest {
    /// The database.
    pub database: String,
    /// The table.
    pub name: String,
}

/// A scan of one table on one shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanRequest {
    /// The database.
    pub database: String,
    /// The table.
    pub table: String,
    /// The columns produced, in order (a column the shard does not have reads as NULL).
    pub columns: Vec<String>,
    /// The time window read.
    pub time: TimeBounds,
    /// Predicates on tags, all of which a series read meets.
    pub tags: Vec<TagFilter>,
    /// At most this many rows (only when every filter of the statement is applied by the
    /// scan).
    pub limit: Option<usize>,
    /// Each series' newest row only.
    pub newest_only: bool,
}

/// A write into one database: each point goes to the shard of its series; a bad point
/// refuses the request whole, nothing of it written.
#[derive(Debug, Clone)]
pub struct WriteRequest {
    /// The database.
    pub database: String,
    /// The points.
    pub points: Points,
    /// The unit of their timestamps.
    pub precision: Precision,
    /// The time of a point without one (ns since the epoch).
    pub now_ns: i64,
}

/// The points of a [`WriteRequest`].
#[derive(Debug, Clone)]
pub enum Points {
    /// A line-protocol request body, parsed once, where it is split between shards.
    Body(String),
    /// Points parsed already (the rows of an `INSERT`), each with its number in the request.
    Parsed(Vec<(usize, Line<'static>)>),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(tags: &[&str]) -> TableDef {
        TableDef {
            id: 1,
            database: "db".into(),
            name: "cpu".into(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            fields: Vec::new(),
            retention_ns: None,
            rollup: None,
        }
    }

    #[test]
    fn tag_predicates_travel_by_name_and_resolve_against_each_shards_numbering() {
        let here = def(&["host", "region"]);
        let p = TagPredicate::And(
            Box::new(TagPredicate::Eq(1, "eu".into())),
            Box::new(TagPredicate::Or(
                Box::new(TagPredicate::NotEq(0, "a".into())),
                Box::new(TagPredicate::Null(0, true)),
            )),
        );
        let named = TagFilter::named(&p, &here);
        assert_eq!(
            named,
            TagFilter::And(
                Box::new(TagFilter::Eq("region".into(), "eu".into())),
                Box::new(TagFilter::Or(
                    Box::new(TagFilter::NotEq("host".into(), "a".into())),
                    Box::new(TagFilter::Null("host".into(), true)),
                )),
            )
        );
        // Another shard numbers the tags the other way round.
        let there = def(&["region", "host"]);
        let back = TagFilter::named(&named.resolve(&there), &there);
        assert_eq!(back, named);
    }

    #[test]
    fn a_tag_a_shard_does_not_have_is_null_in_every_series() {
        let there = def(&["host"]);
        let resolve = |f: TagFilter| TagFilter::named(&f.resolve(&there), &there);
        let dc = || "dc".to_string();
        assert_eq!(resolve(TagFilter::Eq(dc(), "x".into())), TagFilter::All(false));
        assert_eq!(resolve(TagFilter::NotEq(dc(), "x".into())), TagFilter::All(false));
        assert_eq!(resolve(TagFilter::Null(dc(), true)), TagFilter::All(true));
        assert_eq!(resolve(TagFilter::Null(dc(), false)), TagFilter::All(false));
    }
}
