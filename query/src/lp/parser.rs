//! The line-protocol parser (see the module docs of [`crate::lp`]).

use std::borrow::Cow;

use smallvec::SmallVec;

use super::{FieldValue, Line, LineError};

/// Why a line does not parse (the `reason` of its [`LineError`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// The line starts with a separator.
    #[error("missing measurement")]
    MissingMeasurement,
    /// A tag key without `=`.
    #[error("tag {key:?} has no value")]
    TagWithoutValue {
        /// The tag key.
        key: String,
    },
    /// A tag whose key is empty.
    #[error("empty tag key")]
    EmptyTagKey,
    /// A tag whose value is empty.
    #[error("tag {key:?} has an empty value")]
    EmptyTagValue {
        /// The tag key.
        key: String,
    },
    /// The measurement and tags are not followed by a space.
    #[error("expected a space and the field set")]
    ExpectedFieldSet,
    /// Nothing after the space that ends the tags.
    #[error("missing field set")]
    MissingFieldSet,
    /// A field after a comma without a key.
    #[error("empty field key")]
    EmptyFieldKey,
    /// A field key without `=`.
    #[error("field {key:?} has no value")]
    FieldWithoutValue {
        /// The field key.
        key: String,
    },
    /// A field value that does not parse.
    #[error("field {key:?}: {error}")]
    Field {
        /// The field key.
        key: String,
        /// What is wrong with the value.
        #[source]
        error: ValueError,
    },
    /// A byte other than a space after the field set.
    #[error("unexpected {found:?} after the field set")]
    AfterFieldSet {
        /// The byte (as a character).
        found: char,
    },
    /// A timestamp that is not a signed 64-bit integer.
    #[error("invalid timestamp {text:?}")]
    InvalidTimestamp {
        /// The timestamp as written.
        text: String,
        /// Why it does not parse.
        #[source]
        error: std::num::ParseIntError,
    },
}

/// Why a field value does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValueError {
    /// Nothing after `=`.
    #[error("missing value")]
    Missing,
    /// An `i`-suffixed value that is not a signed 64-bit integer.
    #[error("invalid integer {text:?}")]
    Integer {
        /// The value as written.
        text: String,
        /// Why it does not parse.
        #[source]
        error: std::num::ParseIntError,
    },
    /// A `u`-suffixed value that is not an unsigned 64-bit integer.
    #[error("invalid unsigned integer {text:?}")]
    UInteger {
        /// The value as written.
        text: String,
        /// Why it does not parse.
        #[source]
        error: std::num::ParseIntError,
    },
    /// A value that is neither a number nor a boolean, and not quoted.
    #[error("invalid value {text:?} (strings need double quotes)")]
    Unquoted {
        /// The value as written.
        text: String,
    },
    /// A value that starts as a number but is not a finite float.
    #[error("invalid float {text:?}")]
    Float {
        /// The value as written.
        text: String,
    },
    /// A string without its closing double quote.
    #[error("unterminated string")]
    UnterminatedString,
}

/// Iterator over the lines of a request body, each with its 1-based line number, skipping
/// empty and comment lines.
pub struct Lines<'a> {
    rest: &'a str,
    line_no: usize,
}

impl<'a> Lines<'a> {
    /// Lines of `body`.
    pub fn new(body: &'a str) -> Self {
        Lines { rest: body, line_no: 0 }
    }
}

impl<'a> Iterator for Lines<'a> {
    type Item = Result<(usize, Line<'a>), LineError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.rest.is_empty() {
                return None;
            }
            self.line_no += 1;
            let (line, rest) = match self.rest.find('\n') {
                Some(i) => (&self.rest[..i], &self.rest[i + 1..]),
                None => (self.rest, ""),
            };
            self.rest = rest;
            let line = line.strip_suffix('\r').unwrap_or(line);
            let trimmed = line.trim_start();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let no = self.line_no;
            return Some(
                parse_line(trimmed)
                    .map(|l| (no, l))
                    .map_err(|e| LineError { line: no, reason: e.to_string() }),
            );
        }
    }
}

