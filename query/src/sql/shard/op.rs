//! Statements that change data or schema (`DELETE`, `ERASE`, table DDL), as the typed
//! [`ShardOp`] every shard applies: the session that receives the statement reads it once
//! ([`ShardOp::from_ddl`], [`delete_op`]); each shard applies it to its own database
//! ([`apply`]), resolving names against its own catalog. On a single node the one local shard
//! applies it; a cluster records it as an intent and sends it to every shard's leader.

use std::sync::Arc;
use std::time::Duration;

use datafusion::logical_expr::DmlStatement;
use datafusion::sql::sqlparser::ast::{
    AlterTableOperation, ObjectType, SchemaName, Statement as SqlStatement,
};
use serde::{Deserialize, Serialize};

use super::{ShardRequest, Shards};
use crate::db::{Database, RequestOutcome, RequestSpec};
use crate::error::{QueryError, Result};
use crate::sql::ddl::{create_spec, retention_option, table_name, CreateSpec};
use crate::sql::delete::{delete_parts, delete_targets, DeletePart};
use crate::sql::erase::EraseStatement;
use crate::sql::rollup::RollupSpec;
use crate::sql::session::{command_output, rows_output, QueryOutput, StatementKind};
use crate::sql::ShardTable;
use datafusion::arrow::array::{ArrayRef, RecordBatch, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema};

/// A change every shard applies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ShardOp {
    /// `DELETE`: the rows of `table` one of `parts` selects.
    Delete {
        /// The database.
        database: String,
        /// The table.
        table: String,
        /// What is deleted (an `OR` of these).
        parts: Vec<DeletePart>,
        /// The statement, as the deletion ledger records it.
        text: String,
    },
    /// `ERASE`: every series of `database` whose tag `tag` is `value`.
    Erase {
        /// The database.
        database: String,
        /// The tag.
        tag: String,
        /// Its value.
        value: String,
        /// The deadline asked for, if any.
        deadline: Option<Duration>,
    },
    /// `CREATE TABLE`.
    CreateTable(CreateSpec),
    /// `ALTER TABLE ... SET (retention = ...)`.
    SetRetention {
        /// The database.
        database: String,
        /// The table.
        table: String,
        /// The retention (`None`: keep rows forever).
        retention: Option<Duration>,
    },
    /// `CREATE MATERIALIZED VIEW`.
    CreateRollup(RollupSpec),
    /// `DROP TABLE` or `DROP MATERIALIZED VIEW` (`views`) of `tables` (database, name).
    Drop {
        /// The tables, each with its database.
        tables: Vec<(String, String)>,
        /// `IF EXISTS`.
        if_exists: bool,
        /// `DROP MATERIALIZED VIEW`: each must be a rollup.
        views: bool,
    },
    /// `CREATE DATABASE` (or `CREATE SCHEMA`).
    CreateDatabase {
        /// Its name.
        name: String,
    },
}

impl ShardOp {
    /// The op of a DDL statement (`None`: not one EbbDB runs on every shard).
    pub fn from_ddl(s: &SqlStatement, database: &str) -> Result<Option<ShardOp>> {
        Ok(Some(match s {
            SqlStatement::CreateTable(ct) => ShardOp::CreateTable(create_spec(ct, database)?),
            SqlStatement::AlterTable(at) => {
                let (database, table) = table_name(&at.name, database)?;
                let mut retention = None;
                for op in &at.operations {
                    match op {
                        AlterTableOperation::SetOptionsParens { options }
                        | AlterTableOperation::SetTblProperties { table_properties: options } => {
                            retention = retention_option(options)?;
                        }
                        other => {
                            return Err(QueryError::Unsupported(format!(
                                "ALTER TABLE {other}; EbbDB supports ALTER TABLE t SET \
                                 (retention = '7d'); columns are added by writing them"
                            )))
                        }
                    }
                }
                let Some(retention) = retention else {
                    return Err(QueryError::invalid("ALTER TABLE needs SET (retention = ...)"));
                };
                ShardOp::SetRetention { database, table, retention }
            }
            SqlStatement::CreateView(cv) if cv.materialized => {
                ShardOp::CreateRollup(crate::sql::rollup::rollup_spec(cv, database)?)
            }
            SqlStatement::Drop {
                object_type: object @ (ObjectType::Table | ObjectType::MaterializedView),
                names,
                if_exists,
                ..
            } => ShardOp::Drop {
                tables: names.iter().map(|n| table_name(n, database)).collect::<Result<_>>()?,
                if_exists: *if_exists,
                views: *object == ObjectType::MaterializedView,
            },
            SqlStatement::CreateSchema { schema_name: SchemaName::Simple(n), .. }
            | SqlStatement::CreateDatabase { db_name: n, .. } => {
                let name = match n.0.last() {
                    Some(datafusion::sql::sqlparser::ast::ObjectNamePart::Identifier(i)) => {
                        crate::sql::ddl::ident(i)
                    }
                    _ => return Err(QueryError::invalid(format!("invalid database name {n}"))),
                };
                ShardOp::CreateDatabase { name }
            }
            _ => return Ok(None),
        }))
    }

