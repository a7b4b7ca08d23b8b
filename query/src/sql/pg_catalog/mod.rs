//! PostgreSQL's catalog as clients read it: the `pg_catalog` schema (`pg_class`,
//! `pg_namespace`, `pg_attribute`, `pg_type`, `pg_database`, `pg_proc`, `pg_settings`,
//! `pg_roles`, ...), the functions clients call (`version()`, `current_database()`,
//! `current_schema()`, `format_type`, `pg_table_is_visible`, ...) and the rewrites that make
//! their catalog queries plannable (`'cpu'::regclass`, `x = ANY(array)`,
//! `OPERATOR(pg_catalog.~)`, ...). The tables, functions and rewrites are those of the
//! `datafusion-pg-catalog` crate (what `datafusion-postgres` serves); what EbbDB decides is
//! how its names map onto PostgreSQL's:
//!
//! - a connection is to one EbbDB database, as a PostgreSQL connection is to one database:
//!   `current_database()` names it, and `pg_database` lists every database the user may read
//!   (psql `\l`);
//! - the database's tables are in a schema named like the database (EbbDB SQL already
//!   resolves `db.table`), which is the session's `current_schema()` and `search_path`, so a
//!   client that qualifies names (`"db"."cpu"`) reaches the same table;
//! - `pg_class`, `pg_namespace` and `pg_attribute` list that database's tables and nothing
//!   of another database, as in PostgreSQL; a user that may not read the database sees none.

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, BooleanArray, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, SchemaRef};
use datafusion::catalog::{CatalogProvider, SchemaProvider};
use datafusion::common::utils::SingleRowListArrayBuilder;
use datafusion::datasource::TableType;
use datafusion::error::DataFusionError;
use datafusion::execution::SessionState;
use datafusion::logical_expr::{create_udf, ColumnarValue, Volatility};
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::Statement;
use datafusion_pg_catalog::pg_catalog as pg;
use datafusion_pg_catalog::pg_catalog::catalog_info::CatalogInfo;
use datafusion_pg_catalog::pg_catalog::context::{PgCatalogContextProvider, Role};
use datafusion_pg_catalog::sql::PostgresCompatibilityParser;

use crate::access::{AccessStore, Privilege};

mod format;

/// The schema's name.
pub const PG_CATALOG: &str = "pg_catalog";

/// The server version PostgreSQL clients are told (`server_version`, `version()`): the
/// protocol and catalog EbbDB speaks are PostgreSQL 16's.
pub const PG_VERSION: &str = "16.6";
/// [`PG_VERSION`] as a number (`server_version_num`).
pub const PG_VERSION_NUM: &str = "160006";

/// `version()`: what SQLAlchemy and pgjdbc parse (`PostgreSQL <major>.<minor>`), then EbbDB's own.
pub fn version_string() -> String {
    format!("PostgreSQL {PG_VERSION} (EbbDB {})", env!("CARGO_PKG_VERSION"))
}

/// The database listing the catalog is built from: the session's database and the databases
/// its user may read, as the `ebb` catalog lists them.
#[derive(Clone)]
struct Listing {
    catalog: Arc<dyn CatalogProvider>,
    database: String,
}

impl std::fmt::Debug for Listing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listing").field("database", &self.database).finish_non_exhaustive()
    }
}

impl Listing {
    /// The databases listed (`system` is EbbDB's own schema, not a database).
    fn databases(&self) -> Vec<String> {
        let mut names = self.catalog.schema_names();
        names.retain(|n| n != super::system::SYSTEM_SCHEMA);
        names
    }

    /// True if `catalog.schema` is the session's database, which its user may read.
    fn is_mine(&self, catalog: &str, schema: &str) -> bool {
        catalog == self.database
            && schema == self.database
            && self.catalog.schema_names().contains(&self.database)
    }

    fn schema(&self, catalog: &str, schema: &str) -> Option<Arc<dyn SchemaProvider>> {
        if self.is_mine(catalog, schema) {
            self.catalog.schema(schema)
        } else {
            None
        }
    }
}

#[async_trait]
impl CatalogInfo for Listing {
    async fn catalog_names(&self) -> Result<Vec<String>, DataFusionError> {
        Ok(self.databases())
    }

    async fn schema_names(&self, catalog: &str) -> Result<Option<Vec<String>>, DataFusionError> {
        // `pg_catalog` itself is a namespace (oid 11) that `pg_type` and `pg_proc` rows name.
        Ok(Some(if self.is_mine(catalog, catalog) {
            vec![catalog.to_string(), PG_CATALOG.to_string()]
        } else {
            vec![]
        }))
    }

    async fn table_names(
        &self,
        catalog: &str,
        schema: &str,
    ) -> Result<Option<Vec<String>>, DataFusionError> {
        Ok(self.schema(catalog, schema).map(|s| {
            let mut names = s.table_names();
            names.sort();
            names
        }))
    }

    async fn table_schema(
        &self,
        catalog: &str,
        schema: &str,
        table: &str,
    ) -> Result<Option<SchemaRef>, DataFusionError> {
        let Some(s) = self.schema(catalog, schema) else { return Ok(None) };
        Ok(s.table(table).await?.map(|t| t.schema()))
    }

    async fn table_type(
        &self,
        catalog: &str,
        schema: &str,
        table: &str,
    ) -> Result<Option<TableType>, DataFusionError> {
        // From the listing: loading each table again only to learn it is one would cost a
        // request to every shard per table.
        let Some(s) = self.schema(catalog, schema) else { return Ok(None) };
        Ok(s.table_exist(table).then_some(TableType::Base))
    }
}

/// The tables every session shares (`pg_type`, `pg_proc`, ...: PostgreSQL's own rows), read
/// once per process.
fn static_tables() -> Result<Arc<pg::PgCatalogStaticTables>, DataFusionError> {
    static TABLES: OnceLock<Arc<pg::PgCatalogStaticTables>> = OnceLock::new();
    if let Some(t) = TABLES.get() {
        return Ok(t.clone());
    }
    let made = Arc::new(pg::PgCatalogStaticTables::try_new()?);
    Ok(TABLES.get_or_init(|| made).clone())
}

/// The users `pg_roles` lists: every user to an admin, a user's own name to anyone else, none
/// on a server without users.
#[derive(Clone)]
struct Roles {
    access: Arc<dyn AccessStore>,
    user: Option<String>,
}

impl std::fmt::Debug for Roles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Roles").field("user", &self.user).finish_non_exhaustive()
    }
}

#[async_trait]
impl PgCatalogContextProvider for Roles {
    async fn roles(&self) -> Vec<String> {
        let state = self.access.access();
        let me = self.user.as_deref();
        let admin = me.is_some_and(|u| state.allows(u, None, Privilege::Admin));
        let mut names: Vec<String> = state
            .users()
            .filter(|u| admin || Some(u.name.as_str()) == me)
            .map(|u| u.name.clone())
            .collect();
        names.sort();
        names
    }

    async fn role(&self, name: &str) -> Option<Role> {
        let state = self.access.access();
        state.user(name)?;
        let admin = state.allows(name, None, Privilege::Admin);
        Some(Role {
            name: name.to_string(),
            is_superuser: admin,
            can_login: true,
            can_create_db: admin,
            can_create_role: admin,
            can_create_user: admin,
            can_replication: false,
            grants: Vec::new(),
            inherited_roles: Vec::new(),
        })
    }
}

/// The `pg_catalog` schema of `user`'s session on `database` whose databases `catalog` lists,
/// and whose users `access` keeps. One per session: the object ids it gives tables stay the
/// same for as long as the session lasts.
pub fn schema(
    catalog: Arc<dyn CatalogProvider>,
    access: Arc<dyn AccessStore>,
    database: &str,
    user: Option<&str>,
) -> Result<Arc<dyn SchemaProvider>, DataFusionError> {
    let listing = Listing { catalog, database: database.to_string() };
    let roles = Roles { access, user: user.map(String::from) };
    let inner = pg::PgCatalogSchemaProvider::try_new(listing.clone(), static_tables()?, roles)?;
    Ok(Arc::new(OwnDatabases { inner: Arc::new(inner), listing }))
}

/// The crate's `pg_catalog` schema with `pg_database` listing EbbDB's databases alone: the
/// crate's adds a `postgres` database that does not exist here (psql `\l` would show it, and a
/// client that connects to it would find nothing).
#[derive(Debug)]
struct OwnDatabases {
    inner: Arc<dyn SchemaProvider>,
    listing: Listing,
}

#[async_trait]
impl SchemaProvider for OwnDatabases {
    fn table_names(&self) -> Vec<String> {
        self.inner.table_names()
    }

    async fn table(
        &self,
        name: &str,
    ) -> Result<Option<Arc<dyn datafusion::catalog::TableProvider>>, DataFusionError> {
        let table = self.inner.table(name).await?;
        if !name.eq_ignore_ascii_case("pg_database") {
            return Ok(table);
        }
        Ok(table.map(|inner| {
            Arc::new(ListedDatabases { inner, listing: self.listing.clone() })
                as Arc<dyn datafusion::catalog::TableProvider>
        }))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.inner.table_exist(name)
    }
}

/// `pg_database` holding the rows of the databases [`Listing::databases`] lists.
#[derive(Debug)]
struct ListedDatabases {
    inner: Arc<dyn datafusion::catalog::TableProvider>,
    listing: Listing,
}

