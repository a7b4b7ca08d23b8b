//! PostgreSQL value encodings shared by results and parameters: floats, timestamps, dates,
//! times and intervals in PostgreSQL's text output, and `numeric` in its binary format.

use std::fmt::{self, Write as _};

use bytes::{BufMut, BytesMut};
use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, Timelike};
use datafusion::arrow::datatypes::TimeUnit;

/// Seconds from the Unix epoch to PostgreSQL's (2000-01-01).
pub(super) const PG_EPOCH_SECS: i64 = 946_684_800;
/// Days from the Unix epoch to PostgreSQL's.
pub(super) const PG_EPOCH_DAYS: i32 = 10_957;
/// 1970-01-01 as a day number counted from 0001-01-01 (day 1).
const UNIX_EPOCH_CE_DAYS: i32 = 719_163;
pub(super) const NANOS_PER_SEC: i64 = 1_000_000_000;
pub(super) const MICROS_PER_SEC: i64 = 1_000_000;

/// Appends `value`'s `Display` text. (Writing to a `BytesMut` cannot fail.)
pub(super) fn put_display(row: &mut BytesMut, value: impl fmt::Display) {
    let _ = write!(row, "{value}");
}

/// A float as PostgreSQL prints it: `NaN`, `Infinity`, `-Infinity`, or the shortest exact digits.
pub(super) fn write_float<W: fmt::Write>(w: &mut W, value: f64, shown: impl fmt::Display) {
    let _ = if value.is_nan() {
        w.write_str("NaN")
    } else if value.is_infinite() {
        w.write_str(if value > 0.0 { "Infinity" } else { "-Infinity" })
    } else {
        write!(w, "{shown}")
    };
}

pub(super) fn units_per_sec(unit: TimeUnit) -> i64 {
    match unit {
        TimeUnit::Second => 1,
        TimeUnit::Millisecond => 1_000,
        TimeUnit::Microsecond => MICROS_PER_SEC,
        TimeUnit::Nanosecond => NANOS_PER_SEC,
    }
}

/// A time value in `unit` as whole seconds and nanoseconds.
pub(super) fn split_units(value: i64, unit: TimeUnit) -> (i64, u32) {
    let per_sec = units_per_sec(unit);
    let nanos = value.rem_euclid(per_sec) * (NANOS_PER_SEC / per_sec);
    (value.div_euclid(per_sec), u32::try_from(nanos).unwrap_or(0))
}

/// A Unix timestamp in `unit` as PostgreSQL's binary timestamp: microseconds since 2000-01-01.
pub(super) fn pg_micros(value: i64, unit: TimeUnit) -> i64 {
    let micros = match unit {
        TimeUnit::Second => value.saturating_mul(MICROS_PER_SEC),
        TimeUnit::Millisecond => value.saturating_mul(1_000),
        TimeUnit::Microsecond => value,
        TimeUnit::Nanosecond => value.div_euclid(1_000),
    };
    micros.saturating_sub(PG_EPOCH_SECS * MICROS_PER_SEC)
}

pub(super) fn write_timestamp<W: fmt::Write>(w: &mut W, value: i64, unit: TimeUnit, tz: bool) {
    let (secs, nanos) = split_units(value, unit);
    match DateTime::from_timestamp(secs, nanos) {
        Some(dt) => write_datetime(w, &dt.naive_utc(), tz),
        None => {
            let _ = write!(w, "{value}");
        }
    }
}

pub(super) fn write_datetime<W: fmt::Write>(w: &mut W, dt: &NaiveDateTime, tz: bool) {
    let bc = write_ymd(w, dt.date());
    let _ = write!(w, " {:02}:{:02}:{:02}", dt.hour(), dt.minute(), dt.second());
    write_fraction(w, dt.nanosecond());
    if tz {
        let _ = w.write_str("+00");
    }
    if bc {
        let _ = w.write_str(" BC");
    }
}

/// Writes `YYYY-MM-DD`; true if the year is BC (PostgreSQL prints ` BC` after the value).
fn write_ymd<W: fmt::Write>(w: &mut W, date: NaiveDate) -> bool {
    let (year, bc) = if date.year() <= 0 { (1 - date.year(), true) } else { (date.year(), false) };
    let _ = write!(w, "{year:04}-{:02}-{:02}", date.month(), date.day());
    bc
}

/// A date given as days since 1970-01-01.
pub(super) fn write_date<W: fmt::Write>(w: &mut W, days: i32) {
    match NaiveDate::from_num_days_from_ce_opt(days.saturating_add(UNIX_EPOCH_CE_DAYS)) {
        Some(date) => {
            if write_ymd(w, date) {
                let _ = w.write_str(" BC");
            }
        }
        None => {
            let _ = write!(w, "{days}");
        }
    }
}

