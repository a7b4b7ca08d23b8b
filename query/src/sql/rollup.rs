//! `CREATE MATERIALIZED VIEW name [WITH (retention = '90d')] AS SELECT date_bin(INTERVAL
//! '1 hour', time) AS time, tag, ..., agg(field) AS out, ... FROM source GROUP BY 1, tag, ...`:
//! reading a rollup's definition, and the plan that reads a rollup by merging its stored
//! partials (see [`crate::model::rollup`]).
//!
//! The aggregates are `count(*)`, `count(field)`, `sum`, `min`, `max` and `avg` of numeric
//! fields; buckets are fixed widths (`date_bin` with an interval of weeks or less, and an
//! optional origin). The source is one table of the rollup's database, unfiltered.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::view::ViewTable;
use datafusion::catalog::Session;
use datafusion::error::DataFusionError;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{LogicalPlan, TableProviderFilterPushDown, TableType};
use datafusion::physical_plan::ExecutionPlan;

use datafusion::arrow::datatypes::DataType;
use datafusion::catalog::TableProvider;
use datafusion::common::Column;
use datafusion::datasource::provider_as_source;
use datafusion::error::Result as DfResult;
use datafusion::functions::core::expr_fn::nullif;
use datafusion::functions_aggregate::expr_fn::{max, min, sum};
use datafusion::logical_expr::{cast, lit, Expr, LogicalPlanBuilder};
use datafusion::sql::sqlparser::ast::{
    CreateTableOptions, CreateView, Expr as SqlExpr, FunctionArg, FunctionArgExpr,
    FunctionArguments, GroupByExpr, SelectItem, SetExpr, TableFactor, Value as SqlValue,
};

use super::ddl::{ident, parse_retention, retention_option, table_name};
use crate::error::{QueryError, Result};
use crate::model::rollup::{Agg, OutputColumn, RollupDef, RollupOutput};
use crate::model::schema::TIME_COLUMN;

/// What a `CREATE MATERIALIZED VIEW` asks for.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RollupSpec {
    /// Database (the rollup's and its source's).
    pub database: String,
    /// The rollup's name.
    pub name: String,
    /// What it computes.
    pub def: RollupDef,
    /// Retention, if given (`Some(None)`: explicitly none); else the source's.
    pub retention: Option<Option<Duration>>,
    /// `IF NOT EXISTS`.
    pub if_not_exists: bool,
}

fn bad(msg: impl std::fmt::Display) -> QueryError {
    QueryError::invalid(format!("rollup: {msg}"))
}

