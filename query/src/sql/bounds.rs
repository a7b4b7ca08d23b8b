//! Limits on what SQL text may ask of the planner, checked before it is planned.
//!
//! A parser builds a chain such as `1+1+...+1` or `a OR b OR ...` in a loop, so its recursion
//! limit (50 levels of parentheses and subqueries) does not bound how deep the tree it returns
//! is; every later walk of that tree (DataFusion's analyzers, optimizer rules and physical
//! planner, and even dropping it) recurses once per level, and takes time that grows with the
//! square of the depth. So, like PostgreSQL's `max_stack_depth` (SQLSTATE 54001), EbbDB refuses
//! a statement before it plans it when:
//!
//! - its text is longer than `max_sql_bytes` (every later step holds a token or a node per byte
//!   or two of it);
//! - more operators than `max_expression_depth` chain into one expression, counted on the
//!   tokens, without building any tree: an operator (`+`, `AND`, `::`, `.`, `IN`, `UNION`,
//!   `JOIN`, ...) adds one to the expression it continues, a comma starts the next item of a
//!   list, and an expression in parentheses adds its operators to the expression around it;
//! - a list (an `IN` list, a function's arguments, a `VALUES` row, a `SELECT` list) has more
//!   items than `max_list_items` (the rows of a `VALUES` list are bounded by the text's length);
//! - one request holds more statements than `max_statements_per_request`;
//! - parentheses nest deeper than `max_nesting` (16): the parser tries some constructs two ways
//!   at each level (a subquery or an expression, a named argument or a value), so its time
//!   doubles with every level (a fuzzer's `f(g(CAST(...)))` 40 levels deep parsed for hours);
//! - once parsed, one statement names more tables and subqueries than `max_relations`
//!   (`FROM a, b, c, ...` and `WITH` lists are flat in the tree but nest in the plan).
//!
//! Tokenizing is a loop and the parse is bounded by its recursion limit, so nothing here can
//! overflow a stack whatever the text.

use std::collections::VecDeque;
use std::ops::ControlFlow;

use datafusion::sql::parser::{DFParser, Statement as DfStatement};
use datafusion::sql::sqlparser::ast::{Expr, Query, SetExpr, TableFactor, Visit, Visitor};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

use crate::error::{LimitError, QueryError, Result};

/// How large and deep SQL a client may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqlBounds {
    /// Longest SQL text of one request, in bytes.
    pub max_sql_bytes: usize,
    /// Most operators chained into one expression.
    pub max_expression_depth: usize,
    /// Most items of one parenthesized list.
    pub max_list_items: usize,
    /// Most statements in one request.
    pub max_statements_per_request: usize,
    /// Most tables and subqueries one statement names.
    pub max_relations: usize,
    /// Most levels of parentheses (and brackets) one inside another.
    pub max_nesting: usize,
}

impl Default for SqlBounds {
    fn default() -> Self {
        SqlBounds {
            max_sql_bytes: 4 << 20,
            max_expression_depth: 500,
            max_list_items: 10_000,
            max_statements_per_request: 1_000,
            max_relations: 500,
            max_nesting: 16,
        }
    }
}

fn over(what: impl Into<String>, limit: usize, setting: &'static str) -> QueryError {
    QueryError::Limit(LimitError { what: what.into(), limit, setting })
}

/// Parses `sql` (PostgreSQL dialect) into its statements once it is within `bounds`.
pub fn parse(sql: &str, bounds: &SqlBounds) -> Result<VecDeque<DfStatement>> {
    check_text(sql, bounds)?;
    parse_checked(sql, bounds)
}

