//! What a statement needs: the privileges it uses, on which databases.
//!
//! Every table a statement can read is among the references DataFusion resolves before it
//! plans (`SessionState::resolve_table_references`: the planner sees no other table), so
//! checking those covers every read. Statements that change data or schema need their own
//! privilege on the database of every table they name. Tables of `system` need `READ` on the
//! database `system`, but for `system.users`, `system.grants` and `system.tokens`, which need
//! `ADMIN` on all databases; `information_schema` only needs a login.

use datafusion::execution::context::SessionState;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{ObjectName, ObjectType, SchemaName, Statement};

use crate::access::{Privilege, ACCESS_TABLES};
use crate::error::Result;
use crate::sql::ddl::{ident, table_name};

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
    let refs = || -> Result<Vec<(String, String)>> {
        Ok(state
            .resolve_table_references(stmt)?
            .into_iter()
            .map(|r| (r.schema().unwrap_or(default).to_string(), r.table().to_string()))
            .collect())
    };
    let on_tables = |p: Privilege, out: &mut Vec<Need>| -> Result<()> {
        for (db, table) in refs()? {
            match db.as_str() {
                "information_schema" => {}
                "system" if ACCESS_TABLES.contains(&table.as_str()) => {
                    out.push((None, Privilege::Admin))
                }
                _ => out.push((Some(db), p)),
            }
        }
        Ok(())
    };
    let named = |n: &ObjectName, p: Privilege, out: &mut Vec<Need>| -> Result<()> {
        out.push((Some(table_name(n, default)?.0), p));
        Ok(())
    };
    match s {
        Statement::Query(_)
        | Statement::Explain { .. }
        | Statement::ExplainTable { .. }
        | Statement::ShowTables { .. }
        | Statement::ShowColumns { .. } => on_tables(Privilege::Read, &mut out)?,
        Statement::Insert(_) => {
            // The target needs WRITE; what it reads, READ (a target read too is harmless).
            on_tables(Privilege::Write, &mut out)?;
        }
        Statement::Delete(_) => on_tables(Privilege::Delete, &mut out)?,
        Statement::CreateTable(ct) => named(&ct.name, Privilege::Admin, &mut out)?,
        Statement::AlterTable(at) => named(&at.name, Privilege::Delete, &mut out)?,
        Statement::CreateView(cv) if cv.materialized => {
            named(&cv.name, Privilege::Admin, &mut out)?
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
