//! The user management statements:
//!
//! ```text
//! CREATE USER name [WITH] [PASSWORD 'secret']
//! ALTER USER name [WITH] PASSWORD 'secret'
//! DROP USER [IF EXISTS] name
//! GRANT {READ|WRITE|DELETE|ADMIN} [, ...] ON {DATABASE db | ALL DATABASES} TO name
//! REVOKE {READ|WRITE|DELETE|ADMIN} [, ...] ON {DATABASE db | ALL DATABASES} FROM name
//! CREATE TOKEN FOR name
//! DROP TOKEN 'id'
//! ```
//!
//! They hold passwords, so [`redact`] gives the text to log.

use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer, Word};

use super::{Privilege, Scope};
use crate::error::{QueryError, Result};

/// A parsed user management statement.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AccessStatement {
    /// `CREATE USER`.
    CreateUser {
        /// Name.
        name: String,
        /// Password, if given (else the user logs in with tokens only).
        password: Option<String>,
    },
    /// `ALTER USER ... PASSWORD`.
    AlterUser {
        /// Name.
        name: String,
        /// New password.
        password: String,
    },
    /// `DROP USER`.
    DropUser {
        /// Name.
        name: String,
        /// `IF EXISTS`.
        if_exists: bool,
    },
    /// `GRANT` (`revoke: false`) or `REVOKE`.
    Grant {
        /// `REVOKE` rather than `GRANT`.
        revoke: bool,
        /// Privileges.
        privileges: Vec<Privilege>,
        /// Where.
        scope: Scope,
        /// To (from) whom.
        user: String,
    },
    /// `CREATE TOKEN FOR`.
    CreateToken {
        /// For whom.
        user: String,
    },
    /// `DROP TOKEN`.
    DropToken {
        /// Its id.
        id: String,
    },
}

fn words(sql: &str, n: usize) -> Vec<String> {
    sql.split(|c: char| c.is_whitespace() || c == ';' || c == '(')
        .filter(|w| !w.is_empty())
        .take(n)
        .map(|w| w.to_ascii_uppercase())
        .collect()
}

/// True if `sql` is a user management statement (by its first words).
pub fn is_access_statement(sql: &str) -> bool {
    let w = words(sql, 2);
    let w: Vec<&str> = w.iter().map(String::as_str).collect();
    matches!(
        w.as_slice(),
        ["GRANT", ..]
            | ["REVOKE", ..]
            | ["CREATE" | "ALTER" | "DROP", "USER"]
            | ["CREATE" | "DROP", "TOKEN"]
    )
}

/// `sql` fit for a log: a user management statement's string literals (passwords) masked.
pub fn redact(sql: &str) -> String {
    if !is_access_statement(sql) && !crate::backups::is_backup(sql) {
        return sql.to_string();
    }
    match Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize() {
        Ok(tokens) => tokens
            .into_iter()
            .map(|t| match t {
                Token::SingleQuotedString(_) | Token::EscapedStringLiteral(_) => "'***'".into(),
                t => t.to_string(),
            })
            .collect(),
        Err(_) => "(a user management statement)".into(),
    }
}

fn syntax(msg: &str) -> QueryError {
    QueryError::invalid(format!("syntax: {msg}"))
}

fn name(w: &Word) -> String {
    if w.quote_style.is_some() {
        w.value.clone()
    } else {
        w.value.to_lowercase()
    }
}

struct Tokens {
    tokens: std::iter::Peekable<std::vec::IntoIter<Token>>,
}

impl Tokens {
    fn new(sql: &str) -> Result<Tokens> {
        let tokens =
            Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().map_err(QueryError::syntax)?;
        let tokens: Vec<Token> =
            tokens.into_iter().filter(|t| !matches!(t, Token::Whitespace(_))).collect();
        Ok(Tokens { tokens: tokens.into_iter().peekable() })
    }

    /// Consumes the word `w` (case-insensitive, unquoted) if it comes next.
    fn eat(&mut self, w: &str) -> bool {
        match self.tokens.peek() {
            Some(Token::Word(x)) if x.quote_style.is_none() && x.value.eq_ignore_ascii_case(w) => {
                self.tokens.next();
                true
            }
            _ => false,
        }
    }

    fn expect(&mut self, w: &str) -> Result<()> {
        if self.eat(w) {
            Ok(())
        } else {
            Err(syntax(&format!("expected {w}")))
        }
    }

    fn ident(&mut self, what: &str) -> Result<String> {
        match self.tokens.next() {
            Some(Token::Word(w)) => Ok(name(&w)),
            _ => Err(syntax(&format!("expected {what}"))),
        }
    }

    fn string(&mut self, what: &str) -> Result<String> {
        match self.tokens.next() {
            Some(Token::SingleQuotedString(s)) => Ok(s),
            _ => Err(syntax(&format!("expected {what} as a string literal"))),
        }
    }

    fn end(&mut self) -> Result<()> {
        if self.tokens.peek() == Some(&Token::SemiColon) {
            self.tokens.next();
        }
        match self.tokens.next() {
            None | Some(Token::EOF) => Ok(()),
            Some(t) => Err(syntax(&format!("unexpected {t}"))),
        }
    }
}