    /// The op of `ERASE` in a session whose database is `database`.
    pub fn erase(stmt: &EraseStatement, database: &str) -> ShardOp {
        ShardOp::Erase {
            database: stmt.database.clone().unwrap_or_else(|| database.to_string()),
            tag: stmt.tag.clone(),
            value: stmt.value.clone(),
            deadline: stmt.deadline,
        }
    }

    /// The kind of statement it is, for its answer.
    pub fn kind(&self) -> StatementKind {
        let tag = match self {
            ShardOp::Delete { .. } => return StatementKind::Delete,
            ShardOp::Erase { .. } => return StatementKind::Erase,
            ShardOp::CreateTable(_) => "CREATE TABLE",
            ShardOp::SetRetention { .. } => "ALTER TABLE",
            ShardOp::CreateRollup(_) => "CREATE MATERIALIZED VIEW",
            ShardOp::Drop { views: true, .. } => "DROP MATERIALIZED VIEW",
            ShardOp::Drop { views: false, .. } => "DROP TABLE",
            ShardOp::CreateDatabase { .. } => "CREATE DATABASE",
        };
        StatementKind::Command(tag.to_string())
    }

    /// The statement as people read it (the deletion ledger, `system.deletions`).
    pub fn text(&self) -> String {
        use crate::sql::quote_ident as q;
        match self {
            ShardOp::Delete { text, .. } => text.clone(),
            ShardOp::Erase { database, tag, value, deadline } => EraseStatement {
                tag: tag.clone(),
                value: value.clone(),
                database: Some(database.clone()),
                deadline: *deadline,
            }
            .text(database),
            ShardOp::CreateTable(c) => format!("CREATE TABLE {}.{}", q(&c.database), q(&c.name)),
            ShardOp::SetRetention { database, table, .. } => {
                format!("ALTER TABLE {}.{} SET (retention)", q(database), q(table))
            }
            ShardOp::CreateRollup(r) => {
                format!("CREATE MATERIALIZED VIEW {}.{}", q(&r.database), q(&r.name))
            }
            ShardOp::Drop { tables, views, .. } => {
                let names: Vec<String> =
                    tables.iter().map(|(d, t)| format!("{}.{}", q(d), q(t))).collect();
                let what = if *views { "MATERIALIZED VIEW" } else { "TABLE" };
                format!("DROP {what} {}", names.join(", "))
            }
            ShardOp::CreateDatabase { name } => format!("CREATE DATABASE {}", q(name)),
        }
    }

    /// True for the ops that delete data (shown in `system.deletions` until every shard has
    /// applied them).
    pub fn deletes(&self) -> bool {
        matches!(self, ShardOp::Delete { .. } | ShardOp::Erase { .. } | ShardOp::Drop { .. })
    }

    /// True for the ops a shard applies again harmlessly (recorded once they ran).
    fn idempotent(&self) -> bool {
        !self.deletes()
    }
}

/// A change a coordinator sends one shard: the op and the request of every shard it is part of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApplyRequest {
    /// The change.
    pub op: ShardOp,
    /// Its request.
    pub request: ShardRequest,
}

/// The op of an optimized `DELETE` plan `d` (its filter split between scan and filter) over
/// the table as every shard together defines it, in a session whose database is `database`.
pub async fn delete_op(
    shards: Arc<dyn Shards>,
    d: &DmlStatement,
    database: &str,
    text: String,
) -> Result<ShardOp> {
    let (database, table) = match (d.table_name.schema(), d.table_name.table()) {
        (Some(s), t) => (s.to_string(), t.to_string()),
        (None, t) => (database.to_string(), t.to_string()),
    };
    // The table the statement was planned over, unless it is a rollup's view.
    let planned = datafusion::datasource::source_as_provider(&d.target)
        .ok()
        .and_then(|p| p.downcast_ref::<ShardTable>().map(|t| t.def().clone()));
    let def = match planned {
        Some(def) => def,
        None => ShardTable::load(shards, &database, &table)
            .await?
            .ok_or_else(|| QueryError::UnknownTable(format!("{database}.{table}")))?
            .def()
            .clone(),
    };
    if let Some(r) = &def.rollup {
        return Err(QueryError::invalid(format!(
            "{table} is a rollup of {}: its rows follow its source; delete from {}",
            r.source, r.source
        )));
    }
    let parts = delete_parts(&def, crate::sql::session::filter_of(&d.input).as_ref())?;
    Ok(ShardOp::Delete { database, table, parts, text })
}

/// The answer to a client of `op`, applied as request `id` with `outcome`.
pub fn answer(op: &ShardOp, id: u64, outcome: &RequestOutcome) -> Result<QueryOutput> {
    match op.kind() {
        StatementKind::Command(tag) => Ok(command_output(&tag)),
        kind => output(&kind, id, outcome),
    }
}

