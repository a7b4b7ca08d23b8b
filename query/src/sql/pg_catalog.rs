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

/// The schema's name.
pub const PG_CATALOG: &str = "pg_catalog";

/// The server version PostgreSQL clients are told (`server_version`, `version()`): the
/// protocol and catalog EbbDB speaks are PostgreSQL 16's.
pub const PG_VERSION: &str = "16.6";

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
        let Some(s) = self.schema(catalog, schema) else { return Ok(None) };
        s.table_type(table).await
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
    Ok(Arc::new(pg::PgCatalogSchemaProvider::try_new(listing, static_tables()?, roles)?))
}

/// Adds the functions and planners every session shares to `state` (once per process).
pub fn register_shared(state: SessionState) -> SessionState {
    let ctx = SessionContext::new_with_state(state);
    for udf in [
        pg::create_pg_get_userbyid_udf(),
        pg::has_privilege_udf::create_has_privilege_udf("has_table_privilege"),
        pg::has_privilege_udf::create_has_privilege_udf("has_schema_privilege"),
        pg::has_privilege_udf::create_has_privilege_udf("has_database_privilege"),
        pg::has_privilege_udf::create_has_privilege_udf("has_any_column_privilege"),
        pg::create_pg_table_is_visible(),
        pg::format_type::create_format_type_udf(),
        pg::pg_get_expr_udf::create_pg_get_expr_udf(),
        pg::create_pg_get_partkeydef_udf(),
        pg::create_pg_relation_is_publishable_udf(),
        pg::create_pg_get_statisticsobjdef_columns_udf(),
        pg::create_pg_encoding_to_char_udf(),
        pg::create_pg_backend_pid_udf(),
        pg::create_pg_relation_size_udf(),
        pg::create_pg_total_relation_size_udf(),
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
        unknown_size("pg_indexes_size"),
        NullText::udf("obj_description"),
        NullText::udf("col_description"),
        NullText::udf("shobj_description"),
        NullText::udf("pg_get_serial_sequence"),
        NullText::udf("pg_get_indexdef"),
        NullText::udf("pg_get_viewdef"),
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
/// `current_schema()`, `current_schemas(bool)`) and its user (`session_user`, `current_user`).
pub fn register_session(ctx: &SessionContext, database: &str, user: &str) {
    ctx.register_udf(constant("current_database", database.to_string()));
    ctx.register_udf(constant("current_schema", database.to_string()));
    ctx.register_udf(constant("session_user", user.to_string()));
    ctx.register_udf(constant("current_user", user.to_string()));
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
        Ok(ColumnarValue::Array(Arc::new(list.build_list_array()) as ArrayRef))
    };
    ctx.register_udf(create_udf(
        "current_schemas",
        vec![DataType::Boolean],
        DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
        Volatility::Immutable,
        Arc::new(schemas),
    ));
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

/// EbbDB's rewrites of what PostgreSQL clients send, beside the crate's:
///
/// - `ARRAY(SELECT e FROM ...)` (psql's `\du`, DBeaver's role lists) as the scalar subquery
///   `(SELECT array_agg(e) FROM ...)`, which DataFusion plans, correlated or not (a subquery
///   with more than one column, or with `ORDER BY`, `LIMIT` or `GROUP BY`, stays as it is);
/// - a field of a composite value, `(expr).field` (pgjdbc's `getPrimaryKeys`), as
///   `(expr)['field']`, the form DataFusion plans.
fn own_rewrites(mut statement: Statement) -> Statement {
    use datafusion::sql::sqlparser::ast::{
        AccessExpr, Expr, FunctionArguments, SelectItem, SetExpr, Value, VisitMut, VisitorMut,
    };
    use std::ops::ControlFlow;
    struct ArraySubquery;
    impl VisitorMut for ArraySubquery {
        type Break = ();
        fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
            if let Expr::CompoundFieldAccess { access_chain, .. } = expr {
                for access in access_chain.iter_mut() {
                    if let AccessExpr::Dot(Expr::Identifier(i)) = access {
                        let name = Value::SingleQuotedString(i.value.clone());
                        *access = AccessExpr::Dot(Expr::Value(name.into()));
                    }
                }
                return ControlFlow::Continue(());
            }
            if let Expr::Subquery(q) = expr {
                one_row_of_catalog(q);
                return ControlFlow::Continue(());
            }
            let Expr::Function(f) = expr else { return ControlFlow::Continue(()) };
            if f.name.to_string().eq_ignore_ascii_case("to_regtype") {
                if let FunctionArguments::List(list) = &f.args {
                    if let [datafusion::sql::sqlparser::ast::FunctionArg::Unnamed(
                        datafusion::sql::sqlparser::ast::FunctionArgExpr::Expr(arg),
                    )] = list.args.as_slice()
                    {
                        let lookup = format!(
                            "(SELECT oid FROM pg_catalog.pg_type WHERE typname = {arg} LIMIT 1)"
                        );
                        if let Ok(e) = datafusion::sql::sqlparser::parser::Parser::new(
                            &datafusion::sql::sqlparser::dialect::PostgreSqlDialect {},
                        )
                        .try_with_sql(&lookup)
                        .and_then(|mut p| p.parse_expr())
                        {
                            *expr = e;
                        }
                    }
                }
                return ControlFlow::Continue(());
            }
            let FunctionArguments::Subquery(q) = &f.args else { return ControlFlow::Continue(()) };
            if !f.name.to_string().eq_ignore_ascii_case("array")
                || q.order_by.is_some()
                || q.limit_clause.is_some()
            {
                return ControlFlow::Continue(());
            }
            let mut q = q.clone();
            let SetExpr::Select(select) = q.body.as_mut() else { return ControlFlow::Continue(()) };
            let grouped = !matches!(
                &select.group_by,
                datafusion::sql::sqlparser::ast::GroupByExpr::Expressions(e, _) if e.is_empty()
            );
            let [SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. }] =
                select.projection.as_mut_slice()
            else {
                return ControlFlow::Continue(());
            };
            if grouped {
                return ControlFlow::Continue(());
            }
            let agg = format!("array_agg({e})");
            let Ok(parsed) = datafusion::sql::sqlparser::parser::Parser::new(
                &datafusion::sql::sqlparser::dialect::PostgreSqlDialect {},
            )
            .try_with_sql(&agg)
            .and_then(|mut p| p.parse_expr()) else {
                return ControlFlow::Continue(());
            };
            *e = parsed;
            *expr = Expr::Subquery(q);
            ControlFlow::Continue(())
        }
    }
    let _ = statement.visit(&mut ArraySubquery);
    statement
}

