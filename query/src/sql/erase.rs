//! `ERASE`: EbbDB's statement for erasing everything one tag value identifies.
//!
//! ```text
//! ERASE WHERE <tag> = '<value>' [IN DATABASE <database>] [DEADLINE '<duration>']
//! ```
//!
//! It deletes every series whose tag `<tag>` is `<value>` in every table of the database (the
//! session's by default), removes them from the series index, and returns one erasure id.
//! `DEADLINE` asks for the data to be physically gone sooner than the configured delete
//! deadline; a longer one is refused.

use std::time::Duration;

use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer, Word};

use super::ddl::parse_retention;
use crate::error::{QueryError, Result};

/// A parsed `ERASE` statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EraseStatement {
    /// The tag.
    pub tag: String,
    /// Its value.
    pub value: String,
    /// The database (`None`: the session's).
    pub database: Option<String>,
    /// The deadline asked for, if any.
    pub deadline: Option<Duration>,
}

impl EraseStatement {
    /// The statement as recorded in the deletion ledger, with the database spelled out.
    pub fn text(&self, database: &str) -> String {
        let mut s = format!(
            "ERASE WHERE {} = '{}' IN DATABASE {}",
            quote_ident(&self.tag),
            self.value.replace('\'', "''"),
            quote_ident(database)
        );
        if let Some(d) = self.deadline {
            s.push_str(&format!(" DEADLINE '{}'", crate::db::human_duration(d.as_secs())));
        }
        s
    }
}

fn quote_ident(s: &str) -> String {
    let plain = s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && s.chars().next().is_some_and(|c| !c.is_ascii_digit());
    if plain {
        s.to_string()
    } else {
        format!("\"{}\"", s.replace('"', "\"\""))
    }
}

fn syntax(msg: &str) -> QueryError {
    QueryError::invalid(format!(
        "ERASE syntax: {msg}; write ERASE WHERE <tag> = '<value>' [IN DATABASE <database>] \
         [DEADLINE '<duration>']"
    ))
}

/// True if `sql` is an `ERASE` statement (its first word).
pub fn is_erase(sql: &str) -> bool {
    let word: String = sql.trim_start().chars().take_while(|c| c.is_ascii_alphabetic()).collect();
    word.eq_ignore_ascii_case("erase")
}

fn ident(w: &Word) -> String {
    if w.quote_style.is_some() {
        w.value.clone()
    } else {
        w.value.to_lowercase()
    }
}

fn keyword(t: &mut impl Iterator<Item = Token>, k: Keyword, what: &str) -> Result<()> {
    match t.next() {
        Some(Token::Word(w)) if w.keyword == k && w.quote_style.is_none() => Ok(()),
        _ => Err(syntax(&format!("expected {what}"))),
    }
}

/// Parses an `ERASE` statement (one, optionally ending in `;`).
pub fn parse_erase(sql: &str) -> Result<EraseStatement> {
    let tokens =
        Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().map_err(QueryError::syntax)?;
    let mut t = tokens.into_iter().filter(|t| !matches!(t, Token::Whitespace(_))).peekable();
    match t.next() {
        Some(Token::Word(w)) if w.value.eq_ignore_ascii_case("erase") => {}
        _ => return Err(syntax("expected ERASE")),
    }
    keyword(&mut t, Keyword::WHERE, "WHERE")?;
    let tag = match t.next() {
        Some(Token::Word(w)) => ident(&w),
        _ => return Err(syntax("expected a tag name after WHERE")),
    };
    if t.next() != Some(Token::Eq) {
        return Err(syntax("expected = after the tag (one tag, compared for equality)"));
    }
    let value = match t.next() {
        Some(Token::SingleQuotedString(v)) => v,
        _ => return Err(syntax("expected the tag value as a string literal")),
    };
    let mut stmt = EraseStatement { tag, value, database: None, deadline: None };
    loop {
        match t.next() {
            None | Some(Token::EOF) => break,
            Some(Token::SemiColon) => {
                if t.any(|x| x != Token::EOF) {
                    return Err(QueryError::invalid("give one statement after ERASE's ;"));
                }
                break;
            }
            Some(Token::Word(w)) if w.keyword == Keyword::IN && stmt.database.is_none() => {
                keyword(&mut t, Keyword::DATABASE, "DATABASE after IN")?;
                match t.next() {
                    Some(Token::Word(w)) => stmt.database = Some(ident(&w)),
                    _ => return Err(syntax("expected a database name after IN DATABASE")),
                }
            }
            Some(Token::Word(w))
                if w.value.eq_ignore_ascii_case("deadline") && stmt.deadline.is_none() =>
            {
                let text = match t.next() {
                    Some(Token::SingleQuotedString(v)) => v,
                    _ => return Err(syntax("expected a duration string after DEADLINE")),
                };
                match parse_retention(&text) {
                    Ok(Some(d)) => stmt.deadline = Some(d),
                    _ => {
                        return Err(QueryError::invalid(format!(
                            "invalid DEADLINE {text:?}: use a positive number with a unit s, m, \
                             h, d or w (for example '24h')"
                        )))
                    }
                }
            }
            Some(other) => return Err(syntax(&format!("unexpected {other}"))),
        }
    }
    Ok(stmt)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parses_every_clause_and_rejects_the_rest() {
        let s =
            parse_erase("erase where \"User\" = 'o''brien' in database Metrics deadline '12h';")
                .unwrap();
        assert_eq!(s.tag, "User");
        assert_eq!(s.value, "o'brien");
        assert_eq!(s.database.as_deref(), Some("metrics"));
        assert_eq!(s.deadline, Some(Duration::from_secs(12 * 3600)));
        assert_eq!(
            s.text("metrics"),
            "ERASE WHERE \"User\" = 'o''brien' IN DATABASE metrics DEADLINE '12h'"
        );
        let s = parse_erase("ERASE WHERE user = 'alice'").unwrap();
        assert_eq!((s.database, s.deadline), (None, None));
        assert!(is_erase("  Erase where x = 'y'") && !is_erase("erased"));
        for bad in [
            "ERASE user = 'a'",
            "ERASE WHERE user = a",
            "ERASE WHERE user > 'a'",
            "ERASE WHERE user = 'a' AND host = 'b'",
            "ERASE WHERE user = 'a' DEADLINE 'soon'",
            "ERASE WHERE user = 'a' DEADLINE 'none'",
            "ERASE WHERE user = 'a'; SELECT 1",
        ] {
            assert!(parse_erase(bad).is_err(), "{bad} parsed");
        }
    }
}
