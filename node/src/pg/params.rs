//! Bound parameters of the extended query protocol, turned into SQL literals that replace the
//! statement's `$n` placeholders. Values arrive in text or binary format; the type is the one the
//! client declared or, failing that, the one Describe reported.
//!
//! Numbers are checked and written as numbers (negative ones in parentheses), strings are quoted
//! with `''`, timestamps and dates become casts of their UTC text, and `bytea` becomes `X'..'`.

use std::fmt::{self, Write as _};

use chrono::DateTime;
use datafusion::arrow::datatypes::TimeUnit;
use datafusion::common::ScalarValue;
use pgwire::api::Type;
use pgwire::error::PgWireResult;

use super::user_error;
use super::values::{
    split_units, write_date, write_datetime, MICROS_PER_SEC, PG_EPOCH_DAYS, PG_EPOCH_SECS,
};

/// The decimal text of a binary `numeric` parameter.
fn numeric_from_binary(bytes: &[u8]) -> Option<String> {
    let h = bytes.get(..8)?;
    let ndigits = usize::try_from(i16::from_be_bytes([h[0], h[1]])).ok()?;
    let weight = i64::from(i16::from_be_bytes([h[2], h[3]]));
    let sign = u16::from_be_bytes([h[4], h[5]]);
    let dscale = usize::from(u16::from_be_bytes([h[6], h[7]]));
    match sign {
        0xC000 => return Some("NaN".into()),
        0xD000 => return Some("Infinity".into()),
        0xF000 => return Some("-Infinity".into()),
        _ => {}
    }
    let digits: Vec<i16> = bytes
        .get(8..8 + 2 * ndigits)?
        .chunks_exact(2)
        .map(|c| i16::from_be_bytes([c[0], c[1]]))
        .collect();
    // digits[i] counts 10000^(weight - i).
    let digit = |i: i64| usize::try_from(i).ok().and_then(|i| digits.get(i)).copied().unwrap_or(0);
    let mut out = String::new();
    if sign == 0x4000 {
        out.push('-');
    }
    if weight < 0 {
        out.push('0');
    }
    for i in 0..=weight {
        let _ = if i == 0 { write!(out, "{}", digit(i)) } else { write!(out, "{:04}", digit(i)) };
    }
    if dscale > 0 {
        let mut frac = String::with_capacity(dscale + 4);
        let mut i = weight + 1;
        while frac.len() < dscale {
            let _ = write!(frac, "{:04}", digit(i));
            i += 1;
        }
        frac.truncate(dscale);
        out.push('.');
        out.push_str(&frac);
    }
    Some(out)
}

/// The SQL literal for a bound parameter (`NULL` for a null), from its text or binary value.
pub(super) fn param_literal(value: Option<&[u8]>, ty: &Type, binary: bool) -> PgWireResult<String> {
    let Some(bytes) = value else {
        return Ok("NULL".to_owned());
    };
    if binary {
        return binary_literal(bytes, ty);
    }
    let text = std::str::from_utf8(bytes)
        .map_err(|_| user_error("22021", "parameter value is not valid UTF-8".to_owned()))?;
    text_literal(text, ty)
}