#[async_trait]
impl datafusion::catalog::TableProvider for ListedDatabases {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }

    fn table_type(&self) -> TableType {
        self.inner.table_type()
    }

    async fn scan(
        &self,
        state: &dyn datafusion::catalog::Session,
        projection: Option<&Vec<usize>>,
        filters: &[datafusion::prelude::Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn datafusion::physical_plan::ExecutionPlan>, DataFusionError> {
        // A few rows: read whole, then kept as a table in memory.
        let all = self.inner.scan(state, None, &[], None).await?;
        let batches = datafusion::physical_plan::collect(all, state.task_ctx()).await?;
        let listed = self.listing.databases();
        let schema = self.schema();
        let at = schema.index_of("datname")?;
        let kept = batches
            .iter()
            .map(|b| {
                let names = datafusion::arrow::compute::cast(b.column(at), &DataType::Utf8)?;
                let names = names.as_any().downcast_ref::<StringArray>().ok_or_else(|| {
                    DataFusionError::Internal("pg_database.datname: not text".into())
                })?;
                let keep: BooleanArray = names
                    .iter()
                    .map(|n| Some(n.is_some_and(|n| listed.iter().any(|l| l == n))))
                    .collect();
                Ok(datafusion::arrow::compute::filter_record_batch(b, &keep)?)
            })
            .collect::<Result<Vec<_>, DataFusionError>>()?;
        let table = datafusion::datasource::MemTable::try_new(schema, vec![kept])?;
        datafusion::catalog::TableProvider::scan(&table, state, projection, filters, limit).await
    }
}

/// Adds the functions and planners every session shares to `state` (once per process).
pub fn register_shared(state: SessionState) -> SessionState {
    let ctx = SessionContext::new_with_state(state);
    for udf in [
        pg::create_pg_get_userbyid_udf(),
        pg::create_pg_table_is_visible(),
        pg::format_type::create_format_type_udf(),
        pg::pg_get_expr_udf::create_pg_get_expr_udf(),
        pg::create_pg_get_partkeydef_udf(),
        pg::create_pg_relation_is_publishable_udf(),
        pg::create_pg_get_statisticsobjdef_columns_udf(),
        pg::create_pg_encoding_to_char_udf(),
        pg::create_pg_backend_pid_udf(),
        pg::create_pg_stat_get_numscans(),
        pg::create_pg_get_constraintdef(),
        pg::create_pg_get_partition_ancestors_udf(),
        pg::quote_ident_udf::create_quote_ident_udf(),
        pg::quote_ident_udf::create_parse_ident_udf(),
        pg::array_bounds_udf::create_array_upper_udf(),
        pg::array_bounds_udf::create_array_lower_udf(),
        constant("version", version_string()),
        expand_array(),
        size_pretty(),
        unknown_size("pg_table_size"),
        unknown_size("pg_relation_size"),
        unknown_size("pg_total_relation_size"),
        unknown_size("pg_indexes_size"),
        like_escape(),
        JsonObject::udf(),
        format::udf(),
        Fixed::visible("pg_collation_is_visible"),
        Fixed::visible("pg_type_is_visible"),
        Fixed::visible("pg_function_is_visible"),
        Fixed::null_text("obj_description"),
        Fixed::null_text("col_description"),
        Fixed::null_text("shobj_description"),
        Fixed::null_text("pg_get_serial_sequence"),
        Fixed::null_text("pg_get_indexdef"),
        Fixed::null_text("pg_get_viewdef"),
    ] {
        ctx.register_udf(udf);
    }
    if let Ok(t) = static_tables() {
        ctx.register_udtf("pg_get_keywords", t.pg_get_keywords.clone());
    }
    pg::generate_series_arg_coercion::CoerceIntArgsToBigInt::widen(&ctx);
    datafusion::execution::SessionStateBuilder::new_from_existing(ctx.state())
        .with_type_planner(Arc::new(pg::oid_type_planner::PgOidTypePlanner))
        .build()
}

/// Adds the functions whose answer is the session's own: its database (`current_database()`,
/// `current_schema()`, `current_schemas(bool)`), its user (`session_user`, `current_user`;
/// `None`: a server without users) and what the user may do (`has_table_privilege`, ...),
/// from the users `access` keeps.
pub fn register_session(
    ctx: &SessionContext,
    access: Arc<dyn AccessStore>,
    database: &str,
    user: Option<&str>,
) {
    let name = user.unwrap_or("ebb").to_string();
    ctx.register_udf(constant("current_database", database.to_string()));
    ctx.register_udf(constant("current_catalog", database.to_string()));
    ctx.register_udf(constant("current_schema", database.to_string()));
    ctx.register_udf(constant("session_user", name.clone()));
    ctx.register_udf(constant("current_user", name));
    for on in [On::Table, On::Schema, On::Database, On::AnyColumn] {
        let check = HasPrivilege {
            on,
            access: access.clone(),
            user: user.map(String::from),
            database: database.to_string(),
            signature: datafusion::logical_expr::Signature::variadic_any(Volatility::Stable),
        };
        ctx.register_udf(datafusion::logical_expr::ScalarUDF::new_from_impl(check));
    }
    let db = database.to_string();
    let schemas = move |args: &[ColumnarValue]| {
        let args = ColumnarValue::values_to_arrays(args)?;
        let implicit = args
            .first()
            .and_then(|a| a.as_any().downcast_ref::<BooleanArray>())
            .is_some_and(|b| !b.is_empty() && b.value(0));
        let mut names = vec![db.as_str()];
        if implicit {
            names.extend([PG_CATALOG, "information_schema"]);
        }
        let list = SingleRowListArrayBuilder::new(Arc::new(StringArray::from(names)));
        Ok(ColumnarValue::Scalar(datafusion::scalar::ScalarValue::List(Arc::new(
            list.build_list_array(),
        ))))
    };
    // `current_setting(name)`: the settings a client's connection reports (ParameterStatus),
    // the search path being the session's database. Others are null, as a missing setting is
    // with `current_setting(name, true)`.
    let db = database.to_string();
    let setting = move |args: &[ColumnarValue]| {
        let args = ColumnarValue::values_to_arrays(args)?;
        let names = args.first().and_then(|a| a.as_any().downcast_ref::<StringArray>());
        let value = |name: &str| -> Option<String> {
            Some(match name.to_ascii_lowercase().as_str() {
                "search_path" => db.clone(),
                "server_version" => PG_VERSION.to_string(),
                "server_version_num" => PG_VERSION_NUM.to_string(),
                "server_encoding" | "client_encoding" => "UTF8".to_string(),
                "timezone" => "UTC".to_string(),
                "datestyle" => "ISO, MDY".to_string(),
                "standard_conforming_strings" | "integer_datetimes" => "on".to_string(),
                _ => return None,
            })
        };
        let out: StringArray = match names {
            Some(n) => n.iter().map(|x| x.and_then(value)).collect(),
            None => StringArray::new_null(1),
        };
        Ok(ColumnarValue::Array(Arc::new(out)))
    };
    use datafusion::logical_expr::{Signature, SimpleScalarUDF, TypeSignature};
    let either = Signature::one_of(
        vec![
            TypeSignature::Exact(vec![DataType::Utf8]),
            TypeSignature::Exact(vec![DataType::Utf8, DataType::Boolean]),
        ],
        Volatility::Stable,
    );
    let udf = SimpleScalarUDF::new_with_signature(
        "current_setting",
        either,
        DataType::Utf8,
        Arc::new(setting),
    );
    ctx.register_udf(datafusion::logical_expr::ScalarUDF::new_from_impl(udf));
    ctx.register_udf(create_udf(
        "current_schemas",
        vec![DataType::Boolean],
        DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
        Volatility::Immutable,
        Arc::new(schemas),
    ));
}

/// What a `has_..._privilege` function asks about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum On {
    Table,
    Schema,
    Database,
    AnyColumn,
}

/// `has_table_privilege([user,] table, privilege)` and its kin, answered from EbbDB's grants:
/// `SELECT` (and a schema's `USAGE`, a database's `CONNECT`) is `READ`, `INSERT` is `WRITE`,
/// `DELETE` and `TRUNCATE` are `DELETE`, `CREATE` is `ADMIN`; what EbbDB does not have
/// (`UPDATE`, `REFERENCES`, `TRIGGER`) is never held. A privilege list is held if any of it
/// is. A table or schema is named (`cpu`, `db.cpu`) or given by its oid, which names a table
/// of the session's database (the only one `pg_class` lists). Another user's privileges are
/// answered to an admin only (null to anyone else), as `system.grants` is shown.
struct HasPrivilege {
    on: On,
    access: Arc<dyn AccessStore>,
    user: Option<String>,
    database: String,
    signature: datafusion::logical_expr::Signature,
}

impl std::fmt::Debug for HasPrivilege {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HasPrivilege").field("on", &self.on).finish_non_exhaustive()
    }
}

impl PartialEq for HasPrivilege {
    fn eq(&self, other: &Self) -> bool {
        self.on == other.on && self.user == other.user && self.database == other.database
    }
}

impl Eq for HasPrivilege {}

impl std::hash::Hash for HasPrivilege {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (self.on, &self.user, &self.database).hash(state);
    }
}

