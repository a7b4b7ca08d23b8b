//! Writing parsed lines back as line protocol, for forwarding rows (a cluster `INSERT`) to the
//! node that owns them. What is written parses back to the same line.

use std::fmt::Write;

use super::{FieldValue, Line};

/// Appends `s` with a backslash before every byte of `stops`. A backslash before anything
/// else is read as itself, so backslashes are written as they are.
fn escaped(out: &mut String, s: &str, stops: &[char]) {
    for c in s.chars() {
        if stops.contains(&c) {
            out.push('\\');
        }
        out.push(c);
    }
}

/// Why a line cannot be written as line protocol.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// A name with a control character, or a tag value with a line break.
    #[error("{what} {text:?} holds a control character, which line protocol cannot carry there")]
    ControlCharacter {
        /// What holds it: `measurement`, `tag`, `tag value` or `field`.
        what: &'static str,
        /// The name or value.
        text: String,
    },
    /// A name ending with a backslash, which would escape the separator after it.
    #[error("{what} {text:?} ends with a backslash, which line protocol cannot carry")]
    TrailingBackslash {
        /// What ends so: `measurement`, `tag`, `tag value` or `field`.
        what: &'static str,
        /// The name or value.
        text: String,
    },
    /// An empty tag key, tag value or field key.
    #[error("an empty {what} cannot be written as line protocol")]
    Empty {
        /// What is empty: `tag`, `tag value` or `field`.
        what: &'static str,
    },
    /// An empty measurement, or one a reader would take for a comment (`#`).
    #[error("measurement {0:?} cannot be written as line protocol")]
    Measurement(String),
    /// A line without fields.
    #[error("a line needs at least one field")]
    NoFields,
    /// A float field that is NaN or infinite.
    #[error("field {key:?}: {value} cannot be written as line protocol")]
    NonFinite {
        /// The field key.
        key: String,
        /// The value.
        value: f64,
    },
}

/// Checks that a name reads back as itself: not empty, no control characters (a tag value may
/// hold any but line breaks), no backslash at its end.
fn writable(what: &'static str, s: &str) -> Result<(), WriteError> {
    if s.is_empty() {
        return Err(WriteError::Empty { what });
    }
    let control = |c: char| match what {
        "tag value" => c == '\n' || c == '\r',
        _ => c.is_ascii_control(),
    };
    if s.contains(control) {
        return Err(WriteError::ControlCharacter { what, text: s.to_string() });
    }
    if s.ends_with('\\') {
        return Err(WriteError::TrailingBackslash { what, text: s.to_string() });
    }
    Ok(())
}