/// A bound parameter as a value, for a prepared query's plan: `Ok(None)` for types whose values
/// are only written into SQL (`numeric`, `date`, `bytea`...).
pub(super) fn param_value(
    value: Option<&[u8]>,
    ty: &Type,
    binary: bool,
) -> PgWireResult<Option<ScalarValue>> {
    let Some(bytes) = value else {
        return Ok(Some(ScalarValue::Null));
    };
    if binary {
        return binary_value(bytes, ty);
    }
    let text = std::str::from_utf8(bytes)
        .map_err(|_| user_error("22021", "parameter value is not valid UTF-8".to_owned()))?;
    let invalid =
        || user_error("22P02", format!("invalid input syntax for type {}: {text:?}", ty.name()));
    let trimmed = text.trim();
    Ok(Some(match *ty {
        Type::INT2 | Type::INT4 | Type::INT8 | Type::OID => {
            ScalarValue::Int64(Some(trimmed.parse().map_err(|_| invalid())?))
        }
        Type::FLOAT4 | Type::FLOAT8 => {
            ScalarValue::Float64(Some(trimmed.parse().map_err(|_| invalid())?))
        }
        Type::BOOL => match trimmed.to_ascii_lowercase().as_str() {
            "t" | "true" | "y" | "yes" | "on" | "1" => ScalarValue::Boolean(Some(true)),
            "f" | "false" | "n" | "no" | "off" | "0" => ScalarValue::Boolean(Some(false)),
            _ => return Err(invalid()),
        },
        Type::TIMESTAMP | Type::TIMESTAMPTZ => match utc_nanos(trimmed) {
            Some(nanos) => ScalarValue::TimestampNanosecond(Some(nanos), None),
            // Cast by the engine, as `CAST(text AS TIMESTAMP)` would be.
            None => ScalarValue::Utf8(Some(trimmed.to_owned())),
        },
        Type::TEXT | Type::VARCHAR | Type::NAME | Type::BPCHAR | Type::UNKNOWN => {
            ScalarValue::Utf8(Some(text.to_owned()))
        }
        _ => return Ok(None),
    }))
}

fn binary_value(bytes: &[u8], ty: &Type) -> PgWireResult<Option<ScalarValue>> {
    let bad =
        || user_error("22P03", format!("incorrect binary data format for type {}", ty.name()));
    Ok(Some(match *ty {
        Type::BOOL => match bytes {
            [b] => ScalarValue::Boolean(Some(*b != 0)),
            _ => return Err(bad()),
        },
        Type::INT2 => {
            ScalarValue::Int64(Some(i16::from_be_bytes(fixed(bytes).ok_or_else(bad)?).into()))
        }
        Type::INT4 => {
            ScalarValue::Int64(Some(i32::from_be_bytes(fixed(bytes).ok_or_else(bad)?).into()))
        }
        Type::INT8 => ScalarValue::Int64(Some(i64::from_be_bytes(fixed(bytes).ok_or_else(bad)?))),
        Type::OID => {
            ScalarValue::Int64(Some(u32::from_be_bytes(fixed(bytes).ok_or_else(bad)?).into()))
        }
        Type::FLOAT4 => {
            ScalarValue::Float64(Some(f32::from_be_bytes(fixed(bytes).ok_or_else(bad)?).into()))
        }
        Type::FLOAT8 => {
            ScalarValue::Float64(Some(f64::from_be_bytes(fixed(bytes).ok_or_else(bad)?)))
        }
        Type::TIMESTAMP | Type::TIMESTAMPTZ => {
            let micros = i64::from_be_bytes(fixed(bytes).ok_or_else(bad)?)
                .checked_add(PG_EPOCH_SECS * MICROS_PER_SEC)
                .ok_or_else(bad)?;
            ScalarValue::TimestampMicrosecond(Some(micros), None)
        }
        Type::TEXT | Type::VARCHAR | Type::NAME | Type::BPCHAR | Type::UNKNOWN => {
            ScalarValue::Utf8(Some(std::str::from_utf8(bytes).map_err(|_| bad())?.to_owned()))
        }
        _ => return Ok(None),
    }))
}