impl HasPrivilege {
    /// Whether `user` holds `privileges` on `object`; `None` if the session may not ask.
    fn holds(&self, user: Option<&str>, object: &str, privileges: &str) -> Option<bool> {
        let state = self.access.access();
        if !state.has_users() {
            return Some(true);
        }
        let me = self.user.as_deref()?;
        let who = user.unwrap_or(me);
        if who != me && !state.allows(me, None, Privilege::Admin) {
            return None;
        }
        let object = object.trim();
        let database = if object.is_empty() || object.bytes().all(|b| b.is_ascii_digit()) {
            self.database.clone()
        } else {
            let names: Vec<String> =
                object.split('.').map(|p| p.trim().trim_matches('"').to_string()).collect();
            match (self.on, names.as_slice()) {
                (On::Schema | On::Database, [.., name]) => name.clone(),
                (_, [db, _table]) => db.clone(),
                _ => self.database.clone(),
            }
        };
        Some(privileges.split(',').any(|p| {
            let p = p.trim().to_ascii_uppercase();
            let p = p.strip_suffix(" WITH GRANT OPTION").unwrap_or(&p).trim().to_string();
            let needed = match p.as_str() {
                "SELECT" | "USAGE" | "CONNECT" | "TEMP" | "TEMPORARY" => Privilege::Read,
                "INSERT" => Privilege::Write,
                "DELETE" | "TRUNCATE" => Privilege::Delete,
                "CREATE" => Privilege::Admin,
                _ => return false,
            };
            state.allows(who, Some(&database), needed)
        }))
    }
}

impl datafusion::logical_expr::ScalarUDFImpl for HasPrivilege {
    fn name(&self) -> &str {
        match self.on {
            On::Table => "has_table_privilege",
            On::Schema => "has_schema_privilege",
            On::Database => "has_database_privilege",
            On::AnyColumn => "has_any_column_privilege",
        }
    }

    fn signature(&self) -> &datafusion::logical_expr::Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(
        &self,
        args: datafusion::logical_expr::ScalarFunctionArgs,
    ) -> datafusion::error::Result<ColumnarValue> {
        use datafusion::arrow::array::Array;
        let rows = args.number_rows;
        let texts = args
            .args
            .iter()
            .map(|a| {
                let a = a.to_array(rows)?;
                let t = datafusion::arrow::compute::cast(&a, &DataType::Utf8)?;
                t.as_any().downcast_ref::<StringArray>().cloned().ok_or_else(|| {
                    DataFusionError::Internal(format!("{}: an argument as text", self.name()))
                })
            })
            .collect::<datafusion::error::Result<Vec<StringArray>>>()?;
        let text = |a: &StringArray, i: usize| (!a.is_null(i)).then(|| a.value(i).to_string());
        let out: BooleanArray = (0..rows)
            .map(|i| match texts.as_slice() {
                [object, privileges] => self.holds(None, &text(object, i)?, &text(privileges, i)?),
                [user, object, privileges] => {
                    let user = text(user, i)?;
                    self.holds(Some(&user), &text(object, i)?, &text(privileges, i)?)
                }
                _ => None,
            })
            .collect();
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

/// A function of no arguments answering `value`.
fn constant(name: &str, value: String) -> datafusion::logical_expr::ScalarUDF {
    create_udf(
        name,
        vec![],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(move |_: &[ColumnarValue]| {
            Ok(ColumnarValue::Scalar(datafusion::scalar::ScalarValue::Utf8(Some(value.clone()))))
        }),
    )
}

fn compat() -> &'static PostgresCompatibilityParser {
    static PARSER: OnceLock<PostgresCompatibilityParser> = OnceLock::new();
    PARSER.get_or_init(PostgresCompatibilityParser::new)
}

/// True if `sql` may be a PostgreSQL client's catalog query: it names a word of the catalog
/// (`pg_...`, `information_schema`, an oid type such as `regclass`, `to_regtype`,
/// `current_schema`). Only such
/// text is rewritten: the rewrites are PostgreSQL's rules for catalog lookups, not for users'
/// queries (a correlated subquery or `= ANY(subquery)` of a user's query plans as DataFusion
/// plans it).
pub fn is_catalog_query(sql: &str) -> bool {
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
    const WORDS: [&str; 4] = ["pg_", "information_schema", "reg", "current_schema"];
    let bytes = sql.as_bytes();
    let mentions = |w: &str| bytes.windows(w.len()).any(|b| b.eq_ignore_ascii_case(w.as_bytes()));
    if !WORDS.iter().any(|w| mentions(w)) {
        return false;
    }
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize() else { return false };
    tokens.iter().any(|t| {
        let Token::Word(w) = t else { return false };
        let v = w.value.to_ascii_lowercase();
        v.starts_with("pg_")
            || v == "information_schema"
            || v == "to_regtype"
            // Written without parentheses, as PostgreSQL allows.
            || v == "current_schema"
            || (v.starts_with("reg")
                && ["regclass", "regproc", "regprocedure", "regtype", "regnamespace", "regrole"]
                    .contains(&v.as_str()))
    })
}

/// At most how many bytes the rewrites of `sql` add (each mention of a name a rewrite replaces
/// counted at the size of its replacement), so a request can be refused before they are made.
pub fn rewrite_growth(sql: &str) -> usize {
    let lower = sql.to_ascii_lowercase();
    let mentions = |w: &str| lower.matches(w).count();
    let small = ["indkey", "indclass", "indcollation", "indoption", "conkey", "confkey"]
        .iter()
        .chain(&["reloptions", "generate_subscripts", "unnest"])
        .map(|w| mentions(w))
        .sum::<usize>();
    mentions("information_schema")
        .saturating_mul(COLUMNS.len())
        .saturating_add(mentions("regclass").saturating_mul(REGCLASS_LOOKUP.len()))
        .saturating_add(small.saturating_mul(128))
}

/// `sql`'s statements as PostgreSQL clients' catalog queries need them rewritten: whole queries
/// DataFusion cannot plan replaced by equivalents (psql's row-policy query, pgcli's), then each
/// statement rewritten. `None` if the text does not parse that way (the caller keeps its own
/// parse).
pub fn rewritten(sql: &str) -> Option<Vec<Statement>> {
    let sql = regproc_names(sql);
    Some(compat().parse(&sql).ok()?.into_iter().map(own_rewrites).collect())
}

/// `'pg_catalog.array_in'::regproc` as the name `'array_in'`: `pg_type`'s function columns
/// (`typinput`, ...) hold names here, not oids (pgjdbc's type lookups compare them).
fn regproc_names(sql: &str) -> std::borrow::Cow<'_, str> {
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
    if !sql.to_ascii_lowercase().contains("regproc") {
        return sql.into();
    }
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize() else {
        return sql.into();
    };
    // The text is rebuilt from its tokens, which write a quote inside a literal or a quoted
    // name back unescaped: such text (and any other kind of string) is left as it is.
    let plain = |t: &Token| match t {
        Token::SingleQuotedString(v) => !v.contains(['\'', '\\']),
        Token::Word(w) => !w.value.contains('"'),
        Token::EscapedStringLiteral(_)
        | Token::DollarQuotedString(_)
        | Token::NationalStringLiteral(_)
        | Token::HexStringLiteral(_)
        | Token::DoubleQuotedString(_)
        | Token::SingleQuotedByteStringLiteral(_)
        | Token::DoubleQuotedByteStringLiteral(_)
        | Token::UnicodeStringLiteral(_) => false,
        _ => true,
    };
    if !tokens.iter().all(plain) {
        return sql.into();
    }
    let is = |t: Option<&Token>, w: &str| matches!(t, Some(Token::Word(x)) if x.value.eq_ignore_ascii_case(w));
    let mut out = Vec::with_capacity(tokens.len());
    let mut i = 0;
    while i < tokens.len() {
        if let (Token::SingleQuotedString(name), Some(Token::DoubleColon)) =
            (&tokens[i], tokens.get(i + 1))
        {
            let qualified = is(tokens.get(i + 2), "pg_catalog")
                && matches!(tokens.get(i + 3), Some(Token::Period))
                && is(tokens.get(i + 4), "regproc");
            let plain = is(tokens.get(i + 2), "regproc");
            if qualified || plain {
                let bare = name.strip_prefix("pg_catalog.").unwrap_or(name);
                out.push(Token::SingleQuotedString(bare.to_string()));
                i += if qualified { 5 } else { 3 };
                continue;
            }
        }
        out.push(tokens[i].clone());
        i += 1;
    }
    out.iter().map(ToString::to_string).collect::<String>().into()
}

/// `statement` rewritten for planning (without the whole-query replacements).
pub fn rewrite(statement: Statement) -> Statement {
    own_rewrites(compat().rewrite(statement))
}

/// `name(arg)`, built as a tree (never by parsing text made from a client's: its literals
/// would be read again as SQL).
fn call(
    name: &str,
    arg: datafusion::sql::sqlparser::ast::Expr,
) -> Option<datafusion::sql::sqlparser::ast::Expr> {
    use datafusion::sql::sqlparser::ast::{Expr, FunctionArg, FunctionArgExpr, FunctionArguments};
    // The name is one of ours: the text parsed is fixed.
    let mut call = parse_fixed(&format!("{name}(NULL)"))?;
    let Expr::Function(f) = &mut call else { return None };
    let FunctionArguments::List(list) = &mut f.args else { return None };
    list.args = vec![FunctionArg::Unnamed(FunctionArgExpr::Expr(arg))];
    Some(call)
}

/// An expression of EbbDB's own, fixed text.
fn parse_fixed(text: &str) -> Option<datafusion::sql::sqlparser::ast::Expr> {
    datafusion::sql::sqlparser::parser::Parser::new(
        &datafusion::sql::sqlparser::dialect::PostgreSqlDialect {},
    )
    .try_with_sql(text)
    .and_then(|mut p| p.parse_expr())
    .ok()
}