impl Line<'_> {
    /// Appends the line and a newline to `out` (the timestamp as it is, in the precision the
    /// reader is told). Fails, appending nothing, for what line protocol cannot carry: control
    /// characters in names, a name ending with a backslash, a measurement starting with `#`, a
    /// non-finite float, a line without fields.
    pub fn write_to(&self, out: &mut String) -> Result<(), WriteError> {
        let start = out.len();
        let res = self.write_unchecked(out);
        if res.is_err() {
            out.truncate(start);
        }
        res
    }

    fn write_unchecked(&self, out: &mut String) -> Result<(), WriteError> {
        let m = self.measurement.as_ref();
        if m.is_empty() || m.starts_with('#') {
            return Err(WriteError::Measurement(m.to_string()));
        }
        writable("measurement", m)?;
        if self.fields.is_empty() {
            return Err(WriteError::NoFields);
        }
        escaped(out, m, &[',', ' ']);
        for (k, v) in &self.tags {
            writable("tag", k)?;
            writable("tag value", v)?;
            out.push(',');
            escaped(out, k, &[',', '=', ' ']);
            out.push('=');
            escaped(out, v, &[',', '=', ' ']);
        }
        for (i, (k, v)) in self.fields.iter().enumerate() {
            writable("field", k)?;
            out.push(if i == 0 { ' ' } else { ',' });
            escaped(out, k, &[',', '=', ' ']);
            out.push('=');
            match v {
                FieldValue::Float(f) if f.is_finite() => {
                    let _ = write!(out, "{f:?}");
                }
                FieldValue::Float(f) => {
                    return Err(WriteError::NonFinite { key: k.to_string(), value: *f })
                }
                FieldValue::Integer(n) => {
                    let _ = write!(out, "{n}i");
                }
                FieldValue::UInteger(n) => {
                    let _ = write!(out, "{n}u");
                }
                FieldValue::Boolean(b) => out.push_str(if *b { "true" } else { "false" }),
                FieldValue::String(s) => {
                    out.push('"');
                    escaped(out, &s.replace('\\', "\\\\"), &['"']);
                    out.push('"');
                }
            }
        }
        if let Some(t) = self.timestamp {
            let _ = write!(out, " {t}");
        }
        out.push('\n');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use proptest::prelude::*;
    use smallvec::SmallVec;

    use super::*;
    use crate::lp::parse_line;

    fn name() -> impl Strategy<Value = String> {
        // Printable ASCII and some multi-byte characters, including every escaped byte.
        "[a-zA-Z0-9 ,=\"\\\\_.\\-éλ]{1,12}"
            .prop_filter("no backslash at the end", |s| !s.ends_with('\\'))
    }

    fn value() -> impl Strategy<Value = FieldValue<'static>> {
        prop_oneof![
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(FieldValue::Float),
            any::<i64>().prop_map(FieldValue::Integer),
            any::<u64>().prop_map(FieldValue::UInteger),
            any::<bool>().prop_map(FieldValue::Boolean),
            "[a-z \"\\\\,=\n]{0,10}".prop_map(|s| FieldValue::String(Cow::Owned(s))),
        ]
    }

    proptest! {
        #[test]
        fn written_lines_parse_back(
            m in name().prop_filter("no comment", |m| !m.starts_with('#')),
            tags in proptest::collection::btree_map(name(), name(), 0..4),
            fields in proptest::collection::btree_map(name(), value(), 1..4),
            ts in proptest::option::of(any::<i64>()),
        ) {
            let line = Line {
                measurement: Cow::Owned(m),
                tags: tags.into_iter().map(|(k, v)| (Cow::Owned(k), Cow::Owned(v))).collect(),
                fields: fields.into_iter().map(|(k, v)| (Cow::Owned(k), v)).collect::<SmallVec<_>>(),
                timestamp: ts,
            };
            let mut out = String::new();
            line.write_to(&mut out).unwrap();
            let back = parse_line(out.trim_end_matches('\n')).map_err(|e| {
                TestCaseError::fail(format!("{out:?} does not parse: {e}"))
            })?;
            // Compared through Debug (borrowed and owned names print alike).
            prop_assert_eq!(format!("{back:?}"), format!("{line:?}"));
        }
    }

    #[test]
    fn refuses_what_line_protocol_cannot_carry() {
        let line = |m: &str, v: FieldValue<'static>| Line {
            measurement: Cow::Owned(m.to_string()),
            tags: SmallVec::new(),
            fields: std::iter::once((Cow::Borrowed("f"), v)).collect(),
            timestamp: None,
        };
        let mut out = String::new();
        assert!(line("#m", FieldValue::Integer(1)).write_to(&mut out).is_err());
        assert!(line("m", FieldValue::Float(f64::NAN)).write_to(&mut out).is_err());
        assert!(line("m\\", FieldValue::Integer(1)).write_to(&mut out).is_err());
        assert!(line("m\u{1}", FieldValue::Integer(1)).write_to(&mut out).is_err());
        assert_eq!(out, "", "a refused line leaves nothing behind");
        line("m", FieldValue::Integer(1)).write_to(&mut out).unwrap();
        assert_eq!(out, "m f=1i\n");
        // A string value may hold line ends and backslashes.
        line("m", FieldValue::String(Cow::Borrowed("a\n\\b"))).write_to(&mut out).unwrap();
        assert_eq!(out, "m f=1i\nm f=\"a\n\\\\b\"\n");
    }
}
