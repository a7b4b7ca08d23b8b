//! Names of result columns the statement did not name. DataFusion names an expression by its
//! typed form (`Int64(1)`, `date_bin(IntervalMonthDayNano(...), cpu.time)`); a result column
//! whose expression holds a literal is named by its SQL text instead (`1`,
//! `date_bin(INTERVAL '1 minute', time)`), as the client wrote it, and a call without
//! arguments by its function (`version`, `current_database`), as PostgreSQL names it. Other
//! columns and expressions keep DataFusion's names (`host`, `count(*)`, `max(cpu.usage)`).

use std::ops::ControlFlow;

use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    visit_expressions, Expr, Ident, Query, SelectItem, SetExpr, Statement,
};

/// Names the unnamed result columns of `stmt`'s outermost query that hold a literal.
pub fn name_literal_columns(stmt: &mut DfStatement) {
    let DfStatement::Statement(s) = stmt else { return };
    if let Statement::Query(q) = &mut **s {
        name_in(q);
    }
}

fn name_in(q: &mut Query) {
    // The result's names are those of the first branch of a set operation.
    let mut body = &mut *q.body;
    loop {
        match body {
            SetExpr::SetOperation { left, .. } => body = &mut **left,
            SetExpr::Query(inner) => body = &mut *inner.body,
            SetExpr::Select(select) => {
                for item in select.projection.iter_mut() {
                    let SelectItem::UnnamedExpr(e) = item else { continue };
                    let name = match e {
                        _ if has_literal(e) => Some(e.to_string()),
                        // A call without arguments is named by its function, as PostgreSQL
                        // names it (`version`, `current_database`, `now`).
                        Expr::Function(f) if no_arguments(&f.args) => {
                            f.name.0.last().map(|part| part.to_string())
                        }
                        _ => None,
                    };
                    if let Some(name) = name {
                        let alias = Ident::with_quote('"', name);
                        let expr = std::mem::replace(
                            e,
                            Expr::Value(datafusion::sql::sqlparser::ast::Value::Null.into()),
                        );
                        *item = SelectItem::ExprWithAlias { expr, alias };
                    }
                }
                return;
            }
            _ => return,
        }
    }
}

fn no_arguments(args: &datafusion::sql::sqlparser::ast::FunctionArguments) -> bool {
    use datafusion::sql::sqlparser::ast::FunctionArguments;
    match args {
        FunctionArguments::None => true,
        FunctionArguments::List(l) => l.args.is_empty(),
        FunctionArguments::Subquery(_) => false,
    }
}

fn has_literal(e: &Expr) -> bool {
    visit_expressions(e, |x| match x {
        Expr::Value(_) | Expr::Interval(_) | Expr::TypedString { .. } => ControlFlow::Break(()),
        _ => ControlFlow::Continue(()),
    })
    .is_break()
}

#[cfg(test)]
mod tests {
    use datafusion::sql::parser::DFParser;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;

    use super::*;

    fn named(sql: &str) -> String {
        let mut s = DFParser::parse_sql_with_dialect(sql, &PostgreSqlDialect {}).unwrap();
        let mut stmt = s.pop_front().unwrap();
        name_literal_columns(&mut stmt);
        stmt.to_string()
    }

    #[test]
    fn literal_columns_are_named_by_their_text() {
        assert_eq!(named("SELECT 1"), r#"SELECT 1 AS "1""#);
        assert_eq!(
            named("SELECT host, usage * 2, max(usage) FROM cpu"),
            r#"SELECT host, usage * 2 AS "usage * 2", max(usage) FROM cpu"#
        );
        assert_eq!(named("SELECT 1 AS one UNION SELECT 2"), "SELECT 1 AS one UNION SELECT 2");
        assert_eq!(
            named("SELECT 'a' UNION ALL SELECT 'b'"),
            r#"SELECT 'a' AS "'a'" UNION ALL SELECT 'b'"#
        );
        assert_eq!(named("SELECT count(*) FROM cpu"), "SELECT count(*) FROM cpu");
        assert_eq!(
            named("SELECT current_database(), version(), now() AS t"),
            r#"SELECT current_database() AS "current_database", version() AS "version", now() AS t"#
        );
    }
}
