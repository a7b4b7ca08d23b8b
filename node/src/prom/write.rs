//! Remote write: a `WriteRequest` as line protocol, in bodies of bounded size.

use std::borrow::Cow;

use ebb_query::lp::{FieldValue, Line};

use super::is_stale_marker;
use super::proto::{TimeSeries, WriteRequest};

/// Labels that would collide with the columns a sample is stored in.
pub const RESERVED_LABELS: [&str; 3] = ["time", "value", "stale"];

/// A remote write as line protocol, in bodies of about a chunk's size each, built one at a
/// time ([`Chunks::next_body`]) so a request whose text would be far larger than its protobuf
/// (every sample repeats its series' labels) is never held whole.
#[derive(Debug)]
pub struct Chunks<'a> {
    req: &'a WriteRequest,
    chunk: usize,
    /// The next series, and its next sample.
    at: (usize, usize),
    /// What was left out so far.
    pub out: Converted,
}

/// What a remote write left out, and how many samples its bodies hold.
#[derive(Debug, Default)]
pub struct Converted {
    /// Samples in the bodies built so far.
    pub samples: usize,
    /// NaN or infinite samples (not staleness markers) left out.
    pub non_finite: usize,
    /// Series left out, with why (the first few).
    pub refused: Vec<String>,
    /// Series left out in all.
    pub refused_series: usize,
    /// Samples of the series left out.
    pub refused_samples: usize,
}

/// How many refused series a [`Converted`] names.
const NAMED_REFUSALS: usize = 5;

/// About how many bytes of line protocol `req` makes: each sample's line repeats its series'
/// names and values. Known before anything is built, to refuse a request that expands too far.
pub fn text_size(req: &WriteRequest) -> usize {
    req.timeseries
        .iter()
        .map(|ts| {
            let names: usize = ts.labels.iter().map(|l| l.name.len() + l.value.len() + 2).sum();
            (names + 48).saturating_mul(ts.samples.len())
        })
        .fold(0usize, usize::saturating_add)
}

/// The lines of `req` in bodies of about `chunk` bytes. A sample is `value=`, a staleness
/// marker `stale=true`.
pub fn to_line_protocol(req: &WriteRequest, chunk: usize) -> Chunks<'_> {
    Chunks { req, chunk, at: (0, 0), out: Converted::default() }
}

impl Chunks<'_> {
    /// The next body, or `None` when every sample is in one.
    pub fn next_body(&mut self) -> Option<String> {
        let mut body = String::new();
        while let Some(ts) = self.req.timeseries.get(self.at.0) {
            let (name, tags) = match series(ts) {
                Ok(s) => s,
                Err(why) => {
                    // Counted once, at its first visit.
                    if self.at.1 == 0 {
                        self.out.refuse(format!("series {}: {why}", describe(ts)));
                        self.out.refused_samples += ts.samples.len();
                    }
                    self.at = (self.at.0 + 1, 0);
                    continue;
                }
            };
            let mut line = Line {
                measurement: Cow::Borrowed(name),
                tags: tags.into(),
                fields: Default::default(),
                timestamp: None,
            };
            while let Some(s) = ts.samples.get(self.at.1) {
                self.at.1 += 1;
                let field = match s.value {
                    v if is_stale_marker(v) => ("stale", FieldValue::Boolean(true)),
                    v if v.is_finite() => ("value", FieldValue::Float(v)),
                    _ => {
                        self.out.non_finite += 1;
                        continue;
                    }
                };
                line.fields.clear();
                line.fields.push((Cow::Borrowed(field.0), field.1));
                line.timestamp = Some(s.timestamp);
                // `series` checked the names, and the value is finite: this cannot fail, but
                // if it did, the line is left out and the series named.
                if let Err(why) = line.write_to(&mut body) {
                    self.out.refuse(format!("series {}: {why}", describe(ts)));
                    self.at.1 = ts.samples.len();
                    break;
                }
                self.out.samples += 1;
                if body.len() >= self.chunk {
                    return Some(body);
                }
            }
            self.at = (self.at.0 + 1, 0);
        }
        (!body.is_empty()).then_some(body)
    }
}

impl Converted {
    fn refuse(&mut self, why: String) {
        self.refused_series += 1;
        if self.refused.len() < NAMED_REFUSALS {
            self.refused.push(why);
        }
    }

    /// Why some series were not written, for the `400` answer; `None` if all were.
    pub fn refusal(&self) -> Option<String> {
        if self.refused_series == 0 {
            return None;
        }
        let more = self.refused_series - self.refused.len();
        let tail = if more > 0 { format!("; and {more} more") } else { String::new() };
        Some(format!(
            "{} series not written (the rest was): {}{tail}",
            self.refused_series,
            self.refused.join("; ")
        ))
    }
}

/// A series' tags, in line-protocol form.
type Tags<'a> = Vec<(Cow<'a, str>, Cow<'a, str>)>;

/// Why a series cannot be stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum SeriesError {
    /// A label without a name, or whose name another label of the series has.
    #[error("an empty or repeated label name {0:?}")]
    LabelName(String),
    /// A label name or value with a line break.
    #[error("a line break in a label, which line protocol cannot carry")]
    LineBreak,
    /// A label named like a column a sample is stored in ([`RESERVED_LABELS`]).
    #[error("label {0:?} is a column name (time, value, stale); rename it with relabelling")]
    Reserved(String),
    /// A metric name a line-protocol reader would take for a comment.
    #[error("a metric name cannot start with '#'")]
    CommentName,
    /// No `__name__` label, or an empty one.
    #[error("no metric name (__name__)")]
    NoName,
}