/// Reads a `CREATE MATERIALIZED VIEW` statement.
pub fn rollup_spec(cv: &CreateView, db: &str) -> Result<RollupSpec> {
    let (database, name) = table_name(&cv.name, db)?;
    if cv.or_replace || cv.or_alter || !cv.columns.is_empty() || cv.to.is_some() {
        return Err(QueryError::Unsupported(
            "OR REPLACE, column lists and TO in CREATE MATERIALIZED VIEW; drop the rollup and \
             create it again"
                .into(),
        ));
    }
    let retention = match &cv.options {
        CreateTableOptions::None => None,
        CreateTableOptions::With(o) | CreateTableOptions::Options(o) => retention_option(o)?,
        other => return Err(QueryError::Unsupported(format!("options {other}; use WITH (...)"))),
    };
    let q = &cv.query;
    if q.with.is_some() || q.order_by.is_some() || q.limit_clause.is_some() || q.fetch.is_some() {
        return Err(bad("the SELECT may not have WITH, ORDER BY, LIMIT or FETCH"));
    }
    let SetExpr::Select(select) = q.body.as_ref() else {
        return Err(bad("the definition must be one SELECT ... FROM table GROUP BY ..."));
    };
    if select.selection.is_some() || select.having.is_some() || select.distinct.is_some() {
        return Err(bad("the SELECT may not filter (WHERE, HAVING) or be DISTINCT"));
    }
    let source = match select.from.as_slice() {
        [t] if t.joins.is_empty() => match &t.relation {
            TableFactor::Table { name, args: None, .. } => table_name(name, db)?,
            _ => return Err(bad("FROM must name one table")),
        },
        _ => return Err(bad("FROM must name one table, without joins")),
    };
    if source.0 != database {
        return Err(bad(format!(
            "the source {}.{} must be in the rollup's database {database}",
            source.0, source.1
        )));
    }
    let mut def = RollupDef {
        source: source.1,
        bucket_ns: 0,
        origin_ns: 0,
        time_name: TIME_COLUMN.to_string(),
        group: Vec::new(),
        outputs: Vec::new(),
        order: Vec::new(),
        definition: q.to_string(),
    };
    // Projection: the bucket, tags, aggregates.
    let mut bucket_expr = None;
    for item in &select.projection {
        let (e, alias) = match item {
            SelectItem::UnnamedExpr(e) => (e, None),
            SelectItem::ExprWithAlias { expr, alias } => (expr, Some(ident(alias))),
            _ => return Err(bad("list the bucket, tags and aggregates (no *)")),
        };
        match e {
            SqlExpr::Identifier(i) => {
                if alias.as_ref().is_some_and(|a| *a != ident(i)) {
                    return Err(bad(format!("tag {} keeps its name (no alias)", ident(i))));
                }
                def.order.push(OutputColumn::Tag(def.group.len()));
                def.group.push(ident(i));
            }
            SqlExpr::Function(f) => {
                let fname = f.name.to_string().to_ascii_lowercase();
                let args = function_args(&f.args)?;
                if fname == "date_bin" {
                    if bucket_expr.is_some() {
                        return Err(bad("one date_bin bucket only"));
                    }
                    (def.bucket_ns, def.origin_ns) = bucket(&args)?;
                    if let Some(a) = alias {
                        def.time_name = a;
                    }
                    bucket_expr = Some(e.clone());
                    def.order.push(OutputColumn::Bucket);
                    continue;
                }
                let agg = Agg::from_name(&fname).ok_or_else(|| {
                    bad(format!("{fname}: a rollup keeps count, sum, min, max and avg"))
                })?;
                let field = match args.as_slice() {
                    [None] if agg == Agg::Count => None,
                    [Some(SqlExpr::Identifier(i))] => Some(ident(i)),
                    _ => return Err(bad(format!("{fname} takes one field"))),
                };
                let name = alias.unwrap_or_else(|| match &field {
                    Some(f) => format!("{}_{f}", agg.name()),
                    None => agg.name().to_string(),
                });
                def.order.push(OutputColumn::Output(def.outputs.len()));
                def.outputs.push(RollupOutput { name, agg, field });
            }
            other => return Err(bad(format!("{other} is not a bucket, tag or aggregate"))),
        }
    }
    let Some(bucket_expr) = bucket_expr else {
        return Err(bad("the SELECT needs a bucket: date_bin(INTERVAL '...', time) AS time"));
    };
    if def.outputs.is_empty() {
        return Err(bad("the SELECT needs at least one aggregate"));
    }
    // GROUP BY: the bucket and every tag, by expression, name or position.
    let GroupByExpr::Expressions(exprs, mods) = &select.group_by else {
        return Err(bad("GROUP BY ALL is not supported; list the bucket and the tags"));
    };
    if !mods.is_empty() {
        return Err(bad("GROUP BY modifiers are not supported"));
    }
    let mut grouped = vec![false; def.order.len()];
    for g in exprs {
        let at = match g {
            SqlExpr::Value(v) => match &v.value {
                SqlValue::Number(n, _) => n.parse::<usize>().ok().and_then(|n| n.checked_sub(1)),
                _ => None,
            },
            SqlExpr::Identifier(i) => {
                let n = ident(i);
                def.order.iter().position(|c| match c {
                    OutputColumn::Bucket => n == def.time_name,
                    OutputColumn::Tag(t) => def.group[*t] == n,
                    OutputColumn::Output(_) => false,
                })
            }
            e if *e == bucket_expr => def.order.iter().position(|c| *c == OutputColumn::Bucket),
            _ => None,
        };
        match at.and_then(|i| def.order.get(i).map(|c| (i, c))) {
            Some((i, OutputColumn::Bucket | OutputColumn::Tag(_))) => grouped[i] = true,
            _ => return Err(bad(format!("GROUP BY {g}: group by the bucket and tags only"))),
        }
    }
    for (i, c) in def.order.iter().enumerate() {
        if !grouped[i] && !matches!(c, OutputColumn::Output(_)) {
            return Err(bad("GROUP BY must list the bucket and every tag selected"));
        }
    }
    let mut names: Vec<&str> = vec![def.time_name.as_str()];
    names.extend(def.group.iter().map(String::as_str));
    names.extend(def.outputs.iter().map(|o| o.name.as_str()));
    let mut sorted = names.clone();
    sorted.sort_unstable();
    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(bad(format!("two columns are named {:?}; give them aliases", w[0])));
    }
    Ok(RollupSpec { database, name, def, retention, if_not_exists: cv.if_not_exists })
}

