//! InfluxDB line protocol, read as InfluxData's reference decoder
//! (`github.com/influxdata/line-protocol/v2`) reads it; the test suite checks every decode case
//! of its corpus.
//!
//! ```text
//! measurement[,tag=value...] field=value[,field=value...] [timestamp]
//! ```
//!
//! - A backslash escapes the separators of its place: `,` and space in a measurement; `,`, `=`
//!   and space in tag keys, tag values and field keys. Before any other byte (a backslash too)
//!   it is kept as it is.
//! - Names may not hold control characters (bytes 0-31 and 127); a tag value may, other than
//!   line ends. A tag key given twice refuses the line.
//! - Field values: floats (`1`, `-1.5`, `2e10`; decimal only: the reference decoder also takes
//!   Go's hexadecimal floats and `_` between digits, InfluxDB's server does not), signed
//!   integers (`1i`), unsigned
//!   integers (`1u`), booleans (`t`, `T`, `true`, `True`, `TRUE` and the same for false) and
//!   double-quoted strings (escapes `\"` and `\\`), which may hold line ends.
//! - The timestamp is a signed integer in the request's [`Precision`]; without one the point
//!   gets the receive time truncated to the precision ([`Precision::time_of`]).
//! - Lines of spaces, empty lines and comment lines (`#` then printable text) are skipped;
//!   `\r\n` line ends are accepted. A line indented by a tab is refused.
//!
//! The parser borrows from the request body: names and strings are copied only when they
//! contain escapes, and tags and fields live inline for up to 12 of each, so parsing a line
//! allocates nothing in the common case.

mod parser;
pub mod shape;
pub mod wire;
mod writer;

pub use parser::{parse_line, Lines, ParseError, ValueError};
pub use writer::WriteError;

use std::borrow::Cow;

use smallvec::SmallVec;

/// A field value.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue<'a> {
    /// 64-bit float (no suffix).
    Float(f64),
    /// Signed 64-bit integer (`i` suffix).
    Integer(i64),
    /// Unsigned 64-bit integer (`u` suffix).
    UInteger(u64),
    /// Boolean.
    Boolean(bool),
    /// String (double-quoted).
    String(Cow<'a, str>),
}

/// One parsed line.
#[derive(Debug, Clone, PartialEq)]
pub struct Line<'a> {
    /// Measurement (the table).
    pub measurement: Cow<'a, str>,
    /// Tags in the order written.
    pub tags: SmallVec<[(Cow<'a, str>, Cow<'a, str>); 12]>,
    /// Fields in the order written (at least one).
    pub fields: SmallVec<[(Cow<'a, str>, FieldValue<'a>); 12]>,
    /// Timestamp in the request's precision, if the line has one.
    pub timestamp: Option<i64>,
}

impl FieldValue<'_> {
    /// The value, owning its string.
    pub fn into_owned(self) -> FieldValue<'static> {
        match self {
            FieldValue::Float(v) => FieldValue::Float(v),
            FieldValue::Integer(v) => FieldValue::Integer(v),
            FieldValue::UInteger(v) => FieldValue::UInteger(v),
            FieldValue::Boolean(v) => FieldValue::Boolean(v),
            FieldValue::String(s) => FieldValue::String(Cow::Owned(s.into_owned())),
        }
    }
}

impl Line<'_> {
    /// The line, owning its names and values.
    pub fn into_owned(self) -> Line<'static> {
        let own = |s: Cow<'_, str>| -> Cow<'static, str> { Cow::Owned(s.into_owned()) };
        Line {
            measurement: own(self.measurement),
            tags: self.tags.into_iter().map(|(k, v)| (own(k), own(v))).collect(),
            fields: self.fields.into_iter().map(|(k, v)| (own(k), v.into_owned())).collect(),
            timestamp: self.timestamp,
        }
    }
}

/// Why a line was rejected; `line` is 1-based.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct LineError {
    /// Line number in the request body (1-based).
    pub line: usize,
    /// What is wrong with it.
    pub reason: String,
}

/// Unit of line-protocol timestamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// Nanoseconds (the default).
    #[default]
    Nanoseconds,
    /// Microseconds.
    Microseconds,
    /// Milliseconds.
    Milliseconds,
    /// Seconds.
    Seconds,
    /// Minutes (InfluxDB 1.x `m`).
    Minutes,
    /// Hours (InfluxDB 1.x `h`).
    Hours,
}

impl Precision {
    /// Parses the `precision` parameter of InfluxDB 1.x (`n`, `u`, `ms`, `s`, `m`, `h`) and 2.x
    /// (`ns`, `us`, `ms`, `s`).
    pub fn parse(s: &str) -> Option<Precision> {
        Some(match s {
            "n" | "ns" => Precision::Nanoseconds,
            "u" | "us" | "µ" | "µs" => Precision::Microseconds,
            "ms" => Precision::Milliseconds,
            "s" => Precision::Seconds,
            "m" => Precision::Minutes,
            "h" => Precision::Hours,
            _ => return None,
        })
    }

    /// Nanoseconds per unit.
    pub fn nanos(self) -> i64 {
        match self {
            Precision::Nanoseconds => 1,
            Precision::Microseconds => 1_000,
            Precision::Milliseconds => 1_000_000,
            Precision::Seconds => 1_000_000_000,
            Precision::Minutes => 60_000_000_000,
            Precision::Hours => 3_600_000_000_000,
        }
    }

    /// `ts` in nanoseconds, or `None` if it does not fit in an i64.
    pub fn to_nanos(self, ts: i64) -> Option<i64> {
        ts.checked_mul(self.nanos())
    }

    /// The time of a point with timestamp `ts` in this precision, received at `now_ns`: a point
    /// without a timestamp gets the receive time truncated to the precision, as InfluxDB gives
    /// it. `None` if the timestamp does not fit in nanoseconds.
    pub fn time_of(self, ts: Option<i64>, now_ns: i64) -> Option<i64> {
        match ts {
            Some(ts) => self.to_nanos(ts),
            None => Some(now_ns - now_ns.rem_euclid(self.nanos())),
        }
    }
}