/// The metric name and tags of a series, or why it cannot be stored. Empty label values are
/// left out: to Prometheus a label with an empty value is no label.
fn series(ts: &TimeSeries) -> Result<(&str, Tags<'_>), SeriesError> {
    let mut name = None;
    let mut tags = Vec::with_capacity(ts.labels.len());
    let mut seen = std::collections::HashSet::with_capacity(ts.labels.len());
    for l in &ts.labels {
        if l.name.is_empty() || !seen.insert(l.name.as_str()) {
            return Err(SeriesError::LabelName(l.name.clone()));
        }
        if l.name.contains(['\n', '\r']) || l.value.contains(['\n', '\r']) {
            return Err(SeriesError::LineBreak);
        }
        if l.name == "__name__" {
            name = Some(l.value.as_str());
        } else if l.value.is_empty() {
        } else if RESERVED_LABELS.contains(&l.name.as_str()) {
            return Err(SeriesError::Reserved(l.name.clone()));
        } else {
            tags.push((Cow::Borrowed(l.name.as_str()), Cow::Borrowed(l.value.as_str())));
        }
    }
    match name {
        Some(n) if n.starts_with('#') => Err(SeriesError::CommentName),
        Some(n) if !n.is_empty() => Ok((n, tags)),
        _ => Err(SeriesError::NoName),
    }
}

/// A series as Prometheus shows it, cut short.
fn describe(ts: &TimeSeries) -> String {
    let labels: Vec<String> =
        ts.labels.iter().map(|l| format!("{}={:?}", l.name, l.value)).collect();
    let mut s = format!("{{{}}}", labels.join(", "));
    if s.len() > 200 {
        let mut cut = 200;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::super::proto::{Label, Sample};
    use super::super::STALE_NAN_BITS;
    use super::*;
    use ebb_query::lp::Lines;

    fn ts(labels: &[(&str, &str)], samples: &[(f64, i64)]) -> TimeSeries {
        TimeSeries {
            labels: labels
                .iter()
                .map(|(n, v)| Label { name: n.to_string(), value: v.to_string() })
                .collect(),
            samples: samples
                .iter()
                .map(|&(value, timestamp)| Sample { value, timestamp })
                .collect(),
        }
    }

    #[test]
    fn samples_become_lines_that_parse_back() {
        let stale = f64::from_bits(STALE_NAN_BITS);
        let req = WriteRequest {
            timeseries: vec![
                ts(
                    &[("__name__", "http_requests_total"), ("job", "a b,c=d"), ("code", "")],
                    &[(1.5, 1000), (stale, 2000), (f64::NAN, 3000), (f64::INFINITY, 4000)],
                ),
                ts(&[("__name__", "job:rate5m"), ("instance", "h:9090")], &[(-2e-300, 5)]),
                ts(&[("job", "x")], &[(1.0, 1)]),
                ts(&[("__name__", "up"), ("value", "x")], &[(1.0, 1)]),
                ts(&[("__name__", "up"), ("path", "a\nb")], &[(1.0, 1)]),
                ts(&[("__name__", "up"), ("", "x")], &[(1.0, 1)]),
            ],
            metadata: vec![],
        };
        let mut chunks = to_line_protocol(&req, 1 << 20);
        let text: String = std::iter::from_fn(|| chunks.next_body()).collect();
        let c = chunks.out;
        assert_eq!((c.samples, c.non_finite, c.refused_series, c.refused_samples), (3, 2, 4, 4));
        let lines: Vec<Line> = Lines::new(&text).map(|l| l.unwrap().1).collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0].measurement, "http_requests_total");
        assert_eq!(lines[0].tags.to_vec(), vec![("job".into(), "a b,c=d".into())]);
        assert_eq!(lines[0].fields[0], ("value".into(), FieldValue::Float(1.5)));
        assert_eq!(lines[0].timestamp, Some(1000));
        assert_eq!(lines[1].fields[0], ("stale".into(), FieldValue::Boolean(true)));
        assert_eq!(lines[2].measurement, "job:rate5m");
        assert_eq!(lines[2].fields[0], ("value".into(), FieldValue::Float(-2e-300)));
        let why = c.refusal().unwrap();
        assert!(why.contains("4 series not written"), "{why}");
        assert!(why.contains("no metric name") && why.contains("\"value\""), "{why}");
        assert!(why.contains("line break"), "{why}");
    }

    #[test]
    fn bodies_stay_near_the_chunk_size() {
        let samples: Vec<(f64, i64)> = (0..10_000).map(|i| (i as f64, i)).collect();
        let req = WriteRequest {
            timeseries: vec![ts(&[("__name__", "m"), ("host", &"h".repeat(100))], &samples)],
            metadata: vec![],
        };
        let mut chunks = to_line_protocol(&req, 64 << 10);
        let bodies: Vec<String> = std::iter::from_fn(|| chunks.next_body()).collect();
        assert_eq!(chunks.out.samples, 10_000);
        assert!(bodies.len() > 10, "{}", bodies.len());
        assert!(bodies.iter().all(|b| b.len() < (64 << 10) + 200));
        let lines: usize = bodies.iter().map(|b| Lines::new(b).count()).sum();
        assert_eq!(lines, 10_000);
        // The estimate is near the text made.
        let made: usize = bodies.iter().map(String::len).sum();
        assert!(
            text_size(&req) >= made && text_size(&req) < 2 * made,
            "{} {made}",
            text_size(&req)
        );
    }
}
