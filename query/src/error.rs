//! Errors of the SQL layer.

use datafusion::error::DataFusionError;

use crate::lp::LineError;

/// What went wrong; [`QueryError::is_client_error`] tells bad input from server faults.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QueryError {
    /// Not authenticated, not allowed, or a user management statement that cannot apply.
    #[error(transparent)]
    Access(#[from] crate::access::AccessError),
    /// A line-protocol line is malformed or conflicts with the schema; nothing was written.
    #[error("{0}")]
    Line(#[from] LineError),
    /// A field's type differs from the type the column already has.
    #[error(
        "field {field:?} of table {table:?} is {existing}, the write has {given}{}",
        line.map(|l| format!(" (line {l})")).unwrap_or_default()
    )]
    TypeConflict {
        /// Table.
        table: String,
        /// Field.
        field: String,
        /// The column's type.
        existing: &'static str,
        /// The written value's type.
        given: &'static str,
        /// Line of the request, for line protocol.
        line: Option<usize>,
    },
    /// The table (or database) does not exist.
    #[error("table {0} does not exist")]
    UnknownTable(String),
    /// The database does not exist.
    #[error("database {0} does not exist")]
    UnknownDatabase(String),
    /// SQL text that does not tokenize or parse; the parser's error is the source.
    #[error("SQL syntax: {}", syntax_text(.0.as_ref()))]
    Syntax(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// Bad SQL, bad arguments or an invalid name.
    #[error("{0}")]
    Invalid(String),
    /// A statement EbbDB does not support, with the reason.
    #[error("not supported: {0}")]
    Unsupported(String),
    /// A write older than the table's retention horizon.
    #[error("{message}")]
    BeyondRetention {
        /// What is too old, of which table, and the horizon (times in RFC 3339).
        message: String,
        /// Line of the request, for line protocol.
        line: Option<usize>,
    },
    /// Stored data that does not decode.
    #[error("corrupt data: {0}")]
    Corrupt(String),
    /// The storage engine failed.
    #[error("storage: {0}")]
    Storage(#[from] ebb_storage::Error),
    /// DataFusion failed (planning or execution). A table DataFusion does not find is
    /// [`QueryError::UnknownTable`] instead (see the `From` conversion).
    #[error("{0}")]
    DataFusion(#[source] DataFusionError),
    /// This replica does not lead its shard; the leader's node id if known.
    #[error("not the shard leader (leader: {})", .0.map(|l| l.to_string()).unwrap_or_else(|| "unknown".into()))]
    NotLeader(Option<u64>),
    /// Replication failed or is unavailable (no leader, no quorum); the write may be retried.
    #[error("replication: {0}")]
    Replication(String),
    /// A shard of the cluster could not answer in time (no leader, unreachable); the request
    /// may be retried. Parts of a statement run on every shard may have been applied.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The data directory's free space is below the reserve: writes that add data are
    /// refused until space is freed (deletes, erasures and drops still run).
    #[error("{0}")]
    DiskFull(String),
    /// A request or write a coordinator sent a shard had already been applied there when this
    /// attempt at it was (the attempt changed nothing).
    #[error("already applied on this shard by an earlier attempt")]
    Completed,
    /// A line's series is not held by this shard: a split moved it to another shard since
    /// the write was routed. Routed again (with the new shard map) it succeeds.
    #[error("line {line}: its series moved to another shard; route the write again")]
    NotHeld {
        /// The line.
        line: usize,
    },
    /// A request over one of the limits on what a client may ask of the server (see
    /// [`LimitError`]); nothing of it ran.
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// Points another node sent are damaged or of an encoding this build does not read.
    #[error("points from another node: {0}")]
    Points(#[from] crate::lp::wire::PointsError),
    /// A backup, or reading one, failed ([`crate::backups`]).
    #[error(transparent)]
    Backup(Box<ebb_backup::BackupError>),
    /// A bug or an unexpected state.
    #[error("internal error: {0}")]
    Internal(String),
}

/// What a tokenizer's or parser's error says, as a sentence: `expected an SQL statement, found
/// SELEC at line 1, column 1`, not the parser's debug form.
fn syntax_text(e: &(dyn std::error::Error + 'static)) -> String {
    use datafusion::sql::sqlparser::parser::ParserError;
    use datafusion::sql::sqlparser::tokenizer::TokenizerError;
    let parser = |p: &ParserError| match p {
        ParserError::ParserError(m) | ParserError::TokenizerError(m) => m.clone(),
        ParserError::RecursionLimitExceeded => "the statement is nested too deeply".to_string(),
    };
    let raw = if let Some(DataFusionError::SQL(p, _)) = e.downcast_ref::<DataFusionError>() {
        parser(p)
    } else if let Some(p) = e.downcast_ref::<ParserError>() {
        parser(p)
    } else if let Some(t) = e.downcast_ref::<TokenizerError>() {
        t.to_string()
    } else {
        e.to_string()
    };
    raw.replace("Expected: ", "expected ")
        .replace(", found: ", ", found ")
        .replace(" at Line: ", " at line ")
        .replace(", Column: ", ", column ")
}

/// A request over one of the server's limits on what a client may ask for: the size of SQL
/// text, the depth of an expression, the length of a list, tags per line, columns per table...
/// Refused before the work it would cost begins.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} exceed the limit of {limit} ({setting})")]
pub struct LimitError {
    /// What the request has too much of.
    pub what: String,
    /// The limit.
    pub limit: usize,
    /// The setting that sets it.
    pub setting: &'static str,
}

impl From<ebb_backup::BackupError> for QueryError {
    fn from(e: ebb_backup::BackupError) -> Self {
        QueryError::Backup(Box::new(e))
    }
}

impl From<ebb_storage::disk::BelowReserve> for QueryError {
    fn from(e: ebb_storage::disk::BelowReserve) -> Self {
        QueryError::DiskFull(e.to_string())
    }
}

/// DataFusion's execution errors that the statement caused: `$1` in SQL sent without values
/// (HTTP, the simple protocol); a VALUES row whose values do not cast to the columns they are
/// inserted into; a scalar subquery of more than one row (PostgreSQL's 21000).
const CLIENT_FAULTS: &[&str] =
    &["Placeholder", "Types don't match", "Scalar subquery returned more than one row"];

impl From<DataFusionError> for QueryError {
    /// DataFusion's error, or [`QueryError::UnknownTable`] for a table it did not find
    /// (`table 'ebb.public.x' not found`), named as EbbDB names tables (`public.x`).
    fn from(e: DataFusionError) -> Self {
        match missing_table(&e) {
            Some(name) => QueryError::UnknownTable(name),
            None => QueryError::DataFusion(e),
        }
    }
}

/// The `database.table` DataFusion's planner did not find, if `e` says so.
fn missing_table(e: &DataFusionError) -> Option<String> {
    let DataFusionError::Plan(m) = e.find_root() else { return None };
    let name = m.strip_prefix("table '")?.strip_suffix("' not found")?;
    let ours = name.strip_prefix(crate::sql::CATALOG).and_then(|n| n.strip_prefix('.'));
    Some(ours.unwrap_or(name).to_string())
}

impl QueryError {
    /// The line of a line-protocol request the error is about, if it is about one.
    pub fn line(&self) -> Option<usize> {
        match self {
            QueryError::Line(e) => Some(e.line),
            QueryError::NotHeld { line } => Some(*line),
            QueryError::TypeConflict { line, .. } | QueryError::BeyondRetention { line, .. } => {
                *line
            }
            _ => None,
        }
    }

    /// A [`QueryError::Syntax`] from the tokenizer's or the parser's error.
    pub fn syntax(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        QueryError::Syntax(Box::new(e))
    }

    /// An [`QueryError::Invalid`] from anything printable.
    pub fn invalid(msg: impl Into<String>) -> Self {
        QueryError::Invalid(msg.into())
    }

    /// The error the statement failed with: one an operator passed up through DataFusion
    /// (`External`), rather than DataFusion's wrapper of it, so a shard that was unavailable
    /// during a scan answers as unavailable.
    pub fn cause(&self) -> &QueryError {
        match self {
            QueryError::DataFusion(d) => match d.find_root() {
                DataFusionError::External(inner) => {
                    inner.downcast_ref::<QueryError>().map_or(self, QueryError::cause)
                }
                _ => self,
            },
            _ => self,
        }
    }

    /// True if the request was at fault (HTTP 4xx), false for server faults (5xx).
    pub fn is_client_error(&self) -> bool {
        match self {
            QueryError::Line(_)
            | QueryError::TypeConflict { .. }
            | QueryError::UnknownTable(_)
            | QueryError::UnknownDatabase(_)
            | QueryError::Syntax(_)
            | QueryError::Invalid(_)
            | QueryError::Unsupported(_)
            | QueryError::Limit(_)
            | QueryError::BeyondRetention { .. } => true,
            QueryError::Access(e) => !matches!(e, crate::access::AccessError::Corrupt { .. }),
            QueryError::Storage(e) => matches!(
                e,
                ebb_storage::Error::InvalidArgument(_) | ebb_storage::Error::BeyondRetention { .. }
            ),
            // Types that fit no signature of a function: DataFusion reports some of these as
            // internal errors from its type coercion.
            QueryError::DataFusion(DataFusionError::Context(context, _))
                if context == "type_coercion" =>
            {
                true
            }
            QueryError::DataFusion(e) => match e.find_root() {
                DataFusionError::Plan(_)
                | DataFusionError::SQL(..)
                | DataFusionError::SchemaError(..)
                | DataFusionError::NotImplemented(_) => true,
                DataFusionError::Execution(m) => {
                    CLIENT_FAULTS.iter().any(|fault| m.starts_with(fault))
                }
                // A value the statement itself gave that does not cast, parse or compute.
                DataFusionError::ArrowError(a, _) => {
                    use datafusion::arrow::error::ArrowError as A;
                    matches!(
                        **a,
                        A::CastError(_)
                            | A::ParseError(_)
                            | A::InvalidArgumentError(_)
                            | A::DivideByZero
                            | A::ArithmeticOverflow(_)
                            | A::ComputeError(_)
                    )
                }
                _ => false,
            },
            QueryError::Backup(e) => {
                use ebb_backup::BackupError as B;
                matches!(
                    **e,
                    B::Uri { .. }
                        | B::NoSuchSet(_)
                        | B::Empty
                        | B::TargetExists(_)
                        | B::OtherOrigin { .. }
                )
            }
            QueryError::Corrupt(_)
            | QueryError::Points(_)
            | QueryError::Internal(_)
            | QueryError::NotLeader(_)
            | QueryError::Replication(_)
            | QueryError::Unavailable(_)
            | QueryError::DiskFull(_)
            | QueryError::NotHeld { .. }
            | QueryError::Completed => false,
        }
    }

    /// True if the request failed for lack of disk space: below the reserve, or a write the
    /// file system refused (HTTP 507, SQLSTATE 53100).
    pub fn is_disk_full(&self) -> bool {
        match self {
            QueryError::DiskFull(_) => true,
            QueryError::Storage(e) => e.is_disk_full(),
            QueryError::Backup(e) => e.is_disk_full(),
            _ => false,
        }
    }
}

/// Result of the SQL layer.
pub type Result<T, E = QueryError> = std::result::Result<T, E>;

#[cfg(test)]
mod cause_tests {
    use super::*;

    #[test]
    fn a_cause_passed_through_datafusion_is_the_error() {
        let inner = QueryError::Unavailable("shard 3: no leader".into());
        let wrapped = QueryError::DataFusion(DataFusionError::Context(
            "scan".into(),
            Box::new(DataFusionError::External(Box::new(inner))),
        ));
        assert!(matches!(wrapped.cause(), QueryError::Unavailable(m) if m.contains("shard 3")));
        let plain = QueryError::DataFusion(DataFusionError::Plan("no".into()));
        assert!(matches!(plain.cause(), QueryError::DataFusion(_)));
    }

    #[test]
    fn a_table_datafusion_does_not_find_is_an_unknown_table() {
        let missing = DataFusionError::Plan("table 'ebb.public.x' not found".into());
        let e = QueryError::from(DataFusionError::Context("plan".into(), Box::new(missing)));
        assert_eq!(e.to_string(), "table public.x does not exist");
        let other = QueryError::from(DataFusionError::Plan("column 'y' not found".into()));
        assert!(matches!(other, QueryError::DataFusion(_)), "{other}");
    }
}