/// Whether `q` computes the schemas of the search path from its text, as Grafana's table and
/// column pickers do (`FROM generate_series(...) AS i, string_to_array(current_setting(
/// 'search_path'), ',') s`, a table function DataFusion does not have). The search path is the
/// session's database alone, so `x IN (that)` is `x = current_schema()`.
fn splits_search_path(q: &datafusion::sql::sqlparser::ast::Query) -> bool {
    use datafusion::sql::sqlparser::ast::{SetExpr, TableFactor};
    let SetExpr::Select(select) = q.body.as_ref() else { return false };
    let table_function = |name: &str| {
        select.from.iter().any(|t| {
            matches!(&t.relation, TableFactor::Table { name: n, args: Some(_), .. }
                if n.to_string().eq_ignore_ascii_case(name))
        })
    };
    table_function("string_to_array")
        && q.to_string().to_ascii_lowercase().contains("current_setting('search_path')")
}

/// `to_regtype(arg)` as `(SELECT oid FROM pg_catalog.pg_type WHERE typname = arg LIMIT 1)`.
fn type_lookup(
    arg: datafusion::sql::sqlparser::ast::Expr,
) -> Option<datafusion::sql::sqlparser::ast::Expr> {
    use datafusion::sql::sqlparser::ast::{BinaryOperator, Expr, SetExpr};
    let mut lookup =
        parse_fixed("(SELECT oid FROM pg_catalog.pg_type WHERE typname = NULL LIMIT 1)")?;
    let Expr::Subquery(q) = &mut lookup else { return None };
    let SetExpr::Select(select) = q.body.as_mut() else { return None };
    let Some(Expr::BinaryOp { op: BinaryOperator::Eq, right, .. }) = &mut select.selection else {
        return None;
    };
    **right = arg;
    Some(lookup)
}

/// EbbDB's rewrites of what PostgreSQL clients send, beside the crate's:
///
/// - `ARRAY(SELECT e FROM ...)` (psql's `\du`, DBeaver's role lists) as the scalar subquery
///   `(SELECT array_agg(e) FROM ...)`, which DataFusion plans, correlated or not (a subquery
///   with more than one column, or with `DISTINCT`, `ORDER BY`, `LIMIT` or `GROUP BY`, stays
///   as it is; an empty one gives null, not `{}`);
/// - a field of a composite value, `(expr).field` (pgjdbc's `getPrimaryKeys`), as
///   `(expr)['field']`, the form DataFusion plans (a column's path, `t.col[1]`, stays as it is);
/// - `to_regtype(name)` as a lookup in `pg_type`;
/// - `x LIKE p ESCAPE 'c'` (SQLAlchemy's schema names) as `x LIKE like_escape(p, 'c')`, the
///   pattern written with DataFusion's only escape, the backslash;
/// - a one-column scalar subquery over `pg_catalog` ([`one_row_of_catalog`]);
/// - `information_schema.columns` as PostgreSQL's, and its constraint tables (empty), in place
///   of DataFusion's ([`information_schema_view`]);
/// - `CAST(name AS regclass)` of a computed name as a lookup in `pg_class`
///   ([`REGCLASS_LOOKUP`]);
/// - a scalar subquery over a table EbbDB never fills ([`over_nothing`]) as null;
/// - the numbers of an index's vector columns (`unnest(i.indkey)`,
///   `generate_subscripts(i.indkey, 1)`) read from their text ([`takes_index_vector`]);
/// - a table's options, `c.reloptions`, and the array of its toast table's (psql's `\d+`), as
///   the null array of a table without options ([`no_options`]).
fn own_rewrites(mut statement: Statement) -> Statement {
    use datafusion::sql::sqlparser::ast::{
        AccessExpr, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, GroupByExpr, SelectItem,
        SetExpr, Value, VisitMut, VisitorMut,
    };
    use std::ops::ControlFlow;
    struct Own;
    impl VisitorMut for Own {
        type Break = ();
        fn post_visit_table_factor(
            &mut self,
            factor: &mut datafusion::sql::sqlparser::ast::TableFactor,
        ) -> ControlFlow<()> {
            if let Some(view) = information_schema_table(factor) {
                *factor = view;
            }
            ControlFlow::Continue(())
        }
        fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
            match expr {
                Expr::CompoundFieldAccess { root, access_chain }
                    if !matches!(**root, Expr::Identifier(_) | Expr::CompoundIdentifier(_)) =>
                {
                    for access in access_chain.iter_mut() {
                        if let AccessExpr::Dot(Expr::Identifier(i)) = access {
                            let name = Value::SingleQuotedString(i.value.clone());
                            *access = AccessExpr::Dot(Expr::Value(name.into()));
                        }
                    }
                }
                Expr::Subquery(q) if over_nothing(q) => {
                    *expr = Expr::Value(Value::Null.into());
                }
                Expr::Subquery(q) => one_row_of_catalog(q),
                Expr::Cast { expr: name, data_type, .. }
                    if data_type.to_string().to_ascii_lowercase().ends_with("regclass")
                        && computes_text(name) =>
                {
                    // `CAST(format('%I.%I', s, t) AS regclass)` (Metabase's column comments):
                    // the table of that name in the session's database (the only one
                    // `pg_class` lists), or null.
                    if let Some(lookup) = filled(REGCLASS_LOOKUP, (**name).clone()) {
                        *expr = lookup;
                    }
                }
                Expr::Function(f) if f.name.to_string().eq_ignore_ascii_case("array_contains") => {
                    // `x = ANY(c.conkey)` (Metabase's foreign keys), as the crate writes it.
                    let FunctionArguments::List(list) = &mut f.args else {
                        return ControlFlow::Continue(());
                    };
                    let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(keys))) =
                        list.args.first_mut()
                    else {
                        return ControlFlow::Continue(());
                    };
                    if names_column(keys, &["conkey", "confkey"]) {
                        if let Some(numbers) = constraint_keys(keys.clone()) {
                            *keys = numbers;
                        }
                    }
                }
                Expr::Function(f) if takes_index_vector(f) => {
                    let FunctionArguments::List(list) = &mut f.args else {
                        return ControlFlow::Continue(());
                    };
                    let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(vector))) =
                        list.args.first_mut()
                    else {
                        return ControlFlow::Continue(());
                    };
                    let Some(numbers) = index_vector(vector.clone()) else {
                        return ControlFlow::Continue(());
                    };
                    if f.name.to_string().eq_ignore_ascii_case("generate_subscripts") {
                        // `generate_subscripts(v, 1)`: the positions 1..=len of `v`'s numbers.
                        if let Some(positions) = subscripts(numbers) {
                            *expr = positions;
                        }
                    } else {
                        *vector = numbers;
                    }
                }
                Expr::Identifier(i) if i.value.eq_ignore_ascii_case("reloptions") => {
                    *expr = no_options();
                }
                Expr::CompoundIdentifier(parts)
                    if parts.last().is_some_and(|i| i.value.eq_ignore_ascii_case("reloptions")) =>
                {
                    *expr = no_options();
                }
                Expr::Function(f)
                    if f.name.to_string().eq_ignore_ascii_case("array")
                        && matches!(&f.args, FunctionArguments::Subquery(q) if unnests_no_options(q)) =>
                {
                    *expr = no_options();
                }
                Expr::InSubquery { expr: e, subquery, negated } if splits_search_path(subquery) => {
                    if let Some(schema) = parse_fixed("current_schema()") {
                        let op = match negated {
                            true => datafusion::sql::sqlparser::ast::BinaryOperator::NotEq,
                            false => datafusion::sql::sqlparser::ast::BinaryOperator::Eq,
                        };
                        *expr = Expr::BinaryOp { left: e.clone(), op, right: Box::new(schema) };
                    }
                }
                Expr::Like { pattern, escape_char, .. }
                | Expr::ILike { pattern, escape_char, .. } => {
                    let Some(Value::SingleQuotedString(c)) = escape_char.as_ref().map(|e| &e.value)
                    else {
                        return ControlFlow::Continue(());
                    };
                    if c == "\\" {
                        return ControlFlow::Continue(());
                    }
                    let escape = Expr::Value(Value::SingleQuotedString(c.clone()).into());
                    if let Some(mut translated) = call("like_escape", (**pattern).clone()) {
                        if let Expr::Function(f) = &mut translated {
                            if let FunctionArguments::List(list) = &mut f.args {
                                list.args.push(FunctionArg::Unnamed(FunctionArgExpr::Expr(escape)));
                            }
                        }
                        **pattern = translated;
                        *escape_char = None;
                    }
                }
                Expr::Function(f) if f.name.to_string().eq_ignore_ascii_case("to_regtype") => {
                    let FunctionArguments::List(list) = &f.args else {
                        return ControlFlow::Continue(());
                    };
                    let [FunctionArg::Unnamed(FunctionArgExpr::Expr(arg))] = list.args.as_slice()
                    else {
                        return ControlFlow::Continue(());
                    };
                    if let Some(lookup) = type_lookup(arg.clone()) {
                        *expr = lookup;
                    }
                }
                Expr::Function(f) if f.name.to_string().eq_ignore_ascii_case("array") => {
                    let FunctionArguments::Subquery(q) = &f.args else {
                        return ControlFlow::Continue(());
                    };
                    if q.order_by.is_some() || q.limit_clause.is_some() {
                        return ControlFlow::Continue(());
                    }
                    let mut q = q.clone();
                    let SetExpr::Select(select) = q.body.as_mut() else {
                        return ControlFlow::Continue(());
                    };
                    let grouped = !matches!(
                        &select.group_by, GroupByExpr::Expressions(e, _) if e.is_empty()
                    );
                    if grouped || select.distinct.is_some() || select.having.is_some() {
                        return ControlFlow::Continue(());
                    }
                    let [SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. }] =
                        select.projection.as_mut_slice()
                    else {
                        return ControlFlow::Continue(());
                    };
                    let Some(agg) = call("array_agg", e.clone()) else {
                        return ControlFlow::Continue(());
                    };
                    *e = agg;
                    *expr = Expr::Subquery(q);
                }
                _ => {}
            }
            ControlFlow::Continue(())
        }
    }
    let _ = statement.visit(&mut Own);
    statement
}

