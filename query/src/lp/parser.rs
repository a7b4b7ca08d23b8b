//! The line-protocol parser (see the module docs of [`crate::lp`]).

use std::borrow::Cow;

use smallvec::SmallVec;

use super::{FieldValue, Line, LineError};

/// Why a line does not parse (the `reason` of its [`LineError`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// Nothing where the measurement starts.
    #[error("missing measurement")]
    MissingMeasurement,
    /// A character no name may hold (a control character, or a separator out of place).
    #[error("unexpected {found:?} where the {place} starts")]
    InvalidCharacter {
        /// The character.
        found: char,
        /// What was expected: `measurement`, `tag key` or `field key`.
        place: &'static str,
    },
    /// A line starting with `#` that holds a control character.
    #[error("a comment line holds a control character")]
    InvalidComment,
    /// A comma after the measurement or a tag, and no tag key after it.
    #[error("expected a tag key after the comma")]
    ExpectedTagKey,
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
    /// A tag key given twice in a line.
    #[error("tag {key:?} is given twice")]
    DuplicateTag {
        /// The tag key.
        key: String,
    },
    /// Nothing after the measurement and tags.
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
    /// A byte other than a comma, a space or a line end after a field value.
    #[error("unexpected {found:?} after a field value")]
    AfterFieldSet {
        /// The byte (as a character).
        found: char,
    },
    /// A timestamp that is not a signed 64-bit integer.
    #[error("invalid timestamp {text:?}")]
    InvalidTimestamp {
        /// The timestamp as written.
        text: String,
        /// Why it does not parse as a number, if it is made of digits.
        #[source]
        error: Option<std::num::ParseIntError>,
    },
    /// Text after the timestamp.
    #[error("unexpected {text:?} after the timestamp")]
    AfterTimestamp {
        /// The text up to the line end.
        text: String,
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
    },
    /// A value starting like a boolean that is not one of `t`, `T`, `true`, `True`, `TRUE`
    /// or the same for false.
    #[error("invalid boolean {text:?}")]
    Boolean {
        /// The value as written.
        text: String,
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

/// Iterator over the points of a request body, each with the 1-based number of the line it
/// starts on, skipping empty and comment lines. A string field value may hold line ends, so a
/// point can span lines. After a point that does not parse, the iterator goes on at the next
/// line.
pub struct Lines<'a> {
    body: &'a str,
    pos: usize,
    line_no: usize,
}

impl<'a> Lines<'a> {
    /// Points of `body`.
    pub fn new(body: &'a str) -> Self {
        Lines { body, pos: 0, line_no: 1 }
    }
}

impl<'a> Iterator for Lines<'a> {
    type Item = Result<(usize, Line<'a>), LineError>;

    fn next(&mut self) -> Option<Self::Item> {
        skip_blank_lines(self.body, &mut self.pos, &mut self.line_no);
        if self.pos >= self.body.len() {
            return None;
        }
        let no = self.line_no;
        match parse_point(self.body, &mut self.pos, &mut self.line_no) {
            Ok(line) => Some(Ok((no, line))),
            Err(e) => {
                // On at the next line end from where the point went wrong.
                let b = self.body.as_bytes();
                let pos = self.pos.min(b.len());
                self.pos = match b[pos..].iter().position(|&c| c == b'\n') {
                    Some(i) => {
                        self.line_no += 1;
                        pos + i + 1
                    }
                    None => b.len(),
                };
                Some(Err(LineError { line: no, reason: e.to_string() }))
            }
        }
    }
}

/// Parses one line (without its line end).
pub fn parse_line(line: &str) -> Result<Line<'_>, ParseError> {
    let (mut pos, mut line_no) = (0, 1);
    let parsed = parse_point(line, &mut pos, &mut line_no)?;
    if pos < line.len() {
        return Err(ParseError::AfterTimestamp { text: line[pos..].to_string() });
    }
    Ok(parsed)
}

/// Skips spaces, empty lines and comment lines (`#` then printable text to the line end).
fn skip_blank_lines(body: &str, pos: &mut usize, line_no: &mut usize) {
    let b = body.as_bytes();
    loop {
        let start = *pos;
        while *pos < b.len() && b[*pos] == b' ' {
            *pos += 1;
        }
        match b.get(*pos) {
            Some(b'#') => {
                while *pos < b.len() && !NON_PRINTABLE[usize::from(b[*pos])] {
                    *pos += 1;
                }
                if !take_line_end(b, pos, line_no) {
                    // A comment holding a control character is a malformed line.
                    *pos = start;
                    return;
                }
            }
            Some(b'\n') => {
                *pos += 1;
                *line_no += 1;
            }
            Some(b'\r') => {
                if !take_line_end(b, pos, line_no) {
                    return;
                }
            }
            _ => return,
        }
    }
}

