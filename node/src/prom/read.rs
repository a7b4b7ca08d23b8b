//! Remote read: each query of a `ReadRequest` as SQL, run through the front door as the
//! caller, the rows gathered into series.
//!
//! A query's `__name__` matchers choose tables (every table of the database with a float
//! `value` column, filtered by them); its other matchers become `WHERE` conditions on the
//! tags, with Prometheus' meaning of the empty string: a series without a label has it empty,
//! so `job=""` matches series without `job`, and a matcher on a label a table does not have is
//! decided once for the whole table.

use std::collections::BTreeMap;

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{DataType, Float64Type, TimestampNanosecondType};
use ebb_query::front::Session;
use ebb_query::sql::{quote_ident as ident, quote_literal as literal};
use ebb_query::QueryError;
use futures::StreamExt;

use super::proto::label_matcher::Type as MatchType;
use super::proto::{Label, LabelMatcher, Query, QueryResult, ReadResponse, Sample, TimeSeries};
use super::STALE_NAN_BITS;

/// Most samples one read request may return (Prometheus' own default is 50,000,000; this
/// bounds the memory one request holds, about 40 bytes a sample).
pub const MAX_SAMPLES: usize = 5_000_000;

/// Most bytes of series labels and samples one read request may return.
pub const MAX_RESPONSE_BYTES: usize = 256 << 20;
/// Most queries in one read request, and matchers in one query.
pub const MAX_QUERIES: usize = 64;

/// Largest compiled regular expression of a matcher.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Why a read failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// A matcher's regular expression does not compile.
    #[error("matcher {name}=~{pattern:?}: {reason}")]
    BadRegex {
        /// The label.
        name: String,
        /// The expression.
        pattern: String,
        /// Why it does not compile.
        reason: String,
    },
    /// The answer would hold more than [`MAX_SAMPLES`] samples or [`MAX_RESPONSE_BYTES`].
    #[error("the query matches more than {0}: narrow its time range or series")]
    TooLarge(String),
    /// More queries or matchers than a request may hold, or a matcher of an unknown type.
    #[error("{0}")]
    BadRequest(String),
    /// The SQL failed (access, availability, limits).
    #[error(transparent)]
    Query(#[from] QueryError),
}

/// Answers remote reads on a session of the caller.
pub struct Reader<'a> {
    session: &'a Session,
    /// Samples returned so far, against [`MAX_SAMPLES`].
    samples: usize,
    /// Bytes of labels and samples returned so far, against [`MAX_RESPONSE_BYTES`].
    bytes: usize,
}

/// A table that can answer reads: its name and tag (label) columns.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Table {
    name: String,
    labels: Vec<String>,
    has_stale: bool,
}

impl<'a> Reader<'a> {
    /// A reader on `session`, whose default database is the one read.
    pub fn new(session: &'a Session) -> Self {
        Reader { session, samples: 0, bytes: 0 }
    }

    /// Answers every query of a request, in order.
    pub async fn read(&mut self, queries: &[Query]) -> Result<ReadResponse, ReadError> {
        if queries.len() > MAX_QUERIES || queries.iter().any(|q| q.matchers.len() > MAX_QUERIES) {
            return Err(ReadError::BadRequest(format!(
                "at most {MAX_QUERIES} queries per request and {MAX_QUERIES} matchers per query"
            )));
        }
        let tables = self.tables().await?;
        let mut results = Vec::with_capacity(queries.len());
        for q in queries {
            results.push(self.query(&tables, q).await?);
        }
        Ok(ReadResponse { results })
    }

    /// The tables of the database that hold samples: those with a float `value` column.
    async fn tables(&self) -> Result<Vec<Table>, ReadError> {
        let has = |schema: &datafusion::arrow::datatypes::Schema, name: &str, ty: &DataType| {
            schema.field_with_name(name).is_ok_and(|f| f.data_type() == ty)
        };
        Ok(self
            .session
            .tables()
            .await?
            .into_iter()
            .filter(|(_, schema)| has(schema, "value", &DataType::Float64))
            .map(|(name, schema)| Table {
                name,
                has_stale: has(&schema, "stale", &DataType::Boolean),
                labels: schema
                    .fields()
                    .iter()
                    .filter(|f| f.data_type() == &DataType::Utf8 && f.name() != "time")
                    .map(|f| f.name().clone())
                    .collect(),
            })
            .collect())
    }

