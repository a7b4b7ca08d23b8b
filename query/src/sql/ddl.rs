//! EbbDB's DDL: `CREATE TABLE ... WITH (retention = '30d')`, `ALTER TABLE ... SET (retention =
//! '7d')`, `DROP TABLE`, `CREATE DATABASE` / `CREATE SCHEMA`.
//!
//! In `CREATE TABLE`, a column of type `TAG` is a tag; `DOUBLE`/`FLOAT`/`REAL` are float
//! fields, `BIGINT`/`INT`/... integer fields, `BIGINT UNSIGNED`/`UBIGINT` unsigned ones,
//! `BOOLEAN` boolean and `TEXT`/`VARCHAR`/`STRING` string fields. `time` is always there (a
//! `time TIMESTAMP` column may be listed; no other type is accepted for it).

use std::time::Duration;

use datafusion::sql::sqlparser::ast::{
    CreateTable, CreateTableOptions, Expr as SqlExpr, Ident, ObjectName, ObjectNamePart, SqlOption,
    Value as SqlValue,
};

use crate::error::{QueryError, Result};
use crate::model::schema::{FieldType, TIME_COLUMN};

/// An identifier as SQL resolves it: unquoted ones are lower-cased.
pub fn ident(i: &Ident) -> String {
    match i.quote_style {
        Some(_) => i.value.clone(),
        None => i.value.to_lowercase(),
    }
}

/// `(database, table)` of a table name, `db` for unqualified ones (a leading catalog part
/// `ebb` is allowed).
pub fn table_name(name: &ObjectName, db: &str) -> Result<(String, String)> {
    let parts: Vec<String> = name
        .0
        .iter()
        .map(|p| match p {
            ObjectNamePart::Identifier(i) => Ok(ident(i)),
            other => Err(QueryError::invalid(format!("unsupported name part {other}"))),
        })
        .collect::<Result<_>>()?;
    match parts.as_slice() {
        [t] => Ok((db.to_string(), t.clone())),
        [d, t] => Ok((d.clone(), t.clone())),
        [c, d, t] if c == super::CATALOG => Ok((d.clone(), t.clone())),
        _ => Err(QueryError::invalid(format!("invalid table name {name}"))),
    }
}

/// Parses a retention such as `30d`, `12h`, `90m`, `3600s`, `2w`; `none`, `inf` or `0` mean no
/// retention.
pub fn parse_retention(s: &str) -> Result<Option<Duration>> {
    let s = s.trim().to_lowercase();
    if matches!(s.as_str(), "none" | "inf" | "infinite" | "forever" | "0") {
        return Ok(None);
    }
    let bad = || {
        QueryError::invalid(format!(
            "invalid retention {s:?}: use a number with a unit s, m, h, d or w (for example '30d'), \
             or 'none'"
        ))
    };
    let split = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let n: u64 = s[..split].parse().map_err(|_| bad())?;
    let unit = match &s[split..] {
        "s" | "sec" | "secs" | "second" | "seconds" => 1,
        "m" | "min" | "mins" | "minute" | "minutes" => 60,
        "h" | "hour" | "hours" => 3600,
        "d" | "day" | "days" => 86_400,
        "w" | "week" | "weeks" => 604_800,
        _ => return Err(bad()),
    };
    let secs = n.checked_mul(unit).ok_or_else(bad)?;
    if secs == 0 {
        return Ok(None);
    }
    Ok(Some(Duration::from_secs(secs)))
}

/// The `retention` option among `options`, if given (`Some(None)`: explicitly none).
pub fn retention_option(options: &[SqlOption]) -> Result<Option<Option<Duration>>> {
    let mut out = None;
    for o in options {
        match o {
            SqlOption::KeyValue { key, value } if ident(key) == "retention" => {
                let text = match value {
                    SqlExpr::Value(v) => match &v.value {
                        SqlValue::SingleQuotedString(s) | SqlValue::DoubleQuotedString(s) => {
                            s.clone()
                        }
                        SqlValue::Number(n, _) => n.clone(),
                        other => other.to_string(),
                    },
                    SqlExpr::Identifier(i) => i.value.clone(),
                    other => other.to_string(),
                };
                out = Some(parse_retention(&text)?);
            }
            other => {
                return Err(QueryError::Unsupported(format!(
                    "table option {other}; EbbDB tables take `retention`"
                )))
            }
        }
    }
    Ok(out)
}