/// Takes a line end (`\n`, `\r\n`, or `\r` or nothing at the end of the body); false if
/// something else is next.
fn take_line_end(b: &[u8], pos: &mut usize, line_no: &mut usize) -> bool {
    match b.get(*pos) {
        None => true,
        Some(b'\n') => {
            *pos += 1;
            *line_no += 1;
            true
        }
        Some(b'\r') => match b.get(*pos + 1) {
            None => {
                *pos += 1;
                true
            }
            Some(b'\n') => {
                *pos += 2;
                *line_no += 1;
                true
            }
            Some(_) => false,
        },
        Some(_) => false,
    }
}

/// Parses the point at `pos` and its line end; `pos` is left where it went wrong on an error,
/// before the line end of the point's last line at the latest.
fn parse_point<'a>(
    body: &'a str,
    pos: &mut usize,
    line_no: &mut usize,
) -> Result<Line<'a>, ParseError> {
    let line = point(body, pos, line_no)?;
    // Checked once the whole point is read: a refused point is passed over whole, a string
    // value spanning lines included.
    if let Some(key) = duplicate_tag(&line.tags) {
        return Err(ParseError::DuplicateTag { key });
    }
    take_line_end(body.as_bytes(), pos, line_no);
    Ok(line)
}

/// Whether a line end (or the end of the body) is at `pos`.
fn at_line_end(b: &[u8], pos: usize) -> bool {
    match b.get(pos) {
        None | Some(b'\n') => true,
        Some(b'\r') => matches!(b.get(pos + 1), None | Some(b'\n')),
        Some(_) => false,
    }
}

/// The point at `pos`, up to its line end (not taken).
fn point<'a>(body: &'a str, pos: &mut usize, line_no: &mut usize) -> Result<Line<'a>, ParseError> {
    let b = body.as_bytes();
    let measurement = take_escaped(body, pos, &MEASUREMENT_END, &MEASUREMENT_ESCAPES);
    if measurement.is_empty() {
        return Err(match b.get(*pos) {
            None => ParseError::MissingMeasurement,
            Some(&c) => ParseError::InvalidCharacter { found: char::from(c), place: "measurement" },
        });
    }
    if measurement.starts_with('#') {
        return Err(ParseError::InvalidComment);
    }
    let mut tags: SmallVec<[(Cow<'a, str>, Cow<'a, str>); 12]> = SmallVec::new();
    tag_comma(b, pos)?;
    loop {
        match b.get(*pos) {
            None => return Err(ParseError::MissingFieldSet),
            Some(b' ') => {
                while *pos < b.len() && b[*pos] == b' ' {
                    *pos += 1;
                }
                break;
            }
            Some(_) => {}
        }
        let key = take_escaped(body, pos, &NAME_END, &NAME_ESCAPES);
        match b.get(*pos) {
            Some(b'=') if !key.is_empty() => *pos += 1,
            Some(b'=') => return Err(ParseError::EmptyTagKey),
            _ if !key.is_empty() => {
                return Err(ParseError::TagWithoutValue { key: key.into_owned() })
            }
            None => return Err(ParseError::MissingFieldSet),
            Some(&c) => {
                return Err(ParseError::InvalidCharacter { found: char::from(c), place: "tag key" })
            }
        }
        let value = take_escaped(body, pos, &TAG_VALUE_END, &NAME_ESCAPES);
        if value.is_empty() {
            return Err(ParseError::EmptyTagValue { key: key.into_owned() });
        }
        tags.push((key, value));
        tag_comma(b, pos)?;
    }
    let mut fields = SmallVec::new();
    loop {
        let key = take_escaped(body, pos, &NAME_END, &NAME_ESCAPES);
        if key.is_empty() {
            return Err(match b.get(*pos) {
                None if fields.is_empty() => ParseError::MissingFieldSet,
                None => ParseError::EmptyFieldKey,
                Some(&c) => {
                    ParseError::InvalidCharacter { found: char::from(c), place: "field key" }
                }
            });
        }
        if b.get(*pos) != Some(&b'=') {
            return Err(ParseError::FieldWithoutValue { key: key.into_owned() });
        }
        *pos += 1;
        let value = match field_value(body, pos, line_no) {
            Ok(v) => v,
            Err(error) => return Err(ParseError::Field { key: key.into_owned(), error }),
        };
        fields.push((key, value));
        match b.get(*pos) {
            None => return Ok(Line { measurement, tags, fields, timestamp: None }),
            Some(b',') => *pos += 1,
            Some(b' ' | b'\r' | b'\n') => break,
            Some(&c) => return Err(ParseError::AfterFieldSet { found: char::from(c) }),
        }
    }
    while *pos < b.len() && b[*pos] == b' ' {
        *pos += 1;
    }
    if at_line_end(b, *pos) {
        return Ok(Line { measurement, tags, fields, timestamp: None });
    }
    let start = *pos;
    while *pos < b.len() && (b[*pos] == b'-' || b[*pos].is_ascii_digit()) {
        *pos += 1;
    }
    let text = &body[start..*pos];
    if !matches!(b.get(*pos), None | Some(b' ' | b'\r' | b'\n')) {
        let end = b[start..]
            .iter()
            .position(|&c| c == b'\n' || c == b'\r')
            .map_or(b.len(), |i| start + i);
        return Err(ParseError::InvalidTimestamp { text: excerpt(&body[start..end]), error: None });
    }
    while *pos < b.len() && b[*pos] == b' ' {
        *pos += 1;
    }
    let after = *pos;
    if !at_line_end(b, after) {
        let end = b[after..]
            .iter()
            .position(|&c| c == b'\n' || c == b'\r')
            .map_or(b.len(), |i| after + i);
        return Err(ParseError::AfterTimestamp { text: excerpt(&body[after..end]) });
    }
    let timestamp = if text.is_empty() {
        None
    } else {
        let invalid =
            |error| ParseError::InvalidTimestamp { text: text.to_string(), error: Some(error) };
        Some(text.parse::<i64>().map_err(invalid)?)
    };
    Ok(Line { measurement, tags, fields, timestamp })
}