/// Function arguments as expressions (`None`: `*`).
fn function_args(args: &FunctionArguments) -> Result<Vec<Option<SqlExpr>>> {
    let FunctionArguments::List(list) = args else {
        return Err(bad("functions need an argument list"));
    };
    if list.duplicate_treatment.is_some() || !list.clauses.is_empty() {
        return Err(bad("DISTINCT and clauses inside aggregates are not supported"));
    }
    list.args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Ok(Some(e.clone())),
            FunctionArg::Unnamed(FunctionArgExpr::Wildcard) => Ok(None),
            other => Err(bad(format!("argument {other} is not supported"))),
        })
        .collect()
}

/// `(width, origin)` in ns of `date_bin(INTERVAL '...', time [, 'origin'])`.
fn bucket(args: &[Option<SqlExpr>]) -> Result<(i64, i64)> {
    let (width, on, origin) = match args {
        [Some(w), Some(on)] => (w, on, None),
        [Some(w), Some(on), Some(o)] => (w, on, Some(o)),
        _ => return Err(bad("date_bin takes an interval, time and optionally an origin")),
    };
    if !matches!(on, SqlExpr::Identifier(i) if ident(i) == TIME_COLUMN) {
        return Err(bad("date_bin must bucket the time column"));
    }
    let text = match width {
        SqlExpr::Interval(iv) => {
            let v = match iv.value.as_ref() {
                SqlExpr::Value(v) => match &v.value {
                    SqlValue::SingleQuotedString(s) => s.clone(),
                    SqlValue::Number(n, _) => n.clone(),
                    other => other.to_string(),
                },
                other => other.to_string(),
            };
            match &iv.leading_field {
                Some(unit) => format!("{v}{unit}"),
                None => v,
            }
        }
        SqlExpr::Value(v) => match &v.value {
            SqlValue::SingleQuotedString(s) => s.clone(),
            _ => return Err(bad("the bucket width must be an interval")),
        },
        _ => return Err(bad("the bucket width must be an interval such as INTERVAL '1 hour'")),
    };
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let width = match parse_retention(&compact) {
        Ok(Some(d)) => d,
        _ => {
            return Err(bad(format!(
                "bucket width {text:?}: give seconds, minutes, hours, days or weeks (for \
                 example INTERVAL '5 minutes')"
            )))
        }
    };
    let width = i64::try_from(width.as_nanos()).map_err(|_| bad("bucket width too large"))?;
    let origin = match origin {
        None => 0,
        Some(SqlExpr::Value(v)) => match &v.value {
            SqlValue::SingleQuotedString(s) => {
                datafusion::arrow::compute::kernels::cast_utils::string_to_timestamp_nanos(s)
                    .map_err(|e| bad(format!("origin {s:?}: {e}")))?
            }
            _ => return Err(bad("the origin must be a timestamp string")),
        },
        Some(SqlExpr::TypedString(t)) => match &t.value.value {
            SqlValue::SingleQuotedString(s) => {
                datafusion::arrow::compute::kernels::cast_utils::string_to_timestamp_nanos(s)
                    .map_err(|e| bad(format!("origin {s:?}: {e}")))?
            }
            _ => return Err(bad("the origin must be a timestamp string")),
        },
        Some(_) => return Err(bad("the origin must be a timestamp string")),
    };
    Ok((width, origin))
}