/// What a `CREATE TABLE` asks for.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CreateSpec {
    /// Database.
    pub database: String,
    /// Table.
    pub name: String,
    /// Tag columns.
    pub tags: Vec<String>,
    /// Field columns.
    pub fields: Vec<(String, FieldType)>,
    /// Retention, if the statement gives one (`Some(None)`: explicitly none).
    pub retention: Option<Option<Duration>>,
    /// `IF NOT EXISTS`.
    pub if_not_exists: bool,
}

/// Reads a `CREATE TABLE` statement.
pub fn create_spec(ct: &CreateTable, db: &str) -> Result<CreateSpec> {
    if ct.query.is_some() || ct.like.is_some() || ct.clone.is_some() {
        return Err(QueryError::Unsupported(
            "CREATE TABLE AS / LIKE / CLONE; create the table, then INSERT".into(),
        ));
    }
    let (database, name) = table_name(&ct.name, db)?;
    let mut tags = Vec::new();
    let mut fields = Vec::new();
    for c in &ct.columns {
        let col = ident(&c.name);
        let ty = c.data_type.to_string().to_uppercase();
        if col == TIME_COLUMN {
            if !ty.starts_with("TIMESTAMP") {
                return Err(QueryError::invalid(format!(
                    "column time must be TIMESTAMP, not {ty}"
                )));
            }
            continue;
        }
        if ty == "TAG" || ty == "SYMBOL" {
            tags.push(col);
            continue;
        }
        let ft = if ty.contains("UNSIGNED") || ty.starts_with("UBIGINT") || ty.starts_with("UINT") {
            FieldType::UInteger
        } else if ty.starts_with("DOUBLE") || ty.starts_with("FLOAT") || ty.starts_with("REAL") {
            FieldType::Float
        } else if ty.starts_with("BIGINT")
            || ty.starts_with("INT")
            || ty.starts_with("SMALLINT")
            || ty.starts_with("TINYINT")
        {
            FieldType::Integer
        } else if ty.starts_with("BOOL") {
            FieldType::Boolean
        } else if ty.starts_with("TEXT")
            || ty.starts_with("VARCHAR")
            || ty.starts_with("STRING")
            || ty.starts_with("CHAR")
        {
            FieldType::String
        } else {
            return Err(QueryError::invalid(format!(
                "column {col}: type {ty} is not supported (TAG, DOUBLE, BIGINT, BIGINT UNSIGNED, \
                 BOOLEAN, TEXT)"
            )));
        };
        fields.push((col, ft));
    }
    let retention = match &ct.table_options {
        CreateTableOptions::None => None,
        CreateTableOptions::With(opts) | CreateTableOptions::Options(opts) => {
            retention_option(opts)?
        }
        other => {
            return Err(QueryError::Unsupported(format!("table options {other}; use WITH (...)")))
        }
    };
    Ok(CreateSpec { database, name, tags, fields, retention, if_not_exists: ct.if_not_exists })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retentions_parse() {
        assert_eq!(parse_retention("30d").unwrap(), Some(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse_retention(" 12H ").unwrap(), Some(Duration::from_secs(12 * 3600)));
        assert_eq!(parse_retention("90m").unwrap(), Some(Duration::from_secs(5400)));
        assert_eq!(parse_retention("2w").unwrap(), Some(Duration::from_secs(2 * 604_800)));
        assert_eq!(parse_retention("none").unwrap(), None);
        for bad in ["", "d", "30", "30x", "-1d", "99999999999999999999d"] {
            assert!(parse_retention(bad).is_err(), "{bad}");
        }
    }
}