/// `information_schema.columns` as PostgreSQL's, over `pg_catalog` (so of the session's database
/// alone, with PostgreSQL's type names: `data_type` `double precision`, `udt_name` `float8`),
/// what Metabase's sync and other JDBC tools read.
const COLUMNS: &str =
    "SELECT CAST(current_database() AS TEXT) AS table_catalog, n.nspname AS table_schema, \
     c.relname AS table_name, a.attname AS column_name, CAST(a.attnum AS INT) AS \
     ordinal_position, CAST(NULL AS TEXT) AS column_default, CASE WHEN a.attnotnull THEN \
     'NO' ELSE 'YES' END AS is_nullable, format_type(a.atttypid, NULL) AS \
     data_type, CAST(NULL AS INT) AS character_maximum_length, CAST(CASE WHEN t.typname = \
     'text' THEN 1073741824 END AS INT) AS character_octet_length, CAST(CASE t.typname \
     WHEN 'float8' THEN 53 WHEN 'float4' THEN 24 WHEN 'int8' THEN 64 WHEN 'int4' THEN 32 \
     WHEN 'int2' THEN 16 END AS INT) AS numeric_precision, CAST(CASE WHEN t.typname IN \
     ('float8', 'float4', 'int8', 'int4', 'int2') THEN 2 END AS INT) AS \
     numeric_precision_radix, CAST(CASE WHEN t.typname IN ('int8', 'int4', 'int2') THEN 0 \
     END AS INT) AS numeric_scale, CAST(CASE WHEN t.typname IN ('timestamp', \
     'timestamptz') THEN 6 END AS INT) AS datetime_precision, CAST(NULL AS TEXT) AS \
     interval_type, CAST(NULL AS INT) AS interval_precision, CAST(NULL AS TEXT) AS \
     collation_name, CAST(NULL AS TEXT) AS domain_name, CAST(current_database() AS TEXT) \
     AS udt_catalog, 'pg_catalog' AS udt_schema, t.typname AS udt_name, 'NO' AS \
     is_identity, CAST(NULL AS TEXT) AS identity_generation, 'NEVER' AS is_generated, \
     CAST(NULL AS TEXT) AS generation_expression, 'YES' AS is_updatable FROM \
     pg_catalog.pg_attribute AS a JOIN pg_catalog.pg_class AS c ON a.attrelid = c.oid \
     JOIN pg_catalog.pg_namespace AS n ON c.relnamespace = n.oid JOIN pg_catalog.pg_type \
     AS t ON a.atttypid = t.oid WHERE a.attnum > 0 AND NOT a.attisdropped";

/// `information_schema.table_constraints`: EbbDB tables have no constraints.
const TABLE_CONSTRAINTS: &str =
    "SELECT CAST(NULL AS TEXT) AS constraint_catalog, CAST(NULL AS TEXT) AS \
     constraint_schema, CAST(NULL AS TEXT) AS constraint_name, CAST(NULL AS TEXT) AS \
     table_catalog, CAST(NULL AS TEXT) AS table_schema, CAST(NULL AS TEXT) AS table_name, \
     CAST(NULL AS TEXT) AS constraint_type, CAST(NULL AS TEXT) AS is_deferrable, \
     CAST(NULL AS TEXT) AS initially_deferred, CAST(NULL AS TEXT) AS enforced, CAST(NULL \
     AS TEXT) AS nulls_distinct WHERE false";

/// `information_schema.key_column_usage`: none.
const KEY_COLUMN_USAGE: &str =
    "SELECT CAST(NULL AS TEXT) AS constraint_catalog, CAST(NULL AS TEXT) AS \
     constraint_schema, CAST(NULL AS TEXT) AS constraint_name, CAST(NULL AS TEXT) AS \
     table_catalog, CAST(NULL AS TEXT) AS table_schema, CAST(NULL AS TEXT) AS table_name, \
     CAST(NULL AS TEXT) AS column_name, CAST(NULL AS INT) AS ordinal_position, CAST(NULL \
     AS INT) AS position_in_unique_constraint WHERE false";

/// `information_schema.referential_constraints`: none.
const REFERENTIAL_CONSTRAINTS: &str =
    "SELECT CAST(NULL AS TEXT) AS constraint_catalog, CAST(NULL AS TEXT) AS \
     constraint_schema, CAST(NULL AS TEXT) AS constraint_name, CAST(NULL AS TEXT) AS \
     unique_constraint_catalog, CAST(NULL AS TEXT) AS unique_constraint_schema, CAST(NULL \
     AS TEXT) AS unique_constraint_name, CAST(NULL AS TEXT) AS match_option, CAST(NULL AS \
     TEXT) AS update_rule, CAST(NULL AS TEXT) AS delete_rule WHERE false";

/// `information_schema.constraint_column_usage`: none.
const CONSTRAINT_COLUMN_USAGE: &str =
    "SELECT CAST(NULL AS TEXT) AS table_catalog, CAST(NULL AS TEXT) AS table_schema, \
     CAST(NULL AS TEXT) AS table_name, CAST(NULL AS TEXT) AS column_name, CAST(NULL AS \
     TEXT) AS constraint_catalog, CAST(NULL AS TEXT) AS constraint_schema, CAST(NULL AS \
     TEXT) AS constraint_name WHERE false";

/// The query standing for `information_schema.<table>` in a catalog query, for the tables
/// PostgreSQL clients read that DataFusion's `information_schema` lacks or describes in its
/// own terms; `None` for the others (`tables`, `schemata`, ... stay DataFusion's).
fn information_schema_view(table: &str) -> Option<&'static str> {
    Some(match table.to_ascii_lowercase().as_str() {
        "columns" => COLUMNS,
        "table_constraints" => TABLE_CONSTRAINTS,
        "key_column_usage" => KEY_COLUMN_USAGE,
        "referential_constraints" => REFERENTIAL_CONSTRAINTS,
        "constraint_column_usage" => CONSTRAINT_COLUMN_USAGE,
        _ => return None,
    })
}

/// `information_schema.<table> [AS alias]` as the derived table of [`information_schema_view`]
/// (named `alias`, or `<table>`), if it has one.
fn information_schema_table(
    factor: &datafusion::sql::sqlparser::ast::TableFactor,
) -> Option<datafusion::sql::sqlparser::ast::TableFactor> {
    use datafusion::sql::sqlparser::ast::{SetExpr, TableFactor};
    let TableFactor::Table { name, alias, args: None, .. } = factor else { return None };
    let [schema, table] = name.0.as_slice() else { return None };
    let schema = schema.as_ident()?;
    let table = table.as_ident()?;
    if !schema.value.eq_ignore_ascii_case("information_schema") {
        return None;
    }
    let view = information_schema_view(&table.value)?;
    // The text is EbbDB's own; the client's alias is set on the tree.
    let text = format!("SELECT * FROM ({view}) AS {table}");
    let mut q = datafusion::sql::sqlparser::parser::Parser::new(
        &datafusion::sql::sqlparser::dialect::PostgreSqlDialect {},
    )
    .try_with_sql(&text)
    .and_then(|mut p| p.parse_query())
    .ok()?;
    let SetExpr::Select(select) = q.body.as_mut() else { return None };
    let mut from = select.from.pop()?.relation;
    if let (TableFactor::Derived { alias: derived, .. }, Some(alias)) = (&mut from, alias) {
        *derived = Some(alias.clone());
    }
    Some(from)
}

/// Whether `e` computes a text (a function's result, a concatenation), not a column or a
/// literal: an oid column cast to `regclass` stays the number it is (the crate's cast).
fn computes_text(e: &datafusion::sql::sqlparser::ast::Expr) -> bool {
    use datafusion::sql::sqlparser::ast::{BinaryOperator, Expr};
    match e {
        Expr::Function(_) | Expr::BinaryOp { op: BinaryOperator::StringConcat, .. } => true,
        Expr::Nested(inner) | Expr::Cast { expr: inner, .. } => computes_text(inner),
        _ => false,
    }
}

/// The oid of the table a name computed in the query names (`schema.table`, quoted or not),
/// for `CAST(name AS regclass)` of a name that is not a literal; the name is `NULL`'s place.
const REGCLASS_LOOKUP: &str = "(SELECT first_value(k.oid) FROM pg_catalog.pg_class AS k \
     WHERE k.relname = array_element(parse_ident(CAST(NULL AS TEXT)), -1))";

/// `pg_catalog` tables that hold no row in EbbDB: a table has no column defaults
/// (`pg_attrdef`), sequences, triggers, inheritance, row policies, extended statistics,
/// partitions, foreign tables or publications. The crate's copies are empty (a test holds it
/// to that).
const ALWAYS_EMPTY: [&str; 9] = [
    "pg_attrdef",
    "pg_sequence",
    "pg_trigger",
    "pg_inherits",
    "pg_policy",
    "pg_statistic_ext",
    "pg_partitioned_table",
    "pg_foreign_table",
    "pg_publication",
];