/// Nanoseconds since the epoch of PostgreSQL or RFC 3339 text with an offset.
fn utc_nanos(text: &str) -> Option<i64> {
    DateTime::parse_from_rfc3339(text)
        .or_else(|_| DateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f%#z"))
        .ok()?
        .timestamp_nanos_opt()
}

fn text_literal(text: &str, ty: &Type) -> PgWireResult<String> {
    let invalid =
        || user_error("22P02", format!("invalid input syntax for type {}: {text:?}", ty.name()));
    let trimmed = text.trim();
    Ok(match *ty {
        Type::INT2 | Type::INT4 | Type::INT8 | Type::OID => {
            signed(trimmed.parse::<i64>().map_err(|_| invalid())?.to_string())
        }
        Type::FLOAT4 | Type::FLOAT8 => {
            float_literal(trimmed.parse::<f64>().map_err(|_| invalid())?)
        }
        Type::NUMERIC => numeric_literal(trimmed).ok_or_else(invalid)?,
        Type::BOOL => match trimmed.to_ascii_lowercase().as_str() {
            "t" | "true" | "y" | "yes" | "on" | "1" => "TRUE".to_owned(),
            "f" | "false" | "n" | "no" | "off" | "0" => "FALSE".to_owned(),
            _ => return Err(invalid()),
        },
        Type::TIMESTAMP | Type::TIMESTAMPTZ => timestamp_literal(trimmed),
        Type::DATE => format!("CAST({} AS DATE)", quote(trimmed)),
        Type::BYTEA => match text.strip_prefix("\\x") {
            Some(hex) if is_hex(hex) => format!("X'{hex}'"),
            _ => quote(text),
        },
        _ => quote(text),
    })
}

fn binary_literal(bytes: &[u8], ty: &Type) -> PgWireResult<String> {
    let bad =
        || user_error("22P03", format!("incorrect binary data format for type {}", ty.name()));
    Ok(match *ty {
        Type::BOOL => match bytes {
            [0] => "FALSE".to_owned(),
            [_] => "TRUE".to_owned(),
            _ => return Err(bad()),
        },
        Type::INT2 => signed(i16::from_be_bytes(fixed(bytes).ok_or_else(bad)?).to_string()),
        Type::INT4 => signed(i32::from_be_bytes(fixed(bytes).ok_or_else(bad)?).to_string()),
        Type::INT8 => signed(i64::from_be_bytes(fixed(bytes).ok_or_else(bad)?).to_string()),
        Type::OID => u32::from_be_bytes(fixed(bytes).ok_or_else(bad)?).to_string(),
        Type::FLOAT4 => float_literal(f32::from_be_bytes(fixed(bytes).ok_or_else(bad)?)),
        Type::FLOAT8 => float_literal(f64::from_be_bytes(fixed(bytes).ok_or_else(bad)?)),
        Type::NUMERIC => {
            numeric_from_binary(bytes).and_then(|t| numeric_literal(&t)).ok_or_else(bad)?
        }
        Type::TIMESTAMP | Type::TIMESTAMPTZ => {
            let micros = i64::from_be_bytes(fixed(bytes).ok_or_else(bad)?)
                .saturating_add(PG_EPOCH_SECS * MICROS_PER_SEC);
            let (secs, nanos) = split_units(micros, TimeUnit::Microsecond);
            let dt = DateTime::from_timestamp(secs, nanos).ok_or_else(bad)?;
            let mut text = String::with_capacity(32);
            write_datetime(&mut text, &dt.naive_utc(), false);
            format!("CAST({} AS TIMESTAMP)", quote(&text))
        }
        Type::DATE => {
            let days = i32::from_be_bytes(fixed(bytes).ok_or_else(bad)?);
            let mut text = String::with_capacity(16);
            write_date(&mut text, days.saturating_add(PG_EPOCH_DAYS));
            format!("CAST({} AS DATE)", quote(&text))
        }
        Type::BYTEA => {
            let mut hex = String::with_capacity(3 + 2 * bytes.len());
            hex.push_str("X'");
            for byte in bytes {
                let _ = write!(hex, "{byte:02x}");
            }
            hex.push('\'');
            hex
        }
        // text, varchar, name, unknown, json...: the binary form is the text.
        _ => quote(std::str::from_utf8(bytes).map_err(|_| bad())?),
    })
}

/// An even number of hex digits.
fn is_hex(text: &str) -> bool {
    text.len().is_multiple_of(2) && text.bytes().all(|c| c.is_ascii_hexdigit())
}

fn fixed<const N: usize>(bytes: &[u8]) -> Option<[u8; N]> {
    <[u8; N]>::try_from(bytes).ok()
}

/// A string literal, quotes doubled.
fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('\'');
    for c in text.chars() {
        if c == '\'' {
            out.push('\'');
        }
        out.push(c);
    }
    out.push('\'');
    out
}