/// [`parse`] of text that already passed [`check_text`].
pub fn parse_checked(sql: &str, bounds: &SqlBounds) -> Result<VecDeque<DfStatement>> {
    let mut statements =
        DFParser::parse_sql_with_dialect(sql, &PostgreSqlDialect {}).map_err(QueryError::syntax)?;
    if super::pg_catalog::is_catalog_query(sql) {
        // PostgreSQL clients' catalog queries, rewritten so DataFusion plans them. A rewrite
        // puts a query in place of a name: what the text could grow to is held to the text's
        // bound before any is made, and the client's own relations to theirs.
        let grown = sql.len().saturating_add(super::pg_catalog::rewrite_growth(sql));
        if grown > bounds.max_sql_bytes {
            return Err(over(
                format!("the SQL text's {grown} bytes once catalog names are expanded"),
                bounds.max_sql_bytes,
                "max_sql_bytes",
            ));
        }
        for s in &statements {
            check_relations(s, bounds.max_relations)?;
        }
        let plain = statements.iter().all(|s| matches!(s, DfStatement::Statement(_)));
        match super::pg_catalog::rewritten(sql) {
            Some(pg) if plain && pg.len() == statements.len() => {
                statements = pg.into_iter().map(|s| DfStatement::Statement(Box::new(s))).collect();
            }
            _ => {
                for s in statements.iter_mut() {
                    if let DfStatement::Statement(b) = s {
                        let taken = std::mem::replace(&mut **b, empty_statement());
                        **b = super::pg_catalog::rewrite(taken);
                    }
                }
            }
        }
        // A rewrite can add subqueries or turn a literal into a list: what it made is held to
        // the same bounds as what the client sent.
        for s in &statements {
            check_text(&s.to_string(), bounds)?;
        }
    } else {
        statements.iter_mut().for_each(super::column_names::name_literal_columns);
    }
    for s in &statements {
        check_relations(s, bounds.max_relations)?;
    }
    Ok(statements)
}

/// A statement standing in for one taken out to be rewritten.
fn empty_statement() -> datafusion::sql::sqlparser::ast::Statement {
    datafusion::sql::sqlparser::ast::Statement::Commit { chain: false, end: false, modifier: None }
}