/// At most 64 characters of `text`, for an error message.
fn excerpt(text: &str) -> String {
    match text.char_indices().nth(64) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_string(),
    }
}

/// After a comma that ends a measurement or a tag, a tag key must follow.
fn tag_comma(b: &[u8], pos: &mut usize) -> Result<(), ParseError> {
    if b.get(*pos) != Some(&b',') {
        return Ok(());
    }
    *pos += 1;
    match b.get(*pos) {
        None | Some(b' ' | b'\r' | b'\n') => Err(ParseError::ExpectedTagKey),
        Some(_) => Ok(()),
    }
}

/// The first key given twice among `tags`, if any.
fn duplicate_tag(tags: &[(Cow<'_, str>, Cow<'_, str>)]) -> Option<String> {
    if tags.len() <= 16 {
        for (i, (k, _)) in tags.iter().enumerate() {
            if tags[..i].iter().any(|(seen, _)| seen == k) {
                return Some(k.to_string());
            }
        }
        return None;
    }
    let mut keys: Vec<&str> = tags.iter().map(|(k, _)| k.as_ref()).collect();
    keys.sort_unstable();
    keys.windows(2).find(|w| w[0] == w[1]).map(|w| w[0].to_string())
}

/// A set of bytes, as a table indexed by byte (one load per byte scanned).
type ByteSet = [bool; 256];

/// The set of `bytes`.
const fn set_of(bytes: &[u8]) -> ByteSet {
    let mut set = [false; 256];
    let mut i = 0;
    while i < bytes.len() {
        set[bytes[i] as usize] = true;
        i += 1;
    }
    set
}

/// `bytes` and the control characters (0-31 and 127).
const fn with_controls(bytes: &[u8]) -> ByteSet {
    let mut set = set_of(bytes);
    let mut c = 0;
    while c < 32 {
        set[c] = true;
        c += 1;
    }
    set[127] = true;
    set
}

/// Escape table: for each byte after a backslash, the byte it stands for (0: not an escape).
type Escapes = [u8; 256];

const fn escapes(pairs: &[(u8, u8)]) -> Escapes {
    let mut table = [0; 256];
    let mut i = 0;
    while i < pairs.len() {
        table[pairs[i].0 as usize] = pairs[i].1;
        i += 1;
    }
    table
}