/// A time of day given in nanoseconds since midnight.
pub(super) fn write_time<W: fmt::Write>(w: &mut W, nanos: i64) {
    let secs = nanos.div_euclid(NANOS_PER_SEC);
    let _ = write!(w, "{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60);
    write_fraction(w, u32::try_from(nanos.rem_euclid(NANOS_PER_SEC)).unwrap_or(0));
}

/// `.fff...` without trailing zeros; nothing for a whole second.
fn write_fraction<W: fmt::Write>(w: &mut W, nanos: u32) {
    if nanos == 0 {
        return;
    }
    let (mut digits, mut width) = (nanos, 9usize);
    while digits.is_multiple_of(10) {
        digits /= 10;
        width -= 1;
    }
    let _ = write!(w, ".{digits:0width$}");
}

pub(super) fn put_interval(row: &mut BytesMut, binary: bool, months: i32, days: i32, nanos: i64) {
    if binary {
        row.put_i64(nanos / 1_000);
        row.put_i32(days);
        row.put_i32(months);
    } else {
        write_interval(row, months, days, nanos);
    }
}

/// An interval in PostgreSQL's default (`postgres`) style: `1 year 2 mons 3 days 04:05:06`.
pub(super) fn write_interval<W: fmt::Write>(w: &mut W, months: i32, days: i32, nanos: i64) {
    let mut any = false;
    let mut negative = false;
    for (value, unit) in [(months / 12, "year"), (months % 12, "mon"), (days, "day")] {
        if value != 0 {
            let sep = if any { " " } else { "" };
            let plural = if value == 1 { "" } else { "s" };
            let _ = write!(w, "{sep}{value} {unit}{plural}");
            any = true;
            negative |= value < 0;
        }
    }
    if nanos != 0 || !any {
        let sep = if any { " " } else { "" };
        let sign = if nanos < 0 {
            "-"
        } else if negative {
            "+"
        } else {
            ""
        };
        let abs = nanos.unsigned_abs();
        let secs = abs / 1_000_000_000;
        let _ = write!(w, "{sep}{sign}{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60);
        write_fraction(w, u32::try_from(abs % 1_000_000_000).unwrap_or(0));
    }
}

/// PostgreSQL's binary `numeric` for a decimal string (`-123.4500`): base-10000 digits.
pub(super) fn put_numeric(row: &mut BytesMut, text: &str) {
    let text = text.trim();
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    let valid = !(int.is_empty() && frac.is_empty())
        && int.bytes().chain(frac.bytes()).all(|c| c.is_ascii_digit());
    if !valid {
        // NaN: no digits, sign 0xC000.
        row.put_slice(&[0, 0, 0, 0, 0xC0, 0, 0, 0]);
        return;
    }
    let int = int.trim_start_matches('0');
    let mut digits = Vec::with_capacity((int.len() + frac.len()) / 4 + 2);
    push_groups(&mut digits, (4 - int.len() % 4) % 4, int.as_bytes(), 0);
    let int_groups = digits.len();
    push_groups(&mut digits, 0, frac.as_bytes(), (4 - frac.len() % 4) % 4);
    let leading_zeros = digits.iter().take_while(|&&d| d == 0).count();
    digits.drain(..leading_zeros);
    while digits.last() == Some(&0) {
        digits.pop();
    }
    let weight = if digits.is_empty() { 0 } else { int_groups as i64 - 1 - leading_zeros as i64 };
    row.put_i16(i16::try_from(digits.len()).unwrap_or(i16::MAX));
    row.put_i16(i16::try_from(weight).unwrap_or(0));
    row.put_u16(if negative && !digits.is_empty() { 0x4000 } else { 0 });
    row.put_u16(u16::try_from(frac.len()).unwrap_or(u16::MAX));
    for d in digits {
        row.put_i16(d);
    }
}

/// Appends the decimal digits (padded with zeros before and after) as base-10000 groups.
fn push_groups(out: &mut Vec<i16>, pad_before: usize, digits: &[u8], pad_after: usize) {
    let all = std::iter::repeat_n(0, pad_before)
        .chain(digits.iter().map(|c| i16::from(c - b'0')))
        .chain(std::iter::repeat_n(0, pad_after));
    let (mut group, mut count) = (0i16, 0);
    for d in all {
        group = group * 10 + d;
        count += 1;
        if count == 4 {
            out.push(group);
            (group, count) = (0, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text<F: FnOnce(&mut String)>(f: F) -> String {
        let mut s = String::new();
        f(&mut s);
        s
    }

    #[test]
    fn formats_time_values() {
        let ns = 1_700_000_000_123_456_000;
        assert_eq!(
            text(|s| write_timestamp(s, ns, TimeUnit::Nanosecond, false)),
            "2023-11-14 22:13:20.123456"
        );
        assert_eq!(
            text(|s| write_timestamp(s, 1_700_000_000, TimeUnit::Second, true)),
            "2023-11-14 22:13:20+00"
        );
        assert_eq!(text(|s| write_date(s, 0)), "1970-01-01");
        assert_eq!(text(|s| write_time(s, 3_723_500_000_000)), "01:02:03.5");
        assert_eq!(
            text(|s| write_interval(s, 14, 3, 3_723_000_000_000)),
            "1 year 2 mons 3 days 01:02:03"
        );
        assert_eq!(text(|s| write_interval(s, 0, 0, 0)), "00:00:00");
        assert_eq!(text(|s| write_interval(s, 0, -1, 7_200_000_000_000)), "-1 days +02:00:00");
        assert_eq!(pg_micros(PG_EPOCH_SECS * NANOS_PER_SEC + 1_500, TimeUnit::Nanosecond), 1);
    }

    #[test]
    fn encodes_numeric_binary() {
        let mut buf = BytesMut::new();
        put_numeric(&mut buf, "-123.45");
        // ndigits 2, weight 0, negative, dscale 2, digits 123 4500
        assert_eq!(&buf[..], &[0, 2, 0, 0, 0x40, 0, 0, 2, 0, 123, 0x11, 0x94]);
    }
}
