//! Statements run as a request a coordinator issues on every shard (`DELETE`, `ERASE`, table
//! DDL). The coordinator retries until every shard answers, so a shard may see a request again:
//! it answers one it has completed from the outcome it recorded (see
//! [`crate::db::RequestOutcome`]) instead of running it twice.

use std::future::Future;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{ObjectType, Statement as SqlStatement};

use super::session::{command_output, rows_output, QueryOutput, SqlSession, StatementKind};
use crate::db::RequestOutcome;
use crate::error::{QueryError, Result};

/// The kind of `stmt` if it runs as a request on every shard (`None`: a query or an insert).
pub fn requested_kind(stmt: &DfStatement) -> Option<StatementKind> {
    let DfStatement::Statement(s) = stmt else { return None };
    let tag = match &**s {
        SqlStatement::Delete(_) => return Some(StatementKind::Delete),
        SqlStatement::CreateTable(_) => "CREATE TABLE",
        SqlStatement::AlterTable(_) => "ALTER TABLE",
        SqlStatement::Drop { object_type: ObjectType::Table, .. } => "DROP TABLE",
        SqlStatement::CreateView(v) if v.materialized => "CREATE MATERIALIZED VIEW",
        SqlStatement::Drop { object_type: ObjectType::MaterializedView, .. } => {
            "DROP MATERIALIZED VIEW"
        }
        SqlStatement::CreateSchema { .. } | SqlStatement::CreateDatabase { .. } => {
            "CREATE DATABASE"
        }
        _ => return None,
    };
    Some(StatementKind::Command(tag.to_string()))
}

impl SqlSession {
    /// Runs `run`, a statement of `kind`, as the session's request if it has one: a request
    /// completed here before is answered from its record, and the outcome of a DDL statement
    /// (idempotent, so recorded after it) is recorded once it ran.
    pub(super) async fn as_request(
        &self,
        kind: StatementKind,
        run: impl Future<Output = Result<QueryOutput>>,
    ) -> Result<QueryOutput> {
        let Some(id) = self.request_id() else { return run.await };
        if let Some(done) = self.db().outcome(id)? {
            return output(&kind, id, &done);
        }
        match run.await {
            // An earlier attempt completed it while this one was planned.
            Err(QueryError::Completed) => match self.db().outcome(id)? {
                Some(done) => output(&kind, id, &done),
                None => Err(QueryError::Internal(format!("request {id} completed unrecorded"))),
            },
            // Refused here (the table is not on this shard, say): recorded as having done
            // nothing, so a repeat after the table appears does nothing either.
            Err(e) if e.is_client_error() => {
                let db = self.db().clone();
                super::session::blocking(move || db.record_outcome(id, &RequestOutcome::default()))
                    .await?;
                Err(e)
            }
            Ok(out) if matches!(kind, StatementKind::Command(_)) => {
                let db = self.db().clone();
                super::session::blocking(move || db.record_outcome(id, &RequestOutcome::default()))
                    .await?;
                Ok(out)
            }
            other => other,
        }
    }
}

/// The answer of a statement of `kind` that was request `id` and did `done`.
pub fn output(kind: &StatementKind, id: u64, done: &RequestOutcome) -> Result<QueryOutput> {
    match kind {
        StatementKind::Delete => {
            delete_output(done.rows, (done.deletes > 0).then_some(id), done.deletes)
        }
        StatementKind::Erase => erase_output(id, done),
        StatementKind::Command(tag) => Ok(command_output(tag)),
        other => Err(QueryError::Internal(format!("{other:?} is not a request"))),
    }
}

fn col(v: u64) -> ArrayRef {
    Arc::new(UInt64Array::from(vec![v]))
}

/// A `DELETE`'s answer: rows deleted, its id (if it wrote anything) and its engine deletes.
pub fn delete_output(rows: u64, id: Option<u64>, deletes: u64) -> Result<QueryOutput> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("rows_deleted", DataType::UInt64, false),
        Field::new("delete_id", DataType::UInt64, true),
        Field::new("deletes", DataType::UInt64, false),
    ]));
    let cols = vec![col(rows), Arc::new(UInt64Array::from(vec![id])) as ArrayRef, col(deletes)];
    let batch = RecordBatch::try_new(schema.clone(), cols)
        .map_err(|e| QueryError::Internal(e.to_string()))?;
    Ok(rows_output(schema, batch, StatementKind::Delete))
}

/// An `ERASE`'s answer.
pub fn erase_output(id: u64, done: &RequestOutcome) -> Result<QueryOutput> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("rows_erased", DataType::UInt64, false),
        Field::new("erasure_id", DataType::UInt64, false),
        Field::new("series", DataType::UInt64, false),
        Field::new("tables", DataType::UInt64, false),
        Field::new("deletes", DataType::UInt64, false),
    ]));
    let cols = vec![col(done.rows), col(id), col(done.series), col(done.tables), col(done.deletes)];
    let batch = RecordBatch::try_new(schema.clone(), cols)
        .map_err(|e| QueryError::Internal(e.to_string()))?;
    Ok(rows_output(schema, batch, StatementKind::Erase))
}
