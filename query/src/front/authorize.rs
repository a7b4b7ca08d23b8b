//! What a statement needs: the privileges it uses, on which databases.
//!
//! Every table a statement can read is among the references DataFusion resolves before it
//! plans (`SessionState::resolve_table_references`: the planner sees no other table), so
//! checking those covers every read. Whatever the statement, every table it reads needs `READ`:
//! an `INSERT ... SELECT` needs `WRITE` on its target and `READ` on every table its source
//! names (a writer must not learn values from an error, or a yes/no answer from a row count);
//! a `DELETE` needs `DELETE` on its target and `READ` on every table its condition or `USING`
//! reads through a subquery (its own target included); `CREATE TABLE ... AS` and a materialized
//! view need `READ` on their source. Statements that change data or schema need their own
//! privilege on the database of every table they name. Tables of `system` need `READ` on the
//! database `system`, but for `system.users`, `system.grants`, `system.tokens`,
//! `system.backups` (where backups are kept says where a copy of every table is),
//! `system.cluster` (the cluster id) and `system.join_tokens`, which need `ADMIN` on all
//! databases; `information_schema` and `pg_catalog` (which list only what the
//! user may read) only need a login.

use datafusion::execution::context::SessionState;
use datafusion::sql::parser::Statement as DfStatement;
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    visit_relations, FromTable, ObjectName, ObjectType, Query, SchemaName, Statement, TableObject,
};

use crate::access::{Privilege, ACCESS_TABLES};
use crate::error::Result;
use crate::sql::ddl::{ident, table_name};

/// Tables of `system` besides the access tables that only admins read.
const ADMIN_TABLES: &[&str] = &["backups", "cluster", "join_tokens"];

/// One privilege a statement needs: on a database, or (`None`) on all of them.
pub type Need = (Option<String>, Privilege);

/// The privileges `stmt` needs, in a session whose default database is `default`.
pub fn needs(stmt: &DfStatement, state: &SessionState, default: &str) -> Result<Vec<Need>> {
    let mut out = Vec::new();
    let s = match stmt {
        DfStatement::Statement(s) => s.as_ref(),
        DfStatement::Explain(e) => return needs(&e.statement, state, default),
        // CREATE EXTERNAL TABLE, COPY: refused by the session, but never without ADMIN.
        _ => return Ok(vec![(None, Privilege::Admin)]),
    };
    let read = |stmt: &DfStatement, out: &mut Vec<Need>| -> Result<()> {
        let refs = state.resolve_table_references(stmt)?;
        for r in refs {
            let db = r.schema().unwrap_or(default).to_string();
            table_need(db, r.table(), Privilege::Read, out);
        }
        Ok(())
    };
    // What a query read as part of another statement needs.
    let read_query = |q: &Query, out: &mut Vec<Need>| -> Result<()> {
        read(&DfStatement::Statement(Box::new(Statement::Query(Box::new(q.clone())))), out)
    };
    let named = |n: &ObjectName, p: Privilege, out: &mut Vec<Need>| -> Result<()> {
        let (db, table) = table_name(n, default)?;
        table_need(db, &table, p, out);
        Ok(())
    };
    match s {
        Statement::Query(_)
        | Statement::Explain { .. }
        | Statement::ExplainTable { .. }
        | Statement::ShowTables { .. }
        | Statement::ShowColumns { .. } => read(stmt, &mut out)?,
        Statement::Insert(insert) => {
            match &insert.table {
                TableObject::TableName(n) => named(n, Privilege::Write, &mut out)?,
                // INSERT INTO FUNCTION: nothing EbbDB serves.
                TableObject::TableFunction(_) | TableObject::TableQuery(_) => {
                    out.push((None, Privilege::Admin))
                }
            }
            if let Some(source) = &insert.source {
                read_query(source, &mut out)?;
            }
        }
        Statement::Delete(delete) => {
            // The target itself needs DELETE, and READ where a subquery reads it.
            let mut targets = delete.tables.clone();
            let mut reads = Vec::new();
            let (FromTable::WithFromKeyword(from) | FromTable::WithoutKeyword(from)) = &delete.from;
            for twj in from {
                let _ = visit_relations(&twj.relation, |n| {
                    targets.push(n.clone());
                    ControlFlow::<()>::Continue(())
                });
                let _ = visit_relations(&twj.joins, |n| {
                    reads.push(n.clone());
                    ControlFlow::<()>::Continue(())
                });
            }
            for n in &targets {
                named(n, Privilege::Delete, &mut out)?;
            }
            let mut collect = |n: &ObjectName| {
                reads.push(n.clone());
                ControlFlow::<()>::Continue(())
            };
            let _ = visit_relations(&delete.selection, &mut collect);
            let _ = visit_relations(&delete.using, &mut collect);
            let _ = visit_relations(&delete.returning, &mut collect);
            let _ = visit_relations(&delete.order_by, &mut collect);
            let _ = visit_relations(&delete.limit, &mut collect);
            for n in &reads {
                let (db, table) = table_name(n, default)?;
                table_need(db, &table, Privilege::Read, &mut out);
            }
        }
        Statement::CreateTable(ct) => {
            named(&ct.name, Privilege::Admin, &mut out)?;
            if let Some(q) = &ct.query {
                read_query(q, &mut out)?;
            }
        }
        Statement::AlterTable(at) => named(&at.name, Privilege::Delete, &mut out)?,
        Statement::CreateView(cv) if cv.materialized => {
            named(&cv.name, Privilege::Admin, &mut out)?;
            read_query(&cv.query, &mut out)?;
        }
        Statement::Drop {
            object_type: ObjectType::Table | ObjectType::MaterializedView,
            names,
            ..
        } => {
            for n in names {
                named(n, Privilege::Delete, &mut out)?;
            }
        }
        Statement::CreateSchema { schema_name: SchemaName::Simple(n), .. }
        | Statement::CreateDatabase { db_name: n, .. } => {
            let name = match n.0.last() {
                Some(datafusion::sql::sqlparser::ast::ObjectNamePart::Identifier(i)) => ident(i),
                _ => return Ok(vec![(None, Privilege::Admin)]),
            };
            out.push((Some(name), Privilege::Admin));
        }
        // Session settings change nothing stored.
        Statement::Set(_) | Statement::ShowVariable { .. } | Statement::ShowVariables { .. } => {}
        _ => out.push((None, Privilege::Admin)),
    }
    Ok(out)
}

/// What reading or changing `table` of `db` needs, with `privilege` on an ordinary table.
fn table_need(db: String, table: &str, privilege: Privilege, out: &mut Vec<Need>) {
    match db.as_str() {
        "information_schema" | "pg_catalog" if privilege == Privilege::Read => {}
        "system" if ACCESS_TABLES.contains(&table) || ADMIN_TABLES.contains(&table) => {
            out.push((None, Privilege::Admin))
        }
        _ => out.push((Some(db), privilege)),
    }
}