    async fn query(&mut self, tables: &[Table], q: &Query) -> Result<QueryResult, ReadError> {
        let matchers: Vec<Matcher> =
            q.matchers.iter().map(Matcher::new).collect::<Result<_, _>>()?;
        let (names, others): (Vec<&Matcher>, Vec<&Matcher>) =
            matchers.iter().partition(|m| m.name == "__name__");
        let mut timeseries = Vec::new();
        for t in tables.iter().filter(|t| names.iter().all(|m| m.matches(&t.name))) {
            let mut conds = vec![format!(
                "time >= to_timestamp_millis({}) AND time <= to_timestamp_millis({})",
                q.start_timestamp_ms, q.end_timestamp_ms
            )];
            let mut none = false;
            for m in &others {
                match t.labels.contains(&m.name) {
                    true => conds.push(m.condition()),
                    // No series of the table has the label: all have it empty.
                    false => none |= !m.matches(""),
                }
            }
            if none {
                continue;
            }
            self.series_of(t, &conds.join(" AND "), &mut timeseries).await?;
        }
        Ok(QueryResult { timeseries })
    }

    /// Appends the series of table `t` with rows matching `cond`, samples in time order.
    async fn series_of(
        &mut self,
        t: &Table,
        cond: &str,
        out: &mut Vec<TimeSeries>,
    ) -> Result<(), ReadError> {
        let mut cols: Vec<String> = vec!["time".into(), "value".into()];
        cols.push(if t.has_stale { "stale".into() } else { "NULL AS stale".into() });
        cols.extend(t.labels.iter().map(|l| ident(l)));
        let sql = format!(
            "SELECT {} FROM {} WHERE {cond} LIMIT {}",
            cols.join(", "),
            ident(&t.name),
            MAX_SAMPLES - self.samples + 1
        );
        let mut stream = self.session.execute(&sql).await?.stream;
        let mut series: BTreeMap<Vec<Option<String>>, Vec<Sample>> = BTreeMap::new();
        while let Some(batch) = stream.next().await {
            let batch = batch.map_err(QueryError::from)?;
            self.samples += batch.num_rows();
            self.bytes += batch.num_rows() * 16;
            if self.samples > MAX_SAMPLES {
                return Err(ReadError::TooLarge(format!("{MAX_SAMPLES} samples")));
            }
            let time = batch.column(0).as_primitive_opt::<TimestampNanosecondType>();
            let value = batch.column(1).as_primitive_opt::<Float64Type>();
            let (Some(time), Some(value)) = (time, value) else { continue };
            let stale = match batch.column(2).data_type() {
                DataType::Boolean => batch.column(2).as_boolean_opt(),
                _ => None,
            };
            let labels: Vec<_> =
                (3..batch.num_columns()).map(|i| batch.column(i).as_string_opt::<i32>()).collect();
            for r in 0..batch.num_rows() {
                let v =
                    match (value.is_valid(r), stale.is_some_and(|s| s.is_valid(r) && s.value(r))) {
                        (_, true) => f64::from_bits(STALE_NAN_BITS),
                        (true, false) => value.value(r),
                        (false, false) => continue,
                    };
                let key: Vec<Option<String>> = labels
                    .iter()
                    .map(|c| c.filter(|c| c.is_valid(r)).map(|c| c.value(r).to_string()))
                    .collect();
                let ms = time.value(r).div_euclid(1_000_000);
                let sample = Sample { value: v, timestamp: ms };
                match series.get_mut(&key) {
                    Some(samples) => samples.push(sample),
                    None => {
                        // A new series: its labels count once.
                        self.bytes += key.iter().flatten().map(|v| v.len() + 16).sum::<usize>();
                        if self.bytes > MAX_RESPONSE_BYTES {
                            return Err(ReadError::TooLarge(format!("{MAX_RESPONSE_BYTES} bytes")));
                        }
                        series.insert(key, vec![sample]);
                    }
                }
            }
        }
        for (key, mut samples) in series {
            samples.sort_by_key(|s| s.timestamp);
            let mut labels: Vec<Label> = t
                .labels
                .iter()
                .zip(key)
                .filter_map(|(n, v)| v.map(|value| Label { name: n.clone(), value }))
                .collect();
            labels.push(Label { name: "__name__".into(), value: t.name.clone() });
            labels.sort_by(|a, b| a.name.cmp(&b.name));
            out.push(TimeSeries { labels, samples });
        }
        Ok(())
    }
}

