//! What a request's SQL is, read once: the statements EbbDB reads from the text itself
//! (`ERASE`, `ALTER CLUSTER`) and, for the rest, what each parsed statement does ([`Class`]).
//! The front door and [`super::SqlSession`] both take a request apart here, then act on the
//! class without matching the statement again. (The door reads what only it handles first:
//! user management, `RESET` and session settings.)

use std::collections::VecDeque;

use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::Statement as SqlStatement;

use super::alter_cluster::{is_alter_cluster, parse_alter_cluster, ClusterStatement};
use super::bounds::SqlBounds;
use super::erase::{is_erase, parse_erase, EraseStatement};
use super::shard::ShardOp;
use crate::error::{QueryError, Result};

/// A request's SQL.
#[derive(Debug)]
#[non_exhaustive]
pub enum Request {
    /// `ERASE WHERE tag = 'value' ...`: the whole request.
    Erase(EraseStatement),
    /// `ALTER CLUSTER ...`: the whole request.
    AlterCluster(ClusterStatement),
    /// `BACKUP TO '<uri>'`: the whole request.
    Backup(crate::backups::BackupRequest),
    /// SQL statements, each with its class, in order.
    Statements(VecDeque<Classified>),
}

/// One SQL statement and what it does.
#[derive(Debug)]
pub struct Classified {
    /// The statement.
    pub statement: DfStatement,
    /// What it does.
    pub class: Class,
}

/// What a SQL statement does.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Class {
    /// Reads only: a query, `EXPLAIN` without `ANALYZE`, `SHOW`.
    Read,
    /// `INSERT`.
    Insert,
    /// `DELETE`: a change every shard applies, planned by the session.
    Delete,
    /// `CREATE MATERIALIZED VIEW`: a rollup every shard keeps.
    Rollup,
    /// Table or database DDL: the change every shard applies.
    Change(Box<ShardOp>),
    /// Anything else DataFusion plans and runs (`EXPLAIN ANALYZE`, `SET` of its options...).
    Other,
}

impl Class {
    /// True if a statement of this class only reads.
    pub fn reads_only(&self) -> bool {
        matches!(self, Class::Read)
    }
}

impl Request {
    /// Reads `sql` (within `bounds`) in a session whose database is `database`.
    pub fn read(sql: &str, bounds: &SqlBounds, database: &str) -> Result<Request> {
        super::bounds::check_text(sql, bounds)?;
        if is_erase(sql) {
            return Ok(Request::Erase(parse_erase(sql)?));
        }
        if is_alter_cluster(sql) {
            return Ok(Request::AlterCluster(parse_alter_cluster(sql)?));
        }
        if crate::backups::is_backup(sql) {
            return Ok(Request::Backup(crate::backups::parse_backup(sql)?));
        }
        let statements = super::bounds::parse_checked(sql, bounds)?;
        let classified = statements
            .into_iter()
            .map(|statement| Classified::new(statement, database))
            .collect::<Result<_>>()?;
        Ok(Request::Statements(classified))
    }
}

impl Classified {
    /// `statement` with its class, in a session whose database is `database`; refuses what
    /// EbbDB does not do.
    pub fn new(statement: DfStatement, database: &str) -> Result<Classified> {
        let class = classify(&statement, database)?;
        Ok(Classified { statement, class })
    }
}

fn classify(statement: &DfStatement, database: &str) -> Result<Class> {
    let s = match statement {
        DfStatement::Statement(s) => &**s,
        DfStatement::Explain(e) if !e.options.analyze => return Ok(Class::Read),
        DfStatement::CreateExternalTable(_) | DfStatement::CopyTo(_) => {
            return Err(QueryError::Unsupported("external tables and COPY".into()))
        }
        _ => return Ok(Class::Other),
    };
    Ok(match s {
        SqlStatement::Query(_)
        | SqlStatement::ExplainTable { .. }
        | SqlStatement::ShowTables { .. }
        | SqlStatement::ShowColumns { .. }
        | SqlStatement::ShowVariable { .. }
        | SqlStatement::Explain { analyze: false, .. } => Class::Read,
        SqlStatement::Insert(_) => Class::Insert,
        SqlStatement::Delete(_) => Class::Delete,
        SqlStatement::Update(_) => {
            return Err(QueryError::Unsupported(
                "UPDATE; write the points again with new values (a later write of the same \
                 series and time replaces its fields)"
                    .into(),
            ))
        }
        SqlStatement::CreateView(v) if v.materialized => Class::Rollup,
        other => match ShardOp::from_ddl(other, database)? {
            Some(op) => Class::Change(Box::new(op)),
            None => Class::Other,
        },
    })
}