/// Whether `q` is a scalar subquery over one of the [`ALWAYS_EMPTY`] tables with no aggregate,
/// which is null (SQLAlchemy's column defaults and identity options: `CASE WHEN
/// a.atthasdef THEN (SELECT pg_get_expr(...) FROM pg_attrdef WHERE a.atthasdef AND ...)`, a
/// correlation DataFusion cannot plan inside `CASE`).
fn over_nothing(q: &datafusion::sql::sqlparser::ast::Query) -> bool {
    use datafusion::sql::sqlparser::ast::{GroupByExpr, SetExpr, TableFactor};
    let SetExpr::Select(select) = q.body.as_ref() else { return false };
    let [from] = select.from.as_slice() else { return false };
    let TableFactor::Table { name, args: None, .. } = &from.relation else { return false };
    let empty = match name.0.as_slice() {
        [schema, table] => {
            schema.to_string().eq_ignore_ascii_case(PG_CATALOG)
                && ALWAYS_EMPTY.contains(&table.to_string().to_ascii_lowercase().as_str())
        }
        _ => false,
    };
    let grouped = !matches!(&select.group_by, GroupByExpr::Expressions(e, _) if e.is_empty());
    empty
        && from.joins.is_empty()
        && !grouped
        && select.having.is_none()
        && !select.projection.iter().any(aggregates)
}

/// Whether `item` calls an aggregate anywhere (`count(*) > 0`, `coalesce(max(x), 0)`): over no
/// rows it is still a row.
fn aggregates(item: &datafusion::sql::sqlparser::ast::SelectItem) -> bool {
    use datafusion::sql::sqlparser::ast::{Expr, Visit, Visitor};
    use std::ops::ControlFlow;
    const AGGREGATES: [&str; 17] = [
        "count",
        "max",
        "min",
        "sum",
        "avg",
        "array_agg",
        "string_agg",
        "json_agg",
        "jsonb_agg",
        "json_object_agg",
        "jsonb_object_agg",
        "bool_and",
        "bool_or",
        "every",
        "first_value",
        "last_value",
        "stddev",
    ];
    struct Finds;
    impl Visitor for Finds {
        type Break = ();
        fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
            if let Expr::Function(f) = expr {
                let name = f.name.to_string().to_ascii_lowercase();
                let name = name.strip_prefix("pg_catalog.").unwrap_or(&name);
                if AGGREGATES.contains(&name) || f.over.is_some() {
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        }
    }
    item.visit(&mut Finds).is_break()
}

/// Whether `f` is `unnest(v)` or `generate_subscripts(v, 1)` of an index's vector column
/// (`pg_index.indkey`, `indclass`, `indcollation`, `indoption`: PostgreSQL's `int2vector` and
/// `oidvector`, which the catalog holds as their text, numbers separated by spaces), as
/// SQLAlchemy's primary key, unique constraint and index queries read them.
fn takes_index_vector(f: &datafusion::sql::sqlparser::ast::Function) -> bool {
    use datafusion::sql::sqlparser::ast::{FunctionArg, FunctionArgExpr, FunctionArguments};
    let name = f.name.to_string().to_ascii_lowercase();
    let name = name.strip_prefix("pg_catalog.").unwrap_or(&name);
    if name != "unnest" && name != "generate_subscripts" {
        return false;
    }
    let FunctionArguments::List(list) = &f.args else { return false };
    let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(e))) = list.args.first() else {
        return false;
    };
    names_column(e, &["indkey", "indclass", "indcollation", "indoption"])
}

/// Whether `e` is a column (`col`, `t.col`) named one of `names`.
fn names_column(e: &datafusion::sql::sqlparser::ast::Expr, names: &[&str]) -> bool {
    use datafusion::sql::sqlparser::ast::Expr;
    let column = match e {
        Expr::Identifier(i) => Some(i),
        Expr::CompoundIdentifier(parts) => parts.last(),
        _ => None,
    };
    column.is_some_and(|c| names.contains(&c.value.to_ascii_lowercase().as_str()))
}

/// The numbers of a constraint's key columns (`pg_constraint.conkey`, `confkey`: PostgreSQL's
/// `int2[]`, which the catalog holds as text such as `[2, 3]`).
fn constraint_keys(
    v: datafusion::sql::sqlparser::ast::Expr,
) -> Option<datafusion::sql::sqlparser::ast::Expr> {
    filled("CAST(string_to_array(replace(btrim(NULL, '[]{}'), ' ', ''), ',') AS BIGINT[])", v)
}

/// The numbers of an index vector's text `v`, as `CAST(string_to_array(v, ' ') AS BIGINT[])`.
fn index_vector(
    v: datafusion::sql::sqlparser::ast::Expr,
) -> Option<datafusion::sql::sqlparser::ast::Expr> {
    filled("CAST(string_to_array(NULL, ' ') AS BIGINT[])", v)
}

/// `unnest(range(1, array_length(numbers) + 1))`: the subscripts of `numbers`, one row each.
fn subscripts(
    numbers: datafusion::sql::sqlparser::ast::Expr,
) -> Option<datafusion::sql::sqlparser::ast::Expr> {
    filled("unnest(range(1, CAST(array_length(NULL) AS BIGINT) + 1))", numbers)
}

/// The fixed expression `text` with its one `NULL` replaced by `arg` (built as a tree: `arg`,
/// a client's, is never parsed again).
fn filled(
    text: &str,
    arg: datafusion::sql::sqlparser::ast::Expr,
) -> Option<datafusion::sql::sqlparser::ast::Expr> {
    use datafusion::sql::sqlparser::ast::{Expr, Value, VisitMut, VisitorMut};
    use std::ops::ControlFlow;
    struct Fill(Option<Expr>);
    impl VisitorMut for Fill {
        type Break = ();
        fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
            if matches!(expr, Expr::Value(v) if v.value == Value::Null) {
                if let Some(arg) = self.0.take() {
                    *expr = arg;
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut out = parse_fixed(text)?;
    let mut fill = Fill(Some(arg));
    let _ = out.visit(&mut fill);
    fill.0.is_none().then_some(out)
}

/// A table's storage options (`pg_class.reloptions`, which the catalog does not have: EbbDB
/// tables have none), as the null array PostgreSQL holds for a table without options.
fn no_options() -> datafusion::sql::sqlparser::ast::Expr {
    use datafusion::sql::sqlparser::ast::{Expr, Value};
    parse_fixed("CAST(NULL AS TEXT[])").unwrap_or(Expr::Value(Value::Null.into()))
}

/// Whether `q` reads the elements of options [`no_options`] stands for (`SELECT 'toast.' || x
/// FROM pg_catalog.unnest(tc.reloptions) x`, psql's `\d+`): the array it makes is empty.
fn unnests_no_options(q: &datafusion::sql::sqlparser::ast::Query) -> bool {
    use datafusion::sql::sqlparser::ast::{FunctionArg, FunctionArgExpr, SetExpr, TableFactor};
    let SetExpr::Select(select) = q.body.as_ref() else { return false };
    let [from] = select.from.as_slice() else { return false };
    let TableFactor::Table { name, args: Some(args), .. } = &from.relation else { return false };
    let unnest = name.0.last().is_some_and(|p| p.to_string().eq_ignore_ascii_case("unnest"));
    unnest
        && from.joins.is_empty()
        && matches!(args.args.as_slice(), [FunctionArg::Unnamed(FunctionArgExpr::Expr(e))] if *e == no_options())
}

/// A scalar subquery over `pg_catalog` with one column and no aggregate (pgjdbc's
/// `getTypeInfo`: `(SELECT c.relkind = 'c' FROM pg_class c WHERE c.oid = t.typrelid)`), which
/// PostgreSQL runs as a lookup of at most one row, as `first_value` of that column, which
/// DataFusion plans when it is correlated. Other subqueries are left alone, so a user's
/// subquery of several rows is still refused.
fn one_row_of_catalog(q: &mut datafusion::sql::sqlparser::ast::Query) {
    use datafusion::sql::sqlparser::ast::{Expr, GroupByExpr, SelectItem, SetExpr, TableFactor};
    let SetExpr::Select(select) = q.body.as_mut() else { return };
    // Only `pg_catalog`'s relations (qualified, as the crate's rules leave them): a user's
    // table named `pg_...` keeps PostgreSQL's rule of one row.
    let catalog = select.from.iter().all(|t| match &t.relation {
        TableFactor::Table { name, .. } => match name.0.as_slice() {
            [schema, table] => {
                schema.to_string().eq_ignore_ascii_case(PG_CATALOG)
                    && pg::PG_CATALOG_TABLES
                        .contains(&table.to_string().to_ascii_lowercase().as_str())
            }
            _ => false,
        },
        _ => false,
    });
    let grouped = !matches!(&select.group_by, GroupByExpr::Expressions(e, _) if e.is_empty());
    if !catalog || select.from.is_empty() || grouped || select.having.is_some() {
        return;
    }
    let [SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. }] =
        select.projection.as_mut_slice()
    else {
        return;
    };
    // Already one row: an aggregate at the top.
    if let Expr::Function(f) = e {
        let name = f.name.to_string().to_ascii_lowercase();
        if ["count", "max", "min", "sum", "array_agg", "first_value", "bool_and", "bool_or"]
            .contains(&name.as_str())
        {
            return;
        }
    }
    if let Some(first) = call("first_value", e.clone()) {
        *e = first;
    }
}

/// `pg_size_pretty(bigint)` as PostgreSQL writes sizes (`8192 bytes`, `12 kB`, `3 MB`).
fn size_pretty() -> datafusion::logical_expr::ScalarUDF {
    use datafusion::arrow::array::{Array, Int64Array};
    let f = |args: &[ColumnarValue]| {
        let args = ColumnarValue::values_to_arrays(args)?;
        let sizes = datafusion::arrow::compute::cast(&args[0], &DataType::Int64)?;
        let sizes = sizes
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| DataFusionError::Internal("pg_size_pretty: not a bigint".into()))?;
        let out: StringArray =
            (0..sizes.len()).map(|i| (!sizes.is_null(i)).then(|| pretty(sizes.value(i)))).collect();
        Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
    };
    create_udf(
        "pg_size_pretty",
        vec![DataType::Int64],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(f),
    )
}

/// `like_escape(pattern, c)`: a `LIKE` pattern escaped with `c` as the same pattern escaped
/// with a backslash (`pg/_%` with `/` is `pg\\_%`).
fn like_escape() -> datafusion::logical_expr::ScalarUDF {
    use datafusion::arrow::array::Array;
    let f = |args: &[ColumnarValue]| {
        let args = ColumnarValue::values_to_arrays(args)?;
        let text = |a: &ArrayRef| -> datafusion::error::Result<StringArray> {
            let t = datafusion::arrow::compute::cast(a, &DataType::Utf8)?;
            t.as_any()
                .downcast_ref::<StringArray>()
                .cloned()
                .ok_or_else(|| DataFusionError::Internal("like_escape: an argument as text".into()))
        };
        let (patterns, escapes) = (text(&args[0])?, text(&args[1])?);
        let out: StringArray = (0..patterns.len())
            .map(|i| {
                if patterns.is_null(i) || escapes.is_null(i) {
                    return None;
                }
                let escape = escapes.value(i).chars().next();
                let mut out = String::with_capacity(patterns.value(i).len());
                let mut chars = patterns.value(i).chars();
                while let Some(c) = chars.next() {
                    if Some(c) == escape {
                        out.push('\\');
                        out.extend(chars.next());
                    } else if c == '\\' {
                        out.push_str("\\\\");
                    } else {
                        out.push(c);
                    }
                }
                Some(out)
            })
            .collect();
        Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
    };
    create_udf(
        "like_escape",
        vec![DataType::Utf8, DataType::Utf8],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(f),
    )
}

/// `json_build_object(key, value, ...)` as JSON text: keys as strings, numbers and booleans as
/// themselves, null as `null`, anything else as its text.
#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonObject {
    signature: datafusion::logical_expr::Signature,
}