/// Parses one line (without its line end).
pub fn parse_line(line: &str) -> Result<Line<'_>, ParseError> {
    let b = line.as_bytes();
    let mut pos = 0;
    let measurement = take_name(line, &mut pos, &MEASUREMENT_STOPS);
    if measurement.is_empty() {
        return Err(ParseError::MissingMeasurement);
    }
    let mut tags = SmallVec::new();
    while pos < b.len() && b[pos] == b',' {
        pos += 1;
        let key = take_name(line, &mut pos, &KEY_STOPS);
        if pos >= b.len() || b[pos] != b'=' {
            return Err(ParseError::TagWithoutValue { key: key.into_owned() });
        }
        pos += 1;
        let value = take_name(line, &mut pos, &KEY_STOPS);
        if key.is_empty() {
            return Err(ParseError::EmptyTagKey);
        }
        if value.is_empty() {
            return Err(ParseError::EmptyTagValue { key: key.into_owned() });
        }
        tags.push((key, value));
    }
    if pos >= b.len() || b[pos] != b' ' {
        return Err(ParseError::ExpectedFieldSet);
    }
    while pos < b.len() && b[pos] == b' ' {
        pos += 1;
    }
    let mut fields = SmallVec::new();
    loop {
        let key = take_name(line, &mut pos, &KEY_STOPS);
        if key.is_empty() {
            return Err(if fields.is_empty() {
                ParseError::MissingFieldSet
            } else {
                ParseError::EmptyFieldKey
            });
        }
        if pos >= b.len() || b[pos] != b'=' {
            return Err(ParseError::FieldWithoutValue { key: key.into_owned() });
        }
        pos += 1;
        let value = match field_value(line, &mut pos) {
            Ok(v) => v,
            Err(error) => return Err(ParseError::Field { key: key.into_owned(), error }),
        };
        fields.push((key, value));
        if pos < b.len() && b[pos] == b',' {
            pos += 1;
            continue;
        }
        break;
    }
    let timestamp = if pos < b.len() {
        if b[pos] != b' ' {
            return Err(ParseError::AfterFieldSet { found: char::from(b[pos]) });
        }
        let ts = line[pos..].trim();
        if ts.is_empty() {
            None
        } else {
            let invalid = |error| ParseError::InvalidTimestamp { text: ts.to_string(), error };
            Some(ts.parse::<i64>().map_err(invalid)?)
        }
    } else {
        None
    };
    Ok(Line { measurement, tags, fields, timestamp })
}

/// Bytes that end a name, as a table indexed by byte (one load per byte scanned).
type StopSet = [bool; 256];

const fn stop_set(stops: &[u8]) -> StopSet {
    let mut set = [false; 256];
    let mut i = 0;
    while i < stops.len() {
        set[stops[i] as usize] = true;
        i += 1;
    }
    set
}

/// What ends a measurement name.
const MEASUREMENT_STOPS: StopSet = stop_set(b", ");
/// What ends a tag key, tag value or field key.
const KEY_STOPS: StopSet = stop_set(b",= ");

/// Takes a name up to the first unescaped byte in `stops`, unescaping a backslash before a stop
/// byte or a backslash. Borrowed unless escaped.
fn take_name<'a>(line: &'a str, pos: &mut usize, stops: &StopSet) -> Cow<'a, str> {
    let b = line.as_bytes();
    let start = *pos;
    let mut escaped = false;
    let mut i = start;
    while i < b.len() {
        let c = b[i];
        if c == b'\\' && i + 1 < b.len() && (stops[usize::from(b[i + 1])] || b[i + 1] == b'\\') {
            escaped = true;
            i += 2;
            continue;
        }
        if stops[usize::from(c)] {
            break;
        }
        i += 1;
    }
    *pos = i;
    let raw = &line[start..i];
    if !escaped {
        return Cow::Borrowed(raw);
    }
    let rb = raw.as_bytes();
    let mut out = String::with_capacity(raw.len());
    let mut j = 0;
    let mut seg = 0;
    while j < rb.len() {
        if rb[j] == b'\\'
            && j + 1 < rb.len()
            && (stops[usize::from(rb[j + 1])] || rb[j + 1] == b'\\')
        {
            out.push_str(&raw[seg..j]);
            seg = j + 1; // keep the escaped byte
            j += 2;
            continue;
        }
        j += 1;
    }
    out.push_str(&raw[seg..]);
    Cow::Owned(out)
}

fn field_value<'a>(line: &'a str, pos: &mut usize) -> Result<FieldValue<'a>, ValueError> {
    let b = line.as_bytes();
    if *pos >= b.len() {
        return Err(ValueError::Missing);
    }
    if b[*pos] == b'"' {
        return string_value(line, pos);
    }
    let start = *pos;
    while *pos < b.len() && b[*pos] != b',' && b[*pos] != b' ' {
        *pos += 1;
    }
    let raw = &line[start..*pos];
    if raw.is_empty() {
        return Err(ValueError::Missing);
    }
    match raw {
        "t" | "T" | "true" | "True" | "TRUE" => return Ok(FieldValue::Boolean(true)),
        "f" | "F" | "false" | "False" | "FALSE" => return Ok(FieldValue::Boolean(false)),
        _ => {}
    }
    if let Some(n) = raw.strip_suffix('i') {
        return n
            .parse::<i64>()
            .map(FieldValue::Integer)
            .map_err(|error| ValueError::Integer { text: raw.to_string(), error });
    }
    if let Some(n) = raw.strip_suffix('u') {
        return n
            .parse::<u64>()
            .map(FieldValue::UInteger)
            .map_err(|error| ValueError::UInteger { text: raw.to_string(), error });
    }
    let first = raw.as_bytes()[0];
    if !(first.is_ascii_digit() || first == b'-' || first == b'+' || first == b'.') {
        return Err(ValueError::Unquoted { text: raw.to_string() });
    }
    match raw.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(FieldValue::Float(v)),
        _ => Err(ValueError::Float { text: raw.to_string() }),
    }
}