/// The plan that reads rollup `name` (defined by `def`) from `partials`, the table of its
/// stored partials: grouped by bucket and the rollup's tags, partials merged.
pub fn rollup_view(
    name: &str,
    def: &RollupDef,
    partials: Arc<dyn TableProvider>,
) -> DfResult<Arc<dyn TableProvider>> {
    let c = |n: &str| Expr::Column(Column::from_name(n));
    let scan = LogicalPlanBuilder::scan(name, provider_as_source(partials), None)?;
    let mut group = vec![c(TIME_COLUMN)];
    group.extend(def.group.iter().map(|t| c(t)));
    let mut aggs = Vec::new();
    for (i, o) in def.outputs.iter().enumerate() {
        let p = o.partial_names();
        match o.agg {
            Agg::Count | Agg::Sum => aggs.push(sum(c(&p[0])).alias(format!("p{i}"))),
            Agg::Min => aggs.push(min(c(&p[0])).alias(format!("p{i}"))),
            Agg::Max => aggs.push(max(c(&p[0])).alias(format!("p{i}"))),
            Agg::Avg => {
                aggs.push(sum(c(&p[0])).alias(format!("p{i}")));
                aggs.push(sum(c(&p[1])).alias(format!("p{i}n")));
            }
        }
    }
    let mut project = Vec::new();
    for col in &def.order {
        project.push(match *col {
            OutputColumn::Bucket => c(TIME_COLUMN).alias(&def.time_name),
            OutputColumn::Tag(t) => c(&def.group[t]),
            OutputColumn::Output(i) => {
                let o = &def.outputs[i];
                let p = c(&format!("p{i}"));
                match o.agg {
                    Agg::Avg => (cast(p, DataType::Float64)
                        / cast(nullif(c(&format!("p{i}n")), lit(0i64)), DataType::Float64))
                    .alias(&o.name),
                    _ => p.alias(&o.name),
                }
            }
        });
    }
    let plan = scan.aggregate(group, aggs)?.project(project)?.build()?;
    let view = ViewTable::new(plan, Some(def.definition.clone()));
    Ok(Arc::new(RollupView { view, name: name.to_string(), source: def.source.clone() }))
}

/// A rollup as it is read: a view over its partials, which refuses writes with a reason.
#[derive(Debug)]
struct RollupView {
    view: ViewTable,
    name: String,
    source: String,
}

#[async_trait]
impl TableProvider for RollupView {
    fn get_logical_plan(&self) -> Option<Cow<'_, LogicalPlan>> {
        self.view.get_logical_plan()
    }

    fn schema(&self) -> SchemaRef {
        self.view.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    fn get_table_definition(&self) -> Option<&str> {
        self.view.get_table_definition()
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        self.view.supports_filters_pushdown(filters)
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.view.scan(state, projection, filters, limit).await
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        _input: Arc<dyn ExecutionPlan>,
        _op: InsertOp,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Err(DataFusionError::Plan(format!(
            "{} is a rollup of {}, kept from it; write to {}",
            self.name, self.source, self.source
        )))
    }
}