impl JsonObject {
    fn udf() -> datafusion::logical_expr::ScalarUDF {
        let signature = datafusion::logical_expr::Signature::variadic_any(Volatility::Immutable);
        datafusion::logical_expr::ScalarUDF::new_from_impl(JsonObject { signature })
    }
}

impl datafusion::logical_expr::ScalarUDFImpl for JsonObject {
    fn name(&self) -> &str {
        "json_build_object"
    }

    fn signature(&self) -> &datafusion::logical_expr::Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(
        &self,
        args: datafusion::logical_expr::ScalarFunctionArgs,
    ) -> datafusion::error::Result<ColumnarValue> {
        use datafusion::arrow::array::Array;
        if !args.args.len().is_multiple_of(2) {
            return Err(DataFusionError::Plan(
                "json_build_object: takes keys and values in pairs".into(),
            ));
        }
        let rows = args.number_rows;
        let columns = args
            .args
            .iter()
            .map(|a| {
                let a = a.to_array(rows)?;
                let kind = a.data_type().clone();
                let t = datafusion::arrow::compute::cast(&a, &DataType::Utf8)?;
                let t = t.as_any().downcast_ref::<StringArray>().cloned().ok_or_else(|| {
                    DataFusionError::Internal("json_build_object: a value as text".into())
                })?;
                Ok((kind, t))
            })
            .collect::<datafusion::error::Result<Vec<_>>>()?;
        let out: StringArray = (0..rows)
            .map(|i| {
                let mut object = serde_json::Map::new();
                for pair in columns.chunks(2) {
                    let [(_, key), (kind, value)] = pair else { continue };
                    let key = if key.is_null(i) { String::new() } else { key.value(i).to_string() };
                    let value = if value.is_null(i) {
                        serde_json::Value::Null
                    } else if kind.is_numeric() || *kind == DataType::Boolean {
                        serde_json::from_str(value.value(i))
                            .unwrap_or_else(|_| serde_json::Value::String(value.value(i).into()))
                    } else {
                        serde_json::Value::String(value.value(i).to_string())
                    };
                    object.insert(key, value);
                }
                Some(serde_json::Value::Object(object).to_string())
            })
            .collect();
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

/// A function answering the same value whatever its arguments: null text about what EbbDB
/// does not have (comments, sequences, indexes, views), or true for whether a type, collation
/// or function is visible (all are `pg_catalog`'s, which every session sees).
#[derive(Debug, PartialEq, Eq, Hash)]
struct Fixed {
    name: &'static str,
    value: datafusion::scalar::ScalarValue,
    signature: datafusion::logical_expr::Signature,
}

impl Fixed {
    fn udf(
        name: &'static str,
        value: datafusion::scalar::ScalarValue,
    ) -> datafusion::logical_expr::ScalarUDF {
        let signature = datafusion::logical_expr::Signature::variadic_any(Volatility::Immutable);
        datafusion::logical_expr::ScalarUDF::new_from_impl(Fixed { name, value, signature })
    }

    fn null_text(name: &'static str) -> datafusion::logical_expr::ScalarUDF {
        Fixed::udf(name, datafusion::scalar::ScalarValue::Utf8(None))
    }

    fn visible(name: &'static str) -> datafusion::logical_expr::ScalarUDF {
        Fixed::udf(name, datafusion::scalar::ScalarValue::Boolean(Some(true)))
    }
}

impl datafusion::logical_expr::ScalarUDFImpl for Fixed {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &datafusion::logical_expr::Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(self.value.data_type())
    }

    fn invoke_with_args(
        &self,
        _: datafusion::logical_expr::ScalarFunctionArgs,
    ) -> datafusion::error::Result<ColumnarValue> {
        Ok(ColumnarValue::Scalar(self.value.clone()))
    }
}

/// A size EbbDB does not keep per table (`\\dt+`): null.
fn unknown_size(name: &str) -> datafusion::logical_expr::ScalarUDF {
    // Any one argument: an oid as a client binds it (int4 or int8) or a name.
    let unknown = |_: &[ColumnarValue]| {
        Ok(ColumnarValue::Scalar(datafusion::scalar::ScalarValue::Int64(None)))
    };
    let udf = datafusion::logical_expr::SimpleScalarUDF::new_with_signature(
        name,
        datafusion::logical_expr::Signature::any(1, Volatility::Immutable),
        DataType::Int64,
        Arc::new(unknown),
    );
    datafusion::logical_expr::ScalarUDF::new_from_impl(udf)
}

/// PostgreSQL's rounding: a unit is used once the value is at least 10240 of the one below.
fn pretty(n: i64) -> String {
    let mut v = n as f64;
    for unit in ["bytes", "kB", "MB", "GB", "TB"] {
        if v.abs() < 10240.0 || unit == "TB" {
            return format!("{} {unit}", v.round() as i64);
        }
        v /= 1024.0;
    }
    format!("{n} bytes")
}

/// `information_schema._pg_expandarray(array)`, which pgjdbc's `getPrimaryKeys` and
/// `getIndexInfo` read as `(...).x` and `(...).n`. PostgreSQL's returns a row per element;
/// EbbDB has no indexes (`pg_index` is empty), so its queries only need it to plan: this
/// answers the first element and its position (1), or nulls.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ExpandArray {
    signature: datafusion::logical_expr::Signature,
}

impl ExpandArray {
    fn fields() -> datafusion::arrow::datatypes::Fields {
        vec![Field::new("x", DataType::Int64, true), Field::new("n", DataType::Int64, true)].into()
    }
}

impl datafusion::logical_expr::ScalarUDFImpl for ExpandArray {
    fn name(&self) -> &str {
        "_pg_expandarray"
    }

    fn signature(&self) -> &datafusion::logical_expr::Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Struct(Self::fields()))
    }

    fn invoke_with_args(
        &self,
        args: datafusion::logical_expr::ScalarFunctionArgs,
    ) -> datafusion::error::Result<ColumnarValue> {
        use datafusion::arrow::array::{Array, Int64Array, StructArray};
        let rows = args.number_rows;
        let firsts: Vec<Option<i64>> = match args.args.first() {
            Some(ColumnarValue::Array(a)) => {
                let list = datafusion::arrow::compute::cast(
                    a,
                    &DataType::List(Arc::new(Field::new("item", DataType::Int64, true))),
                )
                .ok();
                (0..rows)
                    .map(|i| {
                        let list = list
                            .as_ref()?
                            .as_any()
                            .downcast_ref::<datafusion::arrow::array::ListArray>()?;
                        if list.is_null(i) {
                            return None;
                        }
                        let v = list.value(i);
                        let v = v.as_any().downcast_ref::<Int64Array>()?;
                        (!v.is_empty() && !v.is_null(0)).then(|| v.value(0))
                    })
                    .collect()
            }
            _ => vec![None; rows],
        };
        let n: Vec<Option<i64>> = firsts.iter().map(|f| f.map(|_| 1)).collect();
        let array = StructArray::try_new(
            Self::fields(),
            vec![Arc::new(Int64Array::from(firsts)), Arc::new(Int64Array::from(n))],
            None,
        )?;
        Ok(ColumnarValue::Array(Arc::new(array)))
    }
}

