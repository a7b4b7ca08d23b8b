//! Settings a session changes for itself, as PostgreSQL clients do: `SET statement_timeout`
//! (`= '5s'`, `TO 5000` in milliseconds, `= 0` or `DEFAULT` for the server's), `RESET
//! statement_timeout` and `SHOW statement_timeout`. A session may shorten the server's limit,
//! never lift it.

use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::StringArray;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::sql::sqlparser::ast::{Expr, Set, Statement, Value};

use crate::sql::{command_output, rows_output};
use crate::{QueryError, QueryOutput, Result, StatementKind};

/// The setting's name.
pub const STATEMENT_TIMEOUT: &str = "statement_timeout";

/// What a session set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionSettings {
    /// `SET statement_timeout` (`None`: the server's).
    pub statement_timeout: Option<Duration>,
}

impl SessionSettings {
    /// The time limit of the session's next statement under the server's `server` limit.
    pub fn timeout(&self, server: Option<Duration>) -> Option<Duration> {
        match (self.statement_timeout, server) {
            (Some(mine), Some(limit)) => Some(mine.min(limit)),
            (mine, limit) => mine.or(limit),
        }
    }
}

/// A change to the settings, or a question about them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettingStatement {
    /// `SET statement_timeout = ...` (`None`: back to the server's).
    SetTimeout(Option<Duration>),
    /// `SHOW statement_timeout`.
    ShowTimeout,
}

fn not_a_duration(text: &str) -> QueryError {
    QueryError::invalid(format!(
        "statement_timeout: {text:?} is not a duration such as 5000 (ms), '30s' or '2min'"
    ))
}

/// A PostgreSQL duration setting: milliseconds, or a number with a unit (`us`, `ms`, `s`,
/// `min`, `h`, `d`). Zero means the server's.
pub fn parse_duration(text: &str) -> Result<Option<Duration>> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = (&t[..split], t[split..].trim());
    let bad = || not_a_duration(text);
    let n: f64 = num.parse().map_err(|_| bad())?;
    let ms_per = match unit.to_ascii_lowercase().as_str() {
        "" | "ms" => 1.0,
        "us" => 0.001,
        "s" => 1e3,
        "min" => 60e3,
        "h" => 3600e3,
        "d" => 86_400e3,
        _ => return Err(bad()),
    };
    let ms = n * ms_per;
    if !ms.is_finite() || !(0.0..=1e13).contains(&ms) {
        return Err(bad());
    }
    Ok((ms >= 1.0).then(|| Duration::from_micros((ms * 1e3) as u64)))
}

fn display_comma(values: &[Expr]) -> String {
    values.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

fn names_timeout(parts: &[String]) -> bool {
    parts.len() == 1 && parts[0].eq_ignore_ascii_case(STATEMENT_TIMEOUT)
}

/// Recognizes `RESET statement_timeout` (which the SQL parser does not take) in `sql`.
pub fn is_reset(sql: &str) -> bool {
    let mut words = sql.split_whitespace();
    let first = words.next().unwrap_or("");
    let second = words.next().unwrap_or("").trim_end_matches(';');
    first.eq_ignore_ascii_case("reset")
        && second.eq_ignore_ascii_case(STATEMENT_TIMEOUT)
        && words.next().is_none_or(|w| w == ";")
}

/// The setting statement `stmt` is, if any.
pub fn setting(stmt: &Statement) -> Result<Option<SettingStatement>> {
    match stmt {
        Statement::Set(Set::SingleAssignment { variable, values, .. }) => {
            let parts: Vec<String> = variable.0.iter().map(|p| p.to_string()).collect();
            if !names_timeout(&parts) {
                return Ok(None);
            }
            let text = match values.as_slice() {
                [Expr::Value(v)] => match &v.value {
                    Value::Number(n, _) => n.to_string(),
                    Value::SingleQuotedString(s) => s.clone(),
                    other => return Err(not_a_duration(&other.to_string())),
                },
                [Expr::Identifier(i)] if i.value.eq_ignore_ascii_case("default") => {
                    return Ok(Some(SettingStatement::SetTimeout(None)))
                }
                other => return Err(not_a_duration(&display_comma(other))),
            };
            Ok(Some(SettingStatement::SetTimeout(parse_duration(&text)?)))
        }
        Statement::ShowVariable { variable } => {
            let parts: Vec<String> = variable.iter().map(|p| p.value.clone()).collect();
            Ok(names_timeout(&parts).then_some(SettingStatement::ShowTimeout))
        }
        _ => Ok(None),
    }
}

/// Applies `s` to `settings`; its output (the `SET` tag, or the `SHOW` row).
pub fn apply(
    s: SettingStatement,
    settings: &mut SessionSettings,
    server: Option<Duration>,
) -> QueryOutput {
    match s {
        SettingStatement::SetTimeout(t) => {
            settings.statement_timeout = t;
            command_output("SET")
        }
        SettingStatement::ShowTimeout => {
            let shown = match settings.timeout(server) {
                Some(t) if t.as_millis() % 1000 == 0 => format!("{}s", t.as_secs()),
                Some(t) => format!("{}ms", t.as_millis()),
                None => "0".to_string(),
            };
            let schema =
                Arc::new(Schema::new(vec![Field::new(STATEMENT_TIMEOUT, DataType::Utf8, false)]));
            let column = Arc::new(StringArray::from(vec![shown]));
            match RecordBatch::try_new(schema.clone(), vec![column]) {
                Ok(batch) => rows_output(schema, batch, StatementKind::Query),
                Err(_) => command_output("SHOW"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_postgresql_reads_them() {
        assert_eq!(parse_duration("5000").unwrap(), Some(Duration::from_secs(5)));
        assert_eq!(parse_duration("30s").unwrap(), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("2min").unwrap(), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5 s").unwrap(), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("0").unwrap(), None);
        for bad in ["", "5 parsecs", "-1", "1e400", "99999999999999999h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        let mine = SessionSettings { statement_timeout: Some(Duration::from_secs(5)) };
        assert_eq!(mine.timeout(Some(Duration::from_secs(300))), Some(Duration::from_secs(5)));
        let long = SessionSettings { statement_timeout: Some(Duration::from_secs(900)) };
        assert_eq!(long.timeout(Some(Duration::from_secs(300))), Some(Duration::from_secs(300)));
        assert_eq!(long.timeout(None), Some(Duration::from_secs(900)));
        assert!(is_reset("RESET statement_timeout"));
        assert!(is_reset("reset STATEMENT_TIMEOUT;"));
        assert!(!is_reset("RESET ALL"));
    }
}