/// Applies `op` to `db` as request `r`, one request of every shard (a request this shard
/// completed before is answered from its record, not run again): what it did. Blocks: run it
/// off the async workers.
pub fn apply(db: &Database, op: &ShardOp, r: &ShardRequest) -> Result<RequestOutcome> {
    if let Some(done) = db.outcome(r.id)? {
        return Ok(done);
    }
    let spec = RequestSpec::new(spec_kind(op), op.text())
        .with_issuer(&r.issued_by)
        .with_id(r.id)
        .with_deadline(r.deadline_ms)
        .recorded();
    match apply_as(db, op, spec) {
        // An earlier attempt completed it while this one was planned.
        Err(QueryError::Completed) => match db.outcome(r.id)? {
            Some(done) => Ok(done),
            None => Err(QueryError::Internal(format!("request {} completed unrecorded", r.id))),
        },
        // Refused here (the table is not on this shard, say): recorded as having done
        // nothing, so a repeat after the table appears does nothing either.
        Err(e) if e.is_client_error() => {
            db.record_outcome(r.id, &RequestOutcome::default())?;
            Err(e)
        }
        Ok(done) if op.idempotent() => {
            db.record_outcome(r.id, &done)?;
            Ok(done)
        }
        other => other,
    }
}

/// The ledger's kind of request `op` is.
fn spec_kind(op: &ShardOp) -> &'static str {
    match op {
        ShardOp::Delete { .. } => "delete",
        ShardOp::Erase { .. } => "erase",
        ShardOp::Drop { .. } => "drop",
        _ => "ddl",
    }
}

fn apply_as(db: &Database, op: &ShardOp, mut spec: RequestSpec) -> Result<RequestOutcome> {
    let done = RequestOutcome::default();
    match op {
        ShardOp::Delete { database, table, parts, .. } => {
            let def = db.existing(database, table)?;
            if let Some(r) = &def.rollup {
                return Err(QueryError::invalid(format!(
                    "{table} is a rollup of {}: its rows follow its source; delete from {}",
                    r.source, r.source
                )));
            }
            let targets = delete_targets(db, &def, parts);
            if targets.is_empty() {
                if spec.recorded {
                    // Recorded all the same, so a repeat does nothing either.
                    db.record_outcome(spec.id, &done)?;
                }
                return Ok(done);
            }
            let out = db.delete(&def, &targets, &spec)?;
            Ok(RequestOutcome { rows: out.rows, deletes: out.ids.len() as u64, ..done })
        }
        ShardOp::Erase { database, tag, value, deadline } => {
            if let Some(d) = *deadline {
                let max = db.engine().options().delete_deadline;
                if max.is_some_and(|m| d > m) {
                    return Err(QueryError::invalid(format!(
                        "DEADLINE '{}' is longer than the configured delete deadline of {}; ask \
                         for at most that, or leave DEADLINE out",
                        crate::db::human_duration(d.as_secs()),
                        crate::db::human_duration(max.map_or(0, |m| m.as_secs())),
                    )));
                }
                if spec.deadline_ms.is_none() {
                    let now = db.engine().options().clock.now_ms();
                    spec.deadline_ms = Some(now.saturating_add(d.as_millis() as u64));
                }
            }
            let out = db.erase(database, tag, value, &spec)?;
            Ok(RequestOutcome {
                rows: out.rows,
                series: out.series,
                tables: out.tables,
                deletes: out.ids.len() as u64,
            })
        }
        ShardOp::CreateTable(c) => {
            if !(c.if_not_exists && db.catalog().table(&c.database, &c.name).is_some()) {
                let retention = c.retention.unwrap_or_else(|| db.default_retention());
                db.create_table(&c.database, &c.name, c.tags.clone(), c.fields.clone(), retention)?;
            }
            Ok(done)
        }
        ShardOp::SetRetention { database, table, retention } => {
            db.set_retention(database, table, *retention)?;
            Ok(done)
        }
        ShardOp::CreateRollup(r) => {
            if !(r.if_not_exists && db.catalog().table(&r.database, &r.name).is_some()) {
                db.create_rollup(&r.database, &r.name, r.def.clone(), r.retention)?;
            }
            Ok(done)
        }
        ShardOp::Drop { tables, if_exists, views } => {
            for (d, t) in tables {
                if *views && db.catalog().table(d, t).is_some_and(|t| t.rollup.is_none()) {
                    return Err(QueryError::invalid(format!(
                        "{d}.{t} is a table, not a rollup; use DROP TABLE"
                    )));
                }
                match db.drop_table_as(d, t, &spec) {
                    Err(QueryError::UnknownTable(_)) if *if_exists => {}
                    other => {
                        other?;
                    }
                }
            }
            Ok(done)
        }
        ShardOp::CreateDatabase { name } => {
            db.create_database(name)?;
            Ok(done)
        }
    }
}

/// The answer of a statement of `kind` that was request `id` and did `done`.
fn output(kind: &StatementKind, id: u64, done: &RequestOutcome) -> Result<QueryOutput> {
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