/// Parenthesizes negative numbers, so `1-$1` cannot turn into a `--` comment.
fn signed(number: String) -> String {
    if number.starts_with('-') {
        format!("({number})")
    } else {
        number
    }
}

fn float_literal<F: Into<f64> + fmt::LowerExp + Copy>(value: F) -> String {
    let wide: f64 = value.into();
    if wide.is_nan() {
        "CAST('NaN' AS DOUBLE)".to_owned()
    } else if wide.is_infinite() {
        format!("CAST('{}' AS DOUBLE)", if wide > 0.0 { "inf" } else { "-inf" })
    } else {
        // Exponent form keeps it a float literal and exact (shortest round-trip digits).
        signed(format!("{value:e}"))
    }
}

/// A validated decimal literal (`NaN` becomes a double).
fn numeric_literal(text: &str) -> Option<String> {
    if text.eq_ignore_ascii_case("nan") {
        return Some("CAST('NaN' AS DOUBLE)".to_owned());
    }
    let body = text.strip_prefix(['-', '+']).unwrap_or(text);
    let valid = body.bytes().next().is_some_and(|c| c.is_ascii_digit() || c == b'.')
        && body
            .bytes()
            .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'E' | b'+' | b'-'))
        && text.parse::<f64>().is_ok();
    valid.then(|| signed(text.to_owned()))
}

/// A timestamp parameter: PostgreSQL or RFC 3339 text with an offset is converted to UTC here;
/// anything else is left for the engine to cast.
fn timestamp_literal(text: &str) -> String {
    let utc = DateTime::parse_from_rfc3339(text)
        .or_else(|_| DateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f%#z"))
        .map(|dt| dt.naive_utc());
    match utc {
        Ok(dt) => {
            let mut out = String::with_capacity(32);
            write_datetime(&mut out, &dt, false);
            format!("CAST({} AS TIMESTAMP)", quote(&out))
        }
        Err(_) => format!("CAST({} AS TIMESTAMP)", quote(text)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    #[test]
    fn numeric_binary_round_trips() {
        for value in ["123.45", "-0.0001", "10000", "0.00", "99999999.000001", "7"] {
            let mut buf = BytesMut::new();
            super::super::values::put_numeric(&mut buf, value);
            assert_eq!(numeric_from_binary(&buf).as_deref(), Some(value), "{value}");
        }
    }

    #[test]
    fn builds_literals() {
        let lit = |v: &str, ty: &Type| param_literal(Some(v.as_bytes()), ty, false).unwrap();
        assert_eq!(lit("-5", &Type::INT4), "(-5)");
        assert_eq!(lit("it's", &Type::TEXT), "'it''s'");
        assert_eq!(lit("on", &Type::BOOL), "TRUE");
        assert_eq!(lit("1.5", &Type::FLOAT8), "1.5e0");
        assert_eq!(
            lit("2024-01-01 02:00:00+02", &Type::TIMESTAMPTZ),
            "CAST('2024-01-01 00:00:00' AS TIMESTAMP)"
        );
        assert!(param_literal(Some(&b"1; DROP TABLE t"[..]), &Type::INT8, false).is_err());
        assert_eq!(param_literal(None, &Type::INT8, true).unwrap(), "NULL");
        let bin = |v: &[u8], ty: &Type| param_literal(Some(v), ty, true).unwrap();
        assert_eq!(bin(&42i64.to_be_bytes(), &Type::INT8), "42");
        assert_eq!(
            bin(&0i64.to_be_bytes(), &Type::TIMESTAMP),
            "CAST('2000-01-01 00:00:00' AS TIMESTAMP)"
        );
        assert_eq!(bin(&[1, 255], &Type::BYTEA), "X'01ff'");
    }
}