/// Control characters, which no name may hold.
const NON_PRINTABLE: ByteSet = with_controls(b"");
/// What ends a measurement name.
const MEASUREMENT_END: ByteSet = with_controls(b", ");
/// What a backslash escapes in a measurement name.
const MEASUREMENT_ESCAPES: Escapes = escapes(&[(b',', b','), (b' ', b' ')]);
/// What ends a tag key or field key.
const NAME_END: ByteSet = with_controls(b",= ");
/// What ends a tag value: a tag value may hold control characters other than line ends.
const TAG_VALUE_END: ByteSet = set_of(b",= \r\n");
/// What a backslash escapes in a tag key, tag value or field key.
const NAME_ESCAPES: Escapes = escapes(&[(b',', b','), (b'=', b'='), (b' ', b' ')]);
/// What a backslash escapes in a string field value (`\n` stays a backslash and an `n`).
const STRING_ESCAPES: Escapes = escapes(&[(b'\\', b'\\'), (b'"', b'"')]);

/// Takes a token up to the first byte of `end` that no backslash escapes. A backslash before a
/// byte of `table` stands for that byte's entry; before any other byte it is kept as it is.
/// Borrowed unless something was unescaped. Every byte that ends or escapes is ASCII, so each
/// slice falls on a character boundary.
fn take_escaped<'a>(
    body: &'a str,
    pos: &mut usize,
    end: &ByteSet,
    table: &Escapes,
) -> Cow<'a, str> {
    let b = body.as_bytes();
    let start = *pos;
    let mut i = start;
    let mut owned: Option<String> = None;
    let mut seg = start;
    while i < b.len() {
        let c = b[i];
        if c == b'\\' {
            let Some(&next) = b.get(i + 1) else {
                i = b.len();
                break;
            };
            let unescaped = table[usize::from(next)];
            if unescaped != 0 {
                let out = owned.get_or_insert_with(|| String::with_capacity(i - start + 8));
                out.push_str(&body[seg..i]);
                out.push(char::from(unescaped));
                i += 2;
                seg = i;
            } else {
                i += 1;
            }
            continue;
        }
        if end[usize::from(c)] {
            break;
        }
        i += 1;
    }
    *pos = i;
    match owned {
        None => Cow::Borrowed(&body[start..i]),
        Some(mut out) => {
            out.push_str(&body[seg..i]);
            Cow::Owned(out)
        }
    }
}

/// What ends a string field value.
const STRING_END: ByteSet = set_of(b"\"");
/// What ends any other field value.
const VALUE_END: ByteSet = set_of(b", \r\n");

fn field_value<'a>(
    body: &'a str,
    pos: &mut usize,
    line_no: &mut usize,
) -> Result<FieldValue<'a>, ValueError> {
    let b = body.as_bytes();
    let Some(&first) = b.get(*pos) else {
        return Err(ValueError::Missing);
    };
    if first == b'"' {
        *pos += 1;
        let start = *pos;
        let s = take_escaped(body, pos, &STRING_END, &STRING_ESCAPES);
        if *pos >= b.len() {
            return Err(ValueError::UnterminatedString);
        }
        *line_no += b[start..*pos].iter().filter(|&&c| c == b'\n').count();
        *pos += 1;
        return Ok(FieldValue::String(s));
    }
    let start = *pos;
    while *pos < b.len() && !VALUE_END[usize::from(b[*pos])] {
        *pos += 1;
    }
    let raw = &body[start..*pos];
    match first {
        b',' | b' ' | b'\r' | b'\n' => Err(ValueError::Missing),
        b't' | b'T' | b'f' | b'F' => match raw {
            "t" | "T" | "true" | "True" | "TRUE" => Ok(FieldValue::Boolean(true)),
            "f" | "F" | "false" | "False" | "FALSE" => Ok(FieldValue::Boolean(false)),
            _ => Err(ValueError::Boolean { text: raw.to_string() }),
        },
        b'-' | b'0'..=b'9' | b'.' => number(raw),
        _ => Err(ValueError::Unquoted { text: raw.to_string() }),
    }
}