/// A scalar subquery over `pg_catalog` with one column and no aggregate (pgjdbc's
/// `getTypeInfo`: `(SELECT c.relkind = 'c' FROM pg_class c WHERE c.oid = t.typrelid)`), which
/// PostgreSQL runs as a lookup of at most one row, as `first_value` of that column, which
/// DataFusion plans when it is correlated. Other subqueries are left alone, so a user's
/// subquery of several rows is still refused.
fn one_row_of_catalog(q: &mut datafusion::sql::sqlparser::ast::Query) {
    use datafusion::sql::sqlparser::ast::{GroupByExpr, SelectItem, SetExpr, TableFactor};
    let SetExpr::Select(select) = q.body.as_mut() else { return };
    let catalog = select.from.iter().all(|t| match &t.relation {
        TableFactor::Table { name, .. } => {
            let n = name.to_string().to_ascii_lowercase();
            n.starts_with("pg_catalog.") || n.starts_with("pg_")
        }
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
    let text = e.to_string();
    let lower = text.to_ascii_lowercase();
    // Already one row: an aggregate (a crude test; an aggregate inside stays as it is).
    if ["count(", "max(", "min(", "sum(", "array_agg(", "first_value(", "bool_"]
        .iter()
        .any(|a| lower.contains(a))
    {
        return;
    }
    if let Ok(parsed) = datafusion::sql::sqlparser::parser::Parser::new(
        &datafusion::sql::sqlparser::dialect::PostgreSqlDialect {},
    )
    .try_with_sql(&format!("first_value({text})"))
    .and_then(|mut p| p.parse_expr())
    {
        *e = parsed;
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

/// A text function about what EbbDB does not have (comments, sequences, indexes, views):
/// null, whatever its arguments.
#[derive(Debug, PartialEq, Eq, Hash)]
struct NullText {
    name: &'static str,
    signature: datafusion::logical_expr::Signature,
}

impl NullText {
    fn udf(name: &'static str) -> datafusion::logical_expr::ScalarUDF {
        let signature = datafusion::logical_expr::Signature::variadic_any(Volatility::Immutable);
        datafusion::logical_expr::ScalarUDF::new_from_impl(NullText { name, signature })
    }
}

impl datafusion::logical_expr::ScalarUDFImpl for NullText {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &datafusion::logical_expr::Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(
        &self,
        _: datafusion::logical_expr::ScalarFunctionArgs,
    ) -> datafusion::error::Result<ColumnarValue> {
        Ok(ColumnarValue::Scalar(datafusion::scalar::ScalarValue::Utf8(None)))
    }
}

/// A size EbbDB does not keep per table (`\\dt+`): null.
fn unknown_size(name: &str) -> datafusion::logical_expr::ScalarUDF {
    create_udf(
        name,
        vec![DataType::Int32],
        DataType::Int64,
        Volatility::Immutable,
        Arc::new(|_: &[ColumnarValue]| {
            Ok(ColumnarValue::Scalar(datafusion::scalar::ScalarValue::Int64(None)))
        }),
    )
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

    #[test]
    fn sizes_read_as_postgresql_writes_them() {
        assert_eq!(pretty(8192), "8192 bytes");
        assert_eq!(pretty(20_000), "20 kB");
        assert_eq!(pretty(5 * 1024 * 1024), "5120 kB");
        assert_eq!(pretty(50 * 1024 * 1024), "50 MB");
    }
}