fn expand_array() -> datafusion::logical_expr::ScalarUDF {
    datafusion::logical_expr::ScalarUDF::new_from_impl(ExpandArray {
        signature: datafusion::logical_expr::Signature::any(1, Volatility::Immutable),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regproc_names_are_rewritten_and_other_text_kept_as_written() {
        assert_eq!(
            regproc_names("SELECT typinput='pg_catalog.array_in'::regproc FROM pg_type"),
            "SELECT typinput='array_in' FROM pg_type"
        );
        assert_eq!(regproc_names("SELECT 'boolin'::regproc"), "SELECT 'boolin'");
        // A quote inside a literal would come back unescaped: the text stays as written.
        let quoted = "SELECT 'it''s' AS x, 'f'::regproc";
        assert_eq!(regproc_names(quoted), quoted);
        let other = "SELECT E'a\\'' , 'f'::regproc";
        assert_eq!(regproc_names(other), other);
        let plain = "SELECT 1";
        assert_eq!(regproc_names(plain), plain);
    }

    fn parsed(sql: &str) -> crate::Result<Vec<String>> {
        let bounds = crate::sql::bounds::SqlBounds::default();
        Ok(crate::sql::bounds::parse(sql, &bounds)?.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn only_catalog_queries_are_rewritten() {
        assert!(is_catalog_query("select * from pg_catalog.pg_class"));
        assert!(is_catalog_query("SELECT 'cpu'::REGCLASS"));
        assert!(is_catalog_query("select table_name from information_schema.tables"));
        assert!(!is_catalog_query("SELECT region FROM cpu"));
        assert!(!is_catalog_query("SELECT 'pg_class' AS name FROM cpu"));
        // A user's correlated subquery and `= ANY(subquery)` stay as DataFusion plans them.
        for sql in [
            "SELECT (SELECT max(v) FROM cpu AS c2 WHERE c2.host = c1.host) FROM cpu AS c1",
            "SELECT * FROM cpu WHERE host = ANY(SELECT host FROM hosts)",
            "SELECT t.arr[1] AS a, m.labels['k'] AS b FROM t, m",
        ] {
            assert_eq!(parsed(sql).expect(sql), vec![sql.to_string()]);
        }
    }

    #[test]
    fn catalog_rewrites_build_trees() {
        let got = parsed(
            "SELECT r.rolname, ARRAY(SELECT b.rolname FROM pg_catalog.pg_roles AS b \
             WHERE b.oid = r.oid) AS memberof FROM pg_catalog.pg_roles AS r",
        )
        .expect("parse");
        assert!(got[0].contains("(SELECT array_agg(b.rolname) FROM"), "{got:?}");
        let got = parsed("SELECT oid FROM pg_type WHERE oid = to_regtype('it''s')").expect("parse");
        assert!(
            got[0].contains("(SELECT oid FROM pg_catalog.pg_type WHERE typname = 'it''s' LIMIT 1)"),
            "{got:?}"
        );
        let got = parsed("SELECT (f(pg_catalog.pg_class.oid)).n FROM pg_catalog.pg_class")
            .expect("parse");
        assert!(got[0].contains(".'n'") || got[0].contains("['n']"), "{got:?}");
    }

    #[test]
    fn what_a_rewrite_makes_is_bounded_as_the_text_is() {
        // A literal the crate splits into array elements, holding a chain the text's check
        // never saw as one: refused, not parsed a second time into a tree deep enough to
        // overflow a stack.
        let chain = format!("{}1", "1+".repeat(100_000));
        for sql in [
            format!("SELECT to_regtype('{{{chain}}}'::int[]) FROM pg_class"),
            format!("SELECT ARRAY(SELECT '{{{chain}}}'::int[] FROM pg_class)"),
        ] {
            assert!(
                matches!(parsed(&sql), Err(crate::QueryError::Limit(_))),
                "{}: {:?}",
                &sql[..40],
                parsed(&sql).map(|v| v.len())
            );
        }
        // An array literal split into more elements than a list may hold.
        let many = vec!["1"; 20_000].join(",");
        let sql = format!("SELECT oid FROM pg_class WHERE oid = ANY('{{{many}}}')");
        assert!(matches!(parsed(&sql), Err(crate::QueryError::Limit(_))));
    }

    /// A server without users.
    #[derive(Debug)]
    struct NoUsers;

    #[async_trait]
    impl AccessStore for NoUsers {
        fn access(&self) -> Arc<crate::access::AccessState> {
            Arc::default()
        }

        async fn write_access(&self, _: Vec<crate::access::AccessOp>) -> crate::Result<()> {
            Ok(())
        }
    }

    /// The one row `sql` answers in a fresh context, its columns as text.
    fn one_row(sql: &str) -> Vec<String> {
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        runtime.block_on(async {
            let ctx = crate::sql::session::new_context("public", false);
            let catalog = Arc::new(datafusion::catalog::MemoryCatalogProvider::new());
            let public = Arc::new(datafusion::catalog::MemorySchemaProvider::new());
            let fields = vec![Field::new("v", DataType::Float64, true)];
            let table = datafusion::datasource::MemTable::try_new(
                Arc::new(datafusion::arrow::datatypes::Schema::new(fields)),
                vec![vec![]],
            )
            .expect("table");
            public.register_table("cpu".into(), Arc::new(table)).expect("cpu");
            catalog.register_schema("public", public).expect("public");
            let pg = schema(catalog.clone(), Arc::new(NoUsers), "public", None).expect("schema");
            catalog.register_schema(PG_CATALOG, pg).expect("pg_catalog");
            ctx.register_catalog(crate::sql::CATALOG, catalog);
            let mut statements = parsed(sql).expect("parse");
            let batches =
                ctx.sql(&statements.remove(0)).await.expect("plan").collect().await.expect("run");
            let batch = &batches[0];
            (0..batch.num_columns())
                .map(|c| {
                    datafusion::arrow::util::display::array_value_to_string(batch.column(c), 0)
                        .expect("text")
                })
                .collect()
        })
    }

    #[test]
    fn json_objects_and_escaped_patterns() {
        assert_eq!(
            one_row("SELECT json_build_object('a', 1, 'b', 'x\"y', 'c', NULL, 'd', true)"),
            vec![r#"{"a":1,"b":"x\"y","c":null,"d":true}"#.to_string()]
        );
        // SQLAlchemy's schema names: `LIKE ... ESCAPE '/'` in a catalog query (one naming a
        // `pg_` function).
        assert_eq!(
            one_row(
                "SELECT 'pg_x' LIKE 'pg/_%' ESCAPE '/', 'pgax' LIKE 'pg/_%' ESCAPE '/', \
                 'a\\b' LIKE 'a\\b' ESCAPE '/', pg_size_pretty(1)"
            ),
            vec!["true", "false", "true", "1 bytes"]
        );
    }

    #[test]
    fn names_a_rewrite_expands_are_bounded_before_it_is_made() {
        // 4 MiB of `information_schema.columns` would be about 250 MB once each is a query.
        let many = vec!["information_schema.columns"; 100_000].join(", ");
        let sql = format!("SELECT 1 FROM {many}");
        assert!(matches!(parsed(&sql), Err(crate::QueryError::Limit(_))));
        // What clients send is far below it.
        let metabase = "SELECT c.column_name FROM information_schema.columns AS c \
                        LEFT JOIN information_schema.key_column_usage AS k ON true";
        assert!(parsed(metabase).is_ok());
    }

    #[test]
    fn tables_ebbdb_never_fills_are_empty_and_their_subqueries_null() {
        for table in ALWAYS_EMPTY {
            let count = one_row(&format!("SELECT count(*) FROM pg_catalog.{table}"));
            assert_eq!(count, vec!["0"], "{table}");
        }
        // SQLAlchemy's column defaults: a subquery correlated inside `CASE`.
        let sql = "SELECT a.attname, CASE WHEN a.atthasdef THEN (SELECT \
                   pg_catalog.pg_get_expr(d.adbin, d.adrelid) FROM pg_catalog.pg_attrdef d \
                   WHERE a.atthasdef AND d.adrelid = a.attrelid AND d.adnum = a.attnum) \
                   ELSE NULL END FROM pg_catalog.pg_attribute a";
        assert_eq!(one_row(sql)[1], "");
        // An aggregate over no rows is a row: kept, wherever it is in the select list.
        for sub in ["count(*)", "count(*) > 0", "coalesce(max(adnum), 0)"] {
            let sql = format!(
                "SELECT (SELECT {sub} FROM pg_catalog.pg_attrdef) FROM pg_catalog.pg_class"
            );
            let got = parsed(&sql).expect("parse");
            assert!(got[0].contains("pg_attrdef"), "{got:?}");
        }
    }

    #[test]
    fn index_vectors_read_as_numbers_and_options_as_none() {
        // pgjdbc's and SQLAlchemy's index columns: PostgreSQL's own index 827 is on (2, 3, 4).
        let sql = "SELECT array_agg(k ORDER BY o), array_agg(o ORDER BY o) FROM (SELECT \
                   unnest(i.indkey) AS k, generate_subscripts(i.indkey, 1) AS o \
                   FROM pg_catalog.pg_index i WHERE i.indexrelid = 827) AS t";
        assert_eq!(one_row(sql), vec!["[2, 3, 4]", "[1, 2, 3]"]);
        // psql's `\d+`.
        let sql = "SELECT pg_catalog.array_to_string(c.reloptions || array(select 'toast.' || x \
                   from pg_catalog.unnest(tc.reloptions) x), ', ') FROM pg_catalog.pg_class c \
                   LEFT JOIN pg_catalog.pg_class tc ON (c.reltoastrelid = tc.oid)";
        assert_eq!(one_row(sql), vec![""]);
    }

    #[test]
    fn sizes_read_as_postgresql_writes_them() {
        assert_eq!(pretty(8192), "8192 bytes");
        assert_eq!(pretty(20_000), "20 kB");
        assert_eq!(pretty(5 * 1024 * 1024), "5120 kB");
        assert_eq!(pretty(50 * 1024 * 1024), "50 MB");
    }
}
