//! Literals a query's `WHERE` compares columns with, taken out as parameters, so that queries
//! differing only in them (a dashboard's panel over a moving time window, one host after
//! another) share one prepared plan (see [`crate::front::PreparedQuery`]).
//!
//! Only the top-level `WHERE` of a plain `SELECT` is touched, and in it only string and number
//! literals compared with a column (`=`, `<>`, `<`, `<=`, `>`, `>=`, `BETWEEN`, `IN`), under
//! `AND`, `OR` and parentheses: a literal elsewhere may shape the plan (a `GROUP BY 1`, a
//! `date_bin` interval, a `LIMIT`) and stays in the text.

use datafusion::common::ScalarValue;
use datafusion::sql::sqlparser::ast::{
    visit_expressions, BinaryOperator, Expr, SetExpr, Statement, Value,
};
use std::ops::ControlFlow;

/// Most literals taken out of one statement.
const MAX_PARAMETERS: usize = 256;

/// Replaces the literals `stmt`'s `WHERE` compares columns with by `$1`, `$2`..., returning
/// their values in order; `None` (and `stmt` unchanged) if `stmt` is not a plain query or
/// already has placeholders.
pub fn parameterize(stmt: &mut Statement) -> Option<Vec<ScalarValue>> {
    let has_placeholder = visit_expressions(&*stmt, |e| match e {
        Expr::Value(v) if matches!(v.value, Value::Placeholder(_)) => ControlFlow::Break(()),
        _ => ControlFlow::Continue(()),
    });
    if has_placeholder.is_break() {
        return None;
    }
    let Statement::Query(query) = stmt else { return None };
    let SetExpr::Select(select) = query.body.as_mut() else { return None };
    let mut values = Vec::new();
    if let Some(selection) = select.selection.as_mut() {
        take_literals(selection, &mut values);
    }
    Some(values)
}

fn take_literals(e: &mut Expr, out: &mut Vec<ScalarValue>) {
    match e {
        Expr::BinaryOp { left, op, right } => match op {
            BinaryOperator::And | BinaryOperator::Or => {
                take_literals(left, out);
                take_literals(right, out);
            }
            BinaryOperator::Eq
            | BinaryOperator::NotEq
            | BinaryOperator::Lt
            | BinaryOperator::LtEq
            | BinaryOperator::Gt
            | BinaryOperator::GtEq => {
                if is_column(left) {
                    take(right, out);
                } else if is_column(right) {
                    take(left, out);
                }
            }
            _ => {}
        },
        Expr::Nested(inner) => take_literals(inner, out),
        Expr::Between { expr, low, high, .. } if is_column(expr) => {
            take(low, out);
            take(high, out);
        }
        Expr::InList { expr, list, .. } if is_column(expr) => {
            for item in list {
                take(item, out);
            }
        }
        _ => {}
    }
}

fn is_column(e: &Expr) -> bool {
    matches!(e, Expr::Identifier(_) | Expr::CompoundIdentifier(_))
}

/// Takes `e` out if it is a string or number literal: its value goes to `out`, a placeholder
/// takes its place.
fn take(e: &mut Expr, out: &mut Vec<ScalarValue>) {
    if out.len() >= MAX_PARAMETERS {
        return;
    }
    let Expr::Value(v) = e else { return };
    let value = match &v.value {
        Value::SingleQuotedString(s) => ScalarValue::Utf8(Some(s.clone())),
        Value::Number(n, false) => {
            // As SQL reads it: an integer if it is one, else a float.
            let text = n.to_string();
            match text.parse::<i64>() {
                Ok(i) => ScalarValue::Int64(Some(i)),
                // A decimal fraction; an integer past i64 or an exponent SQL reads its own way.
                Err(_) if text.contains('.') && !text.contains(['e', 'E']) => {
                    match text.parse::<f64>() {
                        Ok(f) if f.is_finite() => ScalarValue::Float64(Some(f)),
                        _ => return,
                    }
                }
                Err(_) => return,
            }
        }
        _ => return,
    };
    out.push(value);
    v.value = Value::Placeholder(format!("${}", out.len()));
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::parser::{DFParser, Statement as DfStatement};
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;

    fn parameterized(sql: &str) -> Option<(String, Vec<ScalarValue>)> {
        let mut statements = DFParser::parse_sql_with_dialect(sql, &PostgreSqlDialect {}).ok()?;
        let DfStatement::Statement(mut s) = statements.pop_front()? else { return None };
        let values = parameterize(&mut s)?;
        Some((s.to_string(), values))
    }

    #[test]
    fn takes_out_literals_compared_with_columns() {
        let (sql, values) = parameterized(
            "SELECT date_bin(interval '1 minute', time, to_timestamp(0)) AS b, max(u) FROM cpu \
             WHERE (host = 'h1' OR 'h2' = host) AND time >= '2016-01-01T00:00:00Z' \
             AND time < '2016-01-01T01:00:00Z' AND u > 90.5 AND n BETWEEN 1 AND 2 \
             AND region IN ('a', 'b') AND u + 1 > 3 GROUP BY 1 ORDER BY 1 LIMIT 5",
        )
        .expect("a query");
        assert_eq!(
            sql,
            "SELECT date_bin(INTERVAL '1 minute', time, to_timestamp(0)) AS b, max(u) FROM cpu \
             WHERE (host = $1 OR $2 = host) AND time >= $3 AND time < $4 AND u > $5 \
             AND n BETWEEN $6 AND $7 AND region IN ($8, $9) AND u + 1 > 3 GROUP BY 1 ORDER BY 1 \
             LIMIT 5"
        );
        let utf8 = |s: &str| ScalarValue::Utf8(Some(s.into()));
        assert_eq!(
            values,
            vec![
                utf8("h1"),
                utf8("h2"),
                utf8("2016-01-01T00:00:00Z"),
                utf8("2016-01-01T01:00:00Z"),
                ScalarValue::Float64(Some(90.5)),
                ScalarValue::Int64(Some(1)),
                ScalarValue::Int64(Some(2)),
                utf8("a"),
                utf8("b"),
            ]
        );
    }

    #[test]
    fn leaves_other_statements_and_placeholders_alone() {
        assert!(parameterized("DELETE FROM cpu WHERE host = 'h1'").is_none());
        assert!(
            parameterized("SELECT * FROM cpu WHERE host = $1 AND time > '2016-01-01'").is_none()
        );
        assert!(parameterized("SELECT 1 UNION SELECT 2").is_none());
        let (sql, values) = parameterized("SELECT count(*) FROM cpu").expect("a query");
        assert_eq!((sql.as_str(), values.len()), ("SELECT count(*) FROM cpu", 0));
        let (sql, values) =
            parameterized("SELECT * FROM cpu WHERE n = 1e3 AND m = 99999999999999999999")
                .expect("a query");
        assert_eq!(values.len(), 0, "{sql}");
    }
}