fn string_value<'a>(line: &'a str, pos: &mut usize) -> Result<FieldValue<'a>, ValueError> {
    let b = line.as_bytes();
    let start = *pos + 1;
    let mut i = start;
    let mut escaped = false;
    while i < b.len() {
        match b[i] {
            b'\\' if i + 1 < b.len() && (b[i + 1] == b'"' || b[i + 1] == b'\\') => {
                escaped = true;
                i += 2;
            }
            b'"' => {
                *pos = i + 1;
                let raw = &line[start..i];
                if !escaped {
                    return Ok(FieldValue::String(Cow::Borrowed(raw)));
                }
                let mut out = String::with_capacity(raw.len());
                let mut chars = raw.chars().peekable();
                while let Some(c) = chars.next() {
                    if c == '\\' && matches!(chars.peek(), Some('"') | Some('\\')) {
                        out.push(chars.next().unwrap_or('\\'));
                    } else {
                        out.push(c);
                    }
                }
                return Ok(FieldValue::String(Cow::Owned(out)));
            }
            _ => i += 1,
        }
    }
    Err(ValueError::UnterminatedString)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(s: &str) -> Line<'_> {
        parse_line(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn parses_every_value_kind_and_timestamp() {
        let l = one("cpu,host=a,region=eu-1 usage=1.5,n=-3i,u=7u,ok=t,bad=FALSE,msg=\"hi there\" 1700000000000000000");
        assert_eq!(l.measurement, "cpu");
        assert_eq!(l.tags.len(), 2);
        assert_eq!(l.tags[1], (Cow::Borrowed("region"), Cow::Borrowed("eu-1")));
        assert_eq!(l.fields[0].1, FieldValue::Float(1.5));
        assert_eq!(l.fields[1].1, FieldValue::Integer(-3));
        assert_eq!(l.fields[2].1, FieldValue::UInteger(7));
        assert_eq!(l.fields[3].1, FieldValue::Boolean(true));
        assert_eq!(l.fields[4].1, FieldValue::Boolean(false));
        assert_eq!(l.fields[5].1, FieldValue::String("hi there".into()));
        assert_eq!(l.timestamp, Some(1_700_000_000_000_000_000));
        assert_eq!(one("m v=1").timestamp, None);
        assert_eq!(one("m v=1 -5").timestamp, Some(-5));
        assert_eq!(one("m v=2e3").fields[0].1, FieldValue::Float(2000.0));
    }

    #[test]
    fn unescapes_names_and_strings() {
        let l = one(r#"my\ cpu,ho\,st=a\ b\=c f\=x="say \"hi\" \\ ok" 1"#);
        assert_eq!(l.measurement, "my cpu");
        assert_eq!(l.tags[0], (Cow::Borrowed("ho,st"), Cow::Owned("a b=c".to_string())));
        assert_eq!(l.fields[0].0, "f=x");
        assert_eq!(l.fields[0].1, FieldValue::String(r#"say "hi" \ ok"#.into()));
        // A string with commas, spaces and equals signs inside.
        let l = one(r#"m s="a, b=c d",v=1i"#);
        assert_eq!(l.fields[0].1, FieldValue::String("a, b=c d".into()));
        assert_eq!(l.fields[1].1, FieldValue::Integer(1));
        // Unescaped names stay borrowed.
        assert!(matches!(one("m,t=v f=1").tags[0].1, Cow::Borrowed(_)));
    }

    #[test]
    fn rejects_malformed_lines_with_reasons() {
        for (bad, why) in [
            ("cpu", "expected a space"),
            ("cpu ", "missing field set"),
            ("cpu,host usage=1", "has no value"),
            ("cpu,host= usage=1", "empty value"),
            ("cpu usage=", "missing value"),
            ("cpu usage=abc", "double quotes"),
            ("cpu usage=1x", "invalid float"),
            ("cpu usage=1.5i", "invalid integer"),
            ("cpu usage=-1u", "invalid unsigned"),
            ("cpu usage=\"open", "unterminated string"),
            ("cpu usage=1 12ab", "invalid timestamp"),
            ("cpu usage=1,", "empty field key"),
            (",t=1 v=1", "missing measurement"),
            ("cpu usage=1 1 2", "invalid timestamp"),
            ("cpu v=nan", "double quotes"),
            ("cpu v=1e999", "invalid float"),
        ] {
            let e = parse_line(bad).expect_err(bad).to_string();
            assert!(e.contains(why), "{bad:?}: {e:?} lacks {why:?}");
        }
    }

    #[test]
    fn lines_skip_blanks_and_comments_and_number_lines() {
        let body = "# header\r\ncpu v=1 1\r\n\n  \nmem v=2 2\nbad\n";
        let got: Vec<_> = Lines::new(body).collect();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].as_ref().map(|(n, l)| (*n, l.timestamp)), Ok((2, Some(1))));
        assert_eq!(
            got[1].as_ref().map(|(n, l)| (*n, l.measurement.to_string())),
            Ok((5, "mem".into()))
        );
        assert_eq!(got[2].as_ref().map_err(|e| e.line), Err(6));
    }
}