/// A label matcher, its regular expression compiled (anchored, as Prometheus anchors them).
struct Matcher {
    kind: MatchType,
    name: String,
    value: String,
    regex: Option<regex::Regex>,
}

impl Matcher {
    fn new(m: &LabelMatcher) -> Result<Matcher, ReadError> {
        let kind = MatchType::try_from(m.r#type).map_err(|_| {
            ReadError::BadRequest(format!("matcher on {:?}: unknown type {}", m.name, m.r#type))
        })?;
        let regex = match kind {
            MatchType::Re | MatchType::Nre => Some(
                regex::RegexBuilder::new(&format!("^(?:{})$", m.value))
                    .size_limit(REGEX_SIZE_LIMIT)
                    .build()
                    .map_err(|e| ReadError::BadRegex {
                        name: m.name.clone(),
                        pattern: m.value.clone(),
                        reason: e.to_string(),
                    })?,
            ),
            MatchType::Eq | MatchType::Neq => None,
        };
        Ok(Matcher { kind, name: m.name.clone(), value: m.value.clone(), regex })
    }

    /// Whether a label value (empty for a missing label) matches.
    fn matches(&self, v: &str) -> bool {
        match (self.kind, &self.regex) {
            (MatchType::Eq, _) => v == self.value,
            (MatchType::Neq, _) => v != self.value,
            (MatchType::Re, Some(r)) => r.is_match(v),
            (MatchType::Nre, Some(r)) => !r.is_match(v),
            _ => false,
        }
    }

    /// The matcher as a SQL condition on its tag column (NULL where a series lacks the label).
    fn condition(&self) -> String {
        let (col, empty) = (ident(&self.name), self.matches(""));
        let test = match self.kind {
            MatchType::Eq | MatchType::Neq if self.value.is_empty() => String::new(),
            MatchType::Eq => format!("{col} = {}", literal(&self.value)),
            MatchType::Neq => format!("{col} <> {}", literal(&self.value)),
            MatchType::Re => format!("{col} ~ {}", literal(&format!("^(?:{})$", self.value))),
            MatchType::Nre => format!("{col} !~ {}", literal(&format!("^(?:{})$", self.value))),
        };
        match (test.is_empty(), empty) {
            (true, true) => format!("{col} IS NULL"),
            (true, false) => format!("{col} IS NOT NULL"),
            (false, true) => format!("({col} IS NULL OR {test})"),
            (false, false) => format!("({col} IS NOT NULL AND {test})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(kind: MatchType, name: &str, value: &str) -> Matcher {
        Matcher::new(&LabelMatcher { r#type: kind as i32, name: name.into(), value: value.into() })
            .unwrap()
    }

    #[test]
    fn matchers_treat_missing_labels_as_empty() {
        assert_eq!(m(MatchType::Eq, "job", "").condition(), "\"job\" IS NULL");
        assert_eq!(m(MatchType::Neq, "job", "").condition(), "\"job\" IS NOT NULL");
        assert_eq!(
            m(MatchType::Eq, "job", "a'b").condition(),
            "(\"job\" IS NOT NULL AND \"job\" = 'a''b')"
        );
        assert_eq!(
            m(MatchType::Neq, "job", "a").condition(),
            "(\"job\" IS NULL OR \"job\" <> 'a')"
        );
        assert_eq!(
            m(MatchType::Re, "job", "a|").condition(),
            "(\"job\" IS NULL OR \"job\" ~ '^(?:a|)$')"
        );
        assert_eq!(
            m(MatchType::Nre, "job", ".*").condition(),
            "(\"job\" IS NOT NULL AND \"job\" !~ '^(?:.*)$')"
        );
        // Anchored, as Prometheus anchors: "node" does not match "node_exporter".
        assert!(!m(MatchType::Re, "job", "node").matches("node_exporter"));
        assert!(m(MatchType::Nre, "job", "node").matches(""));
        assert!(m(MatchType::Re, "__name__", "up|go_.*").matches("go_goroutines"));
        let bad =
            LabelMatcher { r#type: MatchType::Re as i32, name: "a".into(), value: "(".into() };
        assert!(matches!(Matcher::new(&bad), Err(ReadError::BadRegex { .. })));
        let huge = LabelMatcher {
            r#type: MatchType::Re as i32,
            name: "a".into(),
            value: "\\w{1000}{1000}".into(),
        };
        assert!(matches!(Matcher::new(&huge), Err(ReadError::BadRegex { .. })));
        assert_eq!(ident("a\"b"), "\"a\"\"b\"");
    }
}