/// Parses a user management statement (one, optionally ending in `;`).
pub fn parse_access(sql: &str) -> Result<AccessStatement> {
    let mut t = Tokens::new(sql)?;
    let stmt = if t.eat("CREATE") {
        if t.eat("TOKEN") {
            t.expect("FOR")?;
            AccessStatement::CreateToken { user: t.ident("a user name after FOR")? }
        } else {
            t.expect("USER")?;
            let name = t.ident("a user name")?;
            t.eat("WITH");
            let password = if t.eat("PASSWORD") { Some(t.string("the password")?) } else { None };
            AccessStatement::CreateUser { name, password }
        }
    } else if t.eat("ALTER") {
        t.expect("USER")?;
        let name = t.ident("a user name")?;
        t.eat("WITH");
        t.expect("PASSWORD")?;
        AccessStatement::AlterUser { name, password: t.string("the password")? }
    } else if t.eat("DROP") {
        if t.eat("TOKEN") {
            let id = match t.tokens.next() {
                Some(Token::SingleQuotedString(s)) => s,
                Some(Token::Word(w)) => w.value,
                Some(Token::Number(n, _)) => n,
                _ => return Err(syntax("expected the token's id")),
            };
            AccessStatement::DropToken { id }
        } else {
            t.expect("USER")?;
            let if_exists = t.eat("IF");
            if if_exists {
                t.expect("EXISTS")?;
            }
            AccessStatement::DropUser { name: t.ident("a user name")?, if_exists }
        }
    } else {
        let revoke = if t.eat("GRANT") {
            false
        } else if t.eat("REVOKE") {
            true
        } else {
            return Err(syntax("not a user management statement"));
        };
        let mut privileges = Vec::new();
        loop {
            let w = t.ident("a privilege (READ, WRITE, DELETE or ADMIN)")?;
            let p = Privilege::parse(&w).ok_or_else(|| {
                syntax(&format!("unknown privilege {w}; use READ, WRITE, DELETE or ADMIN"))
            })?;
            if !privileges.contains(&p) {
                privileges.push(p);
            }
            if t.tokens.peek() == Some(&Token::Comma) {
                t.tokens.next();
            } else {
                break;
            }
        }
        t.expect("ON")?;
        let scope = if t.eat("ALL") {
            t.expect("DATABASES")?;
            Scope::All
        } else {
            t.expect("DATABASE")?;
            let db = t.ident("a database name")?;
            crate::model::schema::check_name("database", &db)?;
            Scope::Database(db)
        };
        t.expect(if revoke { "FROM" } else { "TO" })?;
        AccessStatement::Grant { revoke, privileges, scope, user: t.ident("a user name")? }
    };
    t.end()?;
    Ok(stmt)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parses_every_statement_and_rejects_the_rest() {
        assert_eq!(
            parse_access("create user Alice with password 'it''s';").unwrap(),
            AccessStatement::CreateUser { name: "alice".into(), password: Some("it's".into()) }
        );
        assert_eq!(
            parse_access("CREATE USER \"Bob\"").unwrap(),
            AccessStatement::CreateUser { name: "Bob".into(), password: None }
        );
        assert_eq!(
            parse_access("ALTER USER bob PASSWORD 'x'").unwrap(),
            AccessStatement::AlterUser { name: "bob".into(), password: "x".into() }
        );
        assert_eq!(
            parse_access("drop user if exists bob").unwrap(),
            AccessStatement::DropUser { name: "bob".into(), if_exists: true }
        );
        assert_eq!(
            parse_access("GRANT read, write ON DATABASE metrics TO bob").unwrap(),
            AccessStatement::Grant {
                revoke: false,
                privileges: vec![Privilege::Read, Privilege::Write],
                scope: Scope::Database("metrics".into()),
                user: "bob".into()
            }
        );
        assert_eq!(
            parse_access("REVOKE ADMIN ON ALL DATABASES FROM bob").unwrap(),
            AccessStatement::Grant {
                revoke: true,
                privileges: vec![Privilege::Admin],
                scope: Scope::All,
                user: "bob".into()
            }
        );
        assert_eq!(
            parse_access("CREATE TOKEN FOR bob").unwrap(),
            AccessStatement::CreateToken { user: "bob".into() }
        );
        assert_eq!(
            parse_access("DROP TOKEN 'a1b2'").unwrap(),
            AccessStatement::DropToken { id: "a1b2".into() }
        );
        for bad in [
            "GRANT SELECT ON DATABASE x TO bob",
            "GRANT READ ON x TO bob",
            "GRANT READ ON DATABASE x FROM bob",
            "REVOKE READ ON DATABASE x TO bob",
            "CREATE USER bob PASSWORD secret",
            "CREATE USER bob; DROP USER admin",
            "ALTER USER bob",
        ] {
            assert!(parse_access(bad).is_err(), "{bad} parsed");
        }
        assert!(is_access_statement(" grant read on database x to y"));
        assert!(is_access_statement("CREATE USER x"));
        assert!(!is_access_statement("CREATE TABLE users (a TAG)"));
        assert!(!is_access_statement("SELECT * FROM system.users"));
        let r = redact("CREATE USER bob WITH PASSWORD 'hunter2'");
        assert!(!r.contains("hunter2") && r.contains("bob"), "{r}");
    }
}
