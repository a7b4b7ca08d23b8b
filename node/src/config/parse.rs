//! Parsing of setting values: sizes, booleans, and the error they make.

use crate::error::{NodeError, Result};

/// Bytes from `"1GiB"`, `"512MiB"`, `"64KiB"` or a plain number.
pub fn bytes(what: &str, s: &str) -> Result<usize> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => (&s[..i], s[i..].trim()),
        None => (s, ""),
    };
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "kib" | "k" => 10,
        "mib" | "m" => 20,
        "gib" | "g" => 30,
        _ => return Err(bad(format!("{what}: {s:?} is not a size such as 512MiB or 2GiB"))),
    };
    let n: usize = num.parse().map_err(|_| bad(format!("{what}: {s:?} is not a size")))?;
    n.checked_shl(shift)
        .filter(|v| *v >> shift == n && *v > 0)
        .ok_or_else(|| bad(format!("{what}: {s:?} is out of range")))
}

/// A duration from `"100ms"`, `"2s"` or a plain number of milliseconds, within `range`.
pub(super) fn interval(
    what: &str,
    s: &str,
    range: std::ops::RangeInclusive<std::time::Duration>,
) -> Result<std::time::Duration> {
    use std::time::Duration;
    let t = s.trim();
    let (digits, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => t.split_at(i),
        None => (t, "ms"),
    };
    let n: u64 = digits.parse().map_err(|_| bad(format!("{what}: not a duration: {s:?}")))?;
    let d = match unit.trim() {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        _ => return Err(bad(format!("{what}: use ms or s: {s:?}"))),
    };
    if !range.contains(&d) {
        return Err(bad(format!(
            "{what} must be between {:?} and {:?}",
            range.start(),
            range.end()
        )));
    }
    Ok(d)
}

pub(super) fn boolean(var: &str, v: &str) -> Result<bool> {
    match v {
        "1" | "true" | "yes" => Ok(true),
        "0" | "false" | "no" | "" => Ok(false),
        _ => Err(bad(format!("{var}: not a boolean: {v:?}"))),
    }
}

pub(super) fn bad(message: impl Into<String>) -> NodeError {
    NodeError::Config(message.into())
}