/// Checks `sql`'s length, operator chains, lists and statement count on its tokens.
pub fn check_text(sql: &str, bounds: &SqlBounds) -> Result<()> {
    if sql.len() > bounds.max_sql_bytes {
        return Err(over(
            format!("the SQL text's {} bytes", sql.len()),
            bounds.max_sql_bytes,
            "max_sql_bytes",
        ));
    }
    let tokens =
        Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().map_err(QueryError::syntax)?;
    // Per open parenthesis or CASE (the statement itself at the bottom): operators chained
    // into the current item, items so far, and whether it is a CASE (whose WHEN, THEN and
    // ELSE parts are separate expressions, as a list's items are: a CASE of many arms is flat).
    let mut levels: Vec<(usize, usize, bool)> = vec![(0, 1, false)];
    // Operators chained in all open levels together.
    let mut depth = 0usize;
    let mut statements = 0usize;
    let mut in_statement = false;
    // Past the statement's VALUES keyword.
    let mut values = false;
    for token in &tokens {
        match token {
            Token::Whitespace(_) | Token::EOF => continue,
            Token::LParen | Token::LBracket => {
                levels.push((0, 1, false));
                if levels.len() > bounds.max_nesting + 1 {
                    return Err(over(
                        "the levels of parentheses one inside another",
                        bounds.max_nesting,
                        "max_nesting",
                    ));
                }
            }
            Token::RParen | Token::RBracket => {
                // A CASE left open inside the parentheses ends with them.
                while levels.len() > 1 {
                    let Some((ops, _, case)) = levels.pop() else { break };
                    depth -= ops;
                    if !case {
                        break;
                    }
                }
            }

            Token::Comma => {
                // The rows of a VALUES list are bounded by the text's length alone.
                let counted = levels.len() > 1 || !values;
                if let Some(top) = levels.last_mut() {
                    depth -= top.0;
                    top.0 = 0;
                    top.1 += 1;
                    if counted && top.1 > bounds.max_list_items {
                        return Err(over(
                            "a list's items",
                            bounds.max_list_items,
                            "max_list_items",
                        ));
                    }
                }
            }
            Token::SemiColon => {
                levels.truncate(1);
                levels[0] = (0, 1, false);
                depth = 0;
                in_statement = false;
                values = false;
            }
            t => {
                if levels.len() == 1 && matches!(t, Token::Word(w) if w.keyword == Keyword::VALUES)
                {
                    values = true;
                }
                if !in_statement {
                    in_statement = true;
                    statements += 1;
                    if statements > bounds.max_statements_per_request {
                        return Err(over(
                            "the request's statements",
                            bounds.max_statements_per_request,
                            "max_statements_per_request",
                        ));
                    }
                }
                let in_case = levels.last().is_some_and(|l| l.2);
                match t {
                    Token::Word(w) if w.keyword == Keyword::CASE => {
                        levels.push((0, 1, true));
                        continue;
                    }
                    Token::Word(w)
                        if in_case
                            && matches!(
                                w.keyword,
                                Keyword::WHEN | Keyword::THEN | Keyword::ELSE
                            ) =>
                    {
                        if let Some(top) = levels.last_mut() {
                            depth -= top.0;
                            top.0 = 0;
                        }
                        continue;
                    }
                    Token::Word(w) if in_case && w.keyword == Keyword::END => {
                        if let Some((ops, _, _)) = levels.pop() {
                            depth -= ops;
                        }
                        continue;
                    }
                    _ => {}
                }
                if chains(t) {
                    if let Some(top) = levels.last_mut() {
                        top.0 += 1;
                    }
                    depth += 1;
                    if depth > bounds.max_expression_depth {
                        return Err(over(
                            "an expression's chained operators",
                            bounds.max_expression_depth,
                            "max_expression_depth",
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// True for a token that continues an expression (or a chain of joins or set operations) with
/// one more level.
fn chains(token: &Token) -> bool {
    match token {
        Token::Word(w) => matches!(
            w.keyword,
            Keyword::AND
                | Keyword::OR
                | Keyword::NOT
                | Keyword::XOR
                | Keyword::IS
                | Keyword::IN
                | Keyword::LIKE
                | Keyword::ILIKE
                | Keyword::SIMILAR
                | Keyword::BETWEEN
                | Keyword::COLLATE
                | Keyword::AT
                | Keyword::OVERLAPS
                | Keyword::ESCAPE
                | Keyword::UNION
                | Keyword::INTERSECT
                | Keyword::EXCEPT
                | Keyword::JOIN
        ),
        Token::Number(..)
        | Token::Char(_)
        | Token::SingleQuotedString(_)
        | Token::DoubleQuotedString(_)
        | Token::TripleSingleQuotedString(_)
        | Token::TripleDoubleQuotedString(_)
        | Token::DollarQuotedString(_)
        | Token::SingleQuotedByteStringLiteral(_)
        | Token::DoubleQuotedByteStringLiteral(_)
        | Token::TripleSingleQuotedByteStringLiteral(_)
        | Token::TripleDoubleQuotedByteStringLiteral(_)
        | Token::SingleQuotedRawStringLiteral(_)
        | Token::DoubleQuotedRawStringLiteral(_)
        | Token::TripleSingleQuotedRawStringLiteral(_)
        | Token::TripleDoubleQuotedRawStringLiteral(_)
        | Token::NationalStringLiteral(_)
        | Token::QuoteDelimitedStringLiteral(_)
        | Token::NationalQuoteDelimitedStringLiteral(_)
        | Token::EscapedStringLiteral(_)
        | Token::UnicodeStringLiteral(_)
        | Token::HexStringLiteral(_)
        | Token::Placeholder(_)
        | Token::LBrace
        | Token::RBrace => false,
        // Every other token is an operator or punctuation between two operands.
        _ => true,
    }
}

/// Counts the tables and subqueries of a parsed statement, stopping at the first over `max`,
/// and finds subqueries that must give one column but give none (`(SELECT FROM t)`, which the
/// planner would fail on with a panic).
struct Relations {
    seen: usize,
    max: usize,
}

/// Why [`Relations`] stopped.
enum Refusal {
    TooMany,
    NoColumn,
}

impl Visitor for Relations {
    type Break = Refusal;

    fn pre_visit_query(&mut self, _query: &Query) -> ControlFlow<Refusal> {
        self.count()
    }

    fn pre_visit_table_factor(&mut self, _factor: &TableFactor) -> ControlFlow<Refusal> {
        self.count()
    }

    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<Refusal> {
        let query = match expr {
            Expr::Subquery(q) | Expr::InSubquery { subquery: q, .. } => q,
            _ => return ControlFlow::Continue(()),
        };
        match query.body.as_ref() {
            SetExpr::Select(select) if select.projection.is_empty() => {
                ControlFlow::Break(Refusal::NoColumn)
            }
            _ => ControlFlow::Continue(()),
        }
    }
}

impl Relations {
    fn count(&mut self) -> ControlFlow<Refusal> {
        self.seen += 1;
        if self.seen > self.max {
            ControlFlow::Break(Refusal::TooMany)
        } else {
            ControlFlow::Continue(())
        }
    }
}

fn check_relations(stmt: &DfStatement, max: usize) -> Result<()> {
    let s = match stmt {
        DfStatement::Statement(s) => s,
        DfStatement::Explain(e) => return check_relations(&e.statement, max),
        _ => return Ok(()),
    };
    let mut v = Relations { seen: 0, max };
    match s.visit(&mut v) {
        ControlFlow::Break(Refusal::TooMany) => {
            Err(over("the statement's tables and subqueries", max, "max_relations"))
        }
        ControlFlow::Break(Refusal::NoColumn) => Err(QueryError::invalid(
            "a subquery used as a value must return one column; it returns none",
        )),
        ControlFlow::Continue(()) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(sql: &str, b: &SqlBounds) -> Option<&'static str> {
        match parse(sql, b) {
            Err(QueryError::Limit(l)) => Some(l.setting),
            Err(e) => panic!("{sql}: {e}"),
            Ok(_) => None,
        }
    }

    #[test]
    fn chains_lists_statements_and_relations_are_bounded() {
        let b = SqlBounds {
            max_sql_bytes: 1 << 20,
            max_expression_depth: 100,
            max_list_items: 50,
            max_statements_per_request: 3,
            max_relations: 10,
            max_nesting: 16,
        };
        let chain = |n: usize, op: &str| vec!["1"; n].join(op);
        assert_eq!(refused(&format!("SELECT {}", chain(100, "+")), &b), None);
        assert_eq!(
            refused(&format!("SELECT {}", chain(102, "+")), &b),
            Some("max_expression_depth")
        );
        assert_eq!(
            refused(&format!("SELECT 1 WHERE {}", chain(60, " = 1 OR 1")), &b),
            Some("max_expression_depth")
        );
        // Parentheses add their operators to the expression around them.
        let nested = format!("SELECT ({}) + ({}) + 1", chain(45, "+"), chain(45, "*"));
        assert_eq!(refused(&nested, &b), None);
        let nested =
            format!("SELECT ({}) + ({}) + ({})", chain(45, "+"), chain(45, "*"), chain(45, "-"));
        assert_eq!(refused(&nested, &b), None, "each operand's operators end with it");
        let nested = format!("SELECT {} + ({})", chain(60, "+"), chain(60, "-"));
        assert_eq!(refused(&nested, &b), Some("max_expression_depth"));
        // Items of a list are separate expressions, but the list is bounded.
        let list = |n: usize| (0..n).map(|i| format!("'h{i}'")).collect::<Vec<_>>().join(",");
        assert_eq!(refused(&format!("SELECT 1 WHERE 'a' IN ({})", list(50)), &b), None);
        assert_eq!(
            refused(&format!("SELECT 1 WHERE 'a' IN ({})", list(51)), &b),
            Some("max_list_items")
        );
        let many_sums = (0..40).map(|_| chain(20, "+")).collect::<Vec<_>>().join(", ");
        assert_eq!(refused(&format!("SELECT {many_sums}"), &b), None);
        let wide = |n: usize| (1..=n).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ");
        assert_eq!(refused(&format!("SELECT {}", wide(50)), &b), None);
        assert_eq!(refused(&format!("SELECT {}", wide(51)), &b), Some("max_list_items"));
        let rows = vec!["(1, 'a')"; 200].join(", ");
        assert_eq!(refused(&format!("INSERT INTO t (a, b) VALUES {rows}"), &b), None);
        assert_eq!(refused("SELECT 1; SELECT 2; SELECT 3;", &b), None);
        assert_eq!(
            refused("SELECT 1; SELECT 2; SELECT 3; SELECT 4", &b),
            Some("max_statements_per_request")
        );
        assert_eq!(refused(";;;;;;SELECT 1;;;;", &b), None);
        let unions = |n: usize| vec!["SELECT 1"; n].join(" UNION ALL ");
        assert_eq!(refused(&unions(100), &b), None);
        assert_eq!(refused(&unions(102), &b), Some("max_expression_depth"));
        let joins =
            |n: usize| (0..n).map(|i| format!("t{i}")).collect::<Vec<_>>().join(" CROSS JOIN ");
        assert_eq!(refused(&format!("SELECT 1 FROM {}", joins(9)), &b), None);
        let tables = (0..11).map(|i| format!("t{i}")).collect::<Vec<_>>().join(", ");
        assert_eq!(refused(&format!("SELECT 1 FROM {tables}"), &b), Some("max_relations"));
        // Found by the fuzzer: a subquery value without a column panicked in the planner.
        for sql in
            ["DELETE FROM t WHERE (SELECT FROM t LIMIT 1)", "SELECT 1 WHERE 2 IN (SELECT FROM t)"]
        {
            assert!(matches!(parse(sql, &b), Err(QueryError::Invalid(_))), "{sql}");
        }
        assert!(parse("SELECT 1 WHERE EXISTS (SELECT FROM t)", &b).is_ok());
        let explained = "EXPLAIN SELECT 1 WHERE 2 IN (SELECT FROM t)";
        assert!(matches!(parse(explained, &b), Err(QueryError::Invalid(_))), "EXPLAIN too");
        // Found by the fuzzer: nested calls parse in time doubling with each level.
        let nested = |n: usize| format!("SELECT {}1{}", "abs(".repeat(n), ")".repeat(n));
        assert_eq!(refused(&nested(16), &b), None);
        assert_eq!(refused(&nested(17), &b), Some("max_nesting"));
        let started = std::time::Instant::now();
        parse(&nested(16), &b).expect("parses");
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", started.elapsed());
        let small = SqlBounds { max_sql_bytes: 10, ..b };
        assert_eq!(refused("SELECT 1 + 2 + 3", &small), Some("max_sql_bytes"));
        // A CASE's arms are separate expressions: many arms are flat, but a CASE adds its
        // operators to the expression around it, as parentheses do.
        let arms: String = (0..1_000).map(|i| format!(" WHEN x = {i} THEN {i}")).collect();
        assert_eq!(refused(&format!("SELECT CASE{arms} ELSE 0 END FROM t"), &b), None);
        let around = format!("SELECT {} + CASE WHEN {} THEN 1 END", chain(60, "+"), chain(60, "+"));
        assert_eq!(refused(&around, &b), Some("max_expression_depth"));
        let after =
            format!("SELECT {} + CASE WHEN 1 THEN 1 END + {}", chain(60, "+"), chain(60, "+"));
        assert_eq!(refused(&after, &b), Some("max_expression_depth"));
        let in_parens = format!("SELECT (CASE WHEN {} THEN 1) + 1", chain(60, "+"));
        assert!(!matches!(parse(&in_parens, &b), Err(QueryError::Limit(_))), "closed by ')'");
        assert_eq!(refused("BEGIN; END", &b), None);
        // Strings and comments hold no operators.
        let quoted = format!("SELECT '{}' -- {}", chain(500, "+"), chain(500, "+"));
        assert_eq!(refused(&quoted, &b), None);
    }

    #[test]
    fn a_chain_far_past_the_limit_is_refused_without_recursing() {
        // Tokenizing is a loop: a chain of a million terms is refused on a small stack.
        let sql = format!("SELECT {}", vec!["1"; 1_000_000].join("+"));
        let b = SqlBounds { max_sql_bytes: 8 << 20, ..SqlBounds::default() };
        let t = std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(move || matches!(parse(&sql, &b), Err(QueryError::Limit(_))))
            .expect("thread");
        assert!(t.join().expect("no overflow"));
    }
}