/// A number field value: `i` suffixed signed, `u` suffixed unsigned, else a finite float.
fn number(raw: &str) -> Result<FieldValue<'_>, ValueError> {
    if let Some(n) = raw.strip_suffix('i') {
        return n
            .parse::<i64>()
            .map(FieldValue::Integer)
            .map_err(|error| ValueError::Integer { text: raw.to_string(), error });
    }
    if let Some(n) = raw.strip_suffix('u') {
        // A sign is not part of an unsigned number (`u64::from_str` would take `+`).
        let unsigned = if n.starts_with('+') { Err(()) } else { n.parse::<u64>().map_err(|_| ()) };
        return unsigned
            .map(FieldValue::UInteger)
            .map_err(|()| ValueError::UInteger { text: raw.to_string() });
    }
    // Decimal digits, a point and an exponent only: `f64::from_str` also takes `inf` and `nan`.
    let decimal =
        raw.bytes().all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'-' | b'+' | b'e' | b'E'));
    match raw.parse::<f64>() {
        Ok(v) if decimal && v.is_finite() => Ok(FieldValue::Float(v)),
        _ => Err(ValueError::Float { text: raw.to_string() }),
    }
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
        // A backslash before anything but a separator stays, in names and strings alike.
        let l = one(r#"a\\b,t\x=\y,u\\=v=w f="\n\\" 1"#);
        assert_eq!(l.measurement, r"a\\b");
        assert_eq!(l.tags[0], (Cow::Borrowed(r"t\x"), Cow::Borrowed(r"\y")));
        assert_eq!(l.tags[1], (Cow::Owned(r"u\=v".to_string()), Cow::Borrowed("w")));
        assert_eq!(l.fields[0].1, FieldValue::String(r"\n\".into()));
        // A tag value may hold control characters other than line ends.
        assert_eq!(one("m,t=a\tb v=1").tags[0].1, "a\tb");
        // Unescaped names stay borrowed.
        assert!(matches!(one("m,t=v f=1").tags[0].1, Cow::Borrowed(_)));
    }

    #[test]
    fn rejects_malformed_lines_with_reasons() {
        for (bad, why) in [
            ("cpu", "missing field set"),
            ("cpu ", "missing field set"),
            ("\tcpu v=1", "where the measurement starts"),
            ("c\u{1}pu v=1", "where the tag key starts"),
            ("cpu,a=1,a=2 v=1", "given twice"),
            ("cpu, v=1", "tag key after the comma"),
            ("cpu v=1 1 2", "after the timestamp"),
            ("cpu v=tru", "invalid boolean"),
            ("cpu v=+1", "double quotes"),
            ("cpu v=0x10", "invalid float"),
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
            (",t=1 v=1", "where the measurement starts"),
            ("cpu v=nan", "double quotes"),
            ("cpu v=1e999", "invalid float"),
        ] {
            let e = parse_line(bad).expect_err(bad).to_string();
            assert!(e.contains(why), "{bad:?}: {e:?} lacks {why:?}");
        }
    }

    #[test]
    fn a_string_value_may_span_lines() {
        let body = "m s=\"a\nb\",v=1i 5\nm s=\"c\" 6\nbad\n";
        let got: Vec<_> = Lines::new(body).collect();
        assert_eq!(got.len(), 3);
        let (no, l) = got[0].as_ref().expect("first point");
        assert_eq!(
            (*no, l.fields[0].1.clone(), l.timestamp),
            (1, FieldValue::String("a\nb".into()), Some(5))
        );
        assert_eq!(got[1].as_ref().map(|(n, l)| (*n, l.timestamp)), Ok((3, Some(6))));
        assert_eq!(got[2].as_ref().map_err(|e| e.line), Err(4));
        // A refused point is passed over whole, a string spanning lines included, and a bad
        // timestamp does not take the next line with it.
        let numbers = |body: &str| -> Vec<Result<usize, usize>> {
            Lines::new(body).map(|r| r.map(|(n, _)| n).map_err(|e| e.line)).collect()
        };
        assert_eq!(numbers("m,a=1,a=2 s=\"\nn v=1\n\"\nm v=3 3\n"), [Err(1), Ok(4)]);
        assert_eq!(numbers("m v=1 -\nm v=2 2\nm v=3 3"), [Err(1), Ok(2), Ok(3)]);
        assert_eq!(numbers("m v=1 99999999999999999999\nm v=2"), [Err(1), Ok(2)]);
        // After a point that does not parse, the next line is read.
        let got: Vec<_> =
            Lines::new("m v=x y\nm v=2").map(|r| r.map(|(n, _)| n).map_err(|e| e.line)).collect();
        assert_eq!(got, [Err(1), Ok(2)]);
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
