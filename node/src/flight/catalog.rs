//! Catalog metadata: `GetCatalogs` (one, `ebb`), `GetDbSchemas` (the databases), `GetTables`
//! (with each table's Arrow schema on request), `GetTableTypes` and `GetSqlInfo`. Names come
//! from `information_schema` through the caller's session, so a cluster answers for every
//! shard, and what a user may list is what SQL lets them list.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::{CommandGetDbSchemas, CommandGetTables, SqlInfo};
use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::Schema;
use ebb_query::front::Session;
use futures::TryStreamExt;
use tonic::Status;

use super::query_status;
use ebb_query::sql::quote_ident as ident;

/// The catalog every database is in.
pub const CATALOG: &str = ebb_query::sql::CATALOG;

/// What `GetSqlInfo` answers.
pub fn sql_info() -> &'static SqlInfoData {
    static INFO: OnceLock<SqlInfoData> = OnceLock::new();
    INFO.get_or_init(|| {
        let mut b = SqlInfoDataBuilder::new();
        b.append(SqlInfo::FlightSqlServerName, "EbbDB");
        b.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
        b.append(SqlInfo::FlightSqlServerArrowVersion, "1.3");
        b.append(SqlInfo::FlightSqlServerReadOnly, false);
        b.append(SqlInfo::FlightSqlServerSql, true);
        b.append(SqlInfo::FlightSqlServerSubstrait, false);
        b.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
        b.append(SqlInfo::SqlDdlCatalog, false);
        b.append(SqlInfo::SqlDdlSchema, false);
        b.append(SqlInfo::SqlDdlTable, true);
        // Built from constants: it cannot fail.
        b.build().unwrap_or_else(|_| SqlInfoDataBuilder::new().build().expect("empty info"))
    })
}

/// One table as `information_schema.tables` lists it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct TableName {
    database: String,
    name: String,
    kind: String,
}

/// Every table the session may list, once each (on a cluster each shard lists its own).
async fn tables(session: &Session) -> Result<BTreeSet<TableName>, Status> {
    let sql = "SELECT table_schema, table_name, table_type FROM information_schema.tables \
               WHERE table_schema <> 'information_schema'";
    let out = session.execute(sql).await.map_err(|e| query_status(&e))?;
    let batches: Vec<RecordBatch> =
        out.stream.try_collect().await.map_err(|e| query_status(&e.into()))?;
    let mut set = BTreeSet::new();
    for b in &batches {
        let col = |i: usize| b.column(i).as_string_opt::<i32>().cloned();
        let (Some(db), Some(name), Some(kind)) = (col(0), col(1), col(2)) else { continue };
        for r in 0..b.num_rows() {
            let kind = match kind.value(r) {
                "BASE TABLE" => "TABLE",
                other => other,
            };
            set.insert(TableName {
                database: db.value(r).to_string(),
                name: name.value(r).to_string(),
                kind: kind.to_string(),
            });
        }
    }
    Ok(set)
}

/// `GetDbSchemas`: the databases.
pub async fn db_schemas(session: &Session, q: CommandGetDbSchemas) -> Result<RecordBatch, Status> {
    let names: BTreeSet<String> = tables(session).await?.into_iter().map(|t| t.database).collect();
    let mut b = q.into_builder();
    for db in names {
        b.append(CATALOG, db);
    }
    b.build().map_err(|e| Status::internal(e.to_string()))
}

/// `GetTables`, with each table's schema if asked (read by planning `SELECT *` on it).
pub async fn get_tables(session: &Session, q: CommandGetTables) -> Result<RecordBatch, Status> {
    let include = q.include_schema;
    let (db_pattern, name_pattern) =
        (q.db_schema_filter_pattern.clone(), q.table_name_filter_pattern.clone());
    let mut b = q.into_builder();
    for t in tables(session).await? {
        // The builder filters too; tables filtered out here are not planned for their schema.
        let fits = |p: &Option<String>, s: &str| p.as_deref().is_none_or(|p| like(p, s));
        if !fits(&db_pattern, &t.database) || !fits(&name_pattern, &t.name) {
            continue;
        }
        let schema = match include {
            true => {
                let sql =
                    format!("SELECT * FROM {}.{} LIMIT 0", ident(&t.database), ident(&t.name));
                match session.execute(&sql).await {
                    Ok(out) => out.schema.as_ref().clone(),
                    // A table the user may not read is listed without columns.
                    Err(_) => Schema::empty(),
                }
            }
            false => Schema::empty(),
        };
        b.append(CATALOG, &t.database, &t.name, &t.kind, &schema)
            .map_err(|e| Status::internal(e.to_string()))?;
    }
    b.build().map_err(|e| Status::internal(e.to_string()))
}

/// SQL `LIKE` without escapes, as Flight SQL filter patterns are: `%` any run, `_` any one.
fn like(pattern: &str, s: &str) -> bool {
    let (p, s): (Vec<char>, Vec<char>) = (pattern.chars().collect(), s.chars().collect());
    // Iterative matching with one backtrack point (the last `%`): linear in practice, no
    // recursion for a hostile pattern.
    let (mut i, mut j, mut star, mut mark) = (0, 0, None, 0);
    while j < s.len() {
        if i < p.len() && p[i] == '%' {
            star = Some(i);
            mark = j;
            i += 1;
        } else if i < p.len() && (p[i] == '_' || p[i] == s[j]) {
            i += 1;
            j += 1;
        } else if let Some(st) = star {
            i = st + 1;
            mark += 1;
            j = mark;
        } else {
            return false;
        }
    }
    p[i..].iter().all(|c| *c == '%')
}

#[cfg(test)]
mod tests {
    use super::like;

    #[test]
    fn like_patterns() {
        assert!(like("cpu", "cpu") && !like("cpu", "cpus"));
        assert!(like("cp_", "cpu") && like("%", "") && like("c%u", "cpu") && like("%u%", "cpu"));
        assert!(!like("c%x", "cpu") && !like("_", ""));
        assert!(like("%a%b%c%", "xaybzc") && !like("%a%b%c%", "xaybz"));
        // `%` is a wildcard even where the name holds a `%`.
        assert!(like("%x", "%ax") && like("a%", "a%b"));
    }
}
