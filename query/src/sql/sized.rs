//! Scalar functions whose results can be far larger than their arguments stay within the
//! statement's memory limit.
//!
//! DataFusion's memory pool sees what operators reserve (sorts, joins, aggregates), not what a
//! scalar function allocates: `repeat('x', 1000000000)` builds a gigabyte in one call. So the
//! functions whose output is not bounded by their input's size (`repeat`, `lpad`, `rpad`,
//! `array_repeat`, `array_resize`, `range`, `generate_series`, of numbers, dates or timestamps)
//! are replaced by wrappers that compute the
//! size their result would have from their arguments and refuse a call past the limit before
//! it allocates; those whose output is bounded by a multiple of their input (`concat`,
//! `concat_ws`, `replace`, `regexp_replace`, `overlay`, `translate`, `array_concat`, and the
//! `||` operator through [`CappedConcat`]) are checked on their result, so a chain of them
//! stops at the first result past the limit. A refusal is a `Resources exhausted` error naming
//! `query_memory`, like an operator's.
//!
//! A function whose time grows faster than its input, `levenshtein` (the product of its
//! arguments' lengths), runs in one call that neither the statement's deadline nor a client
//! that leaves can interrupt: a call of more than [`MAX_PAIRS`] character pairs is refused as
//! the statement's error.

use std::any::Any;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::compute::kernels::length::length;
use datafusion::arrow::datatypes::{
    DataType, FieldRef, Int64Type, IntervalMonthDayNanoType, IntervalUnit, TimeUnit,
};
use datafusion::arrow::error::ArrowError;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DataFusionError, ExprSchema, Result, ScalarValue};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, Expr, Operator, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};
use datafusion::prelude::SessionContext;

/// How a wrapped function's result size is foreseen from its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Foresee {
    /// `repeat(s, n)`: the bytes of `s`, `n` times.
    Repeat,
    /// `lpad`/`rpad(s, n[, fill])`: `n` characters of up to 4 bytes.
    Pad,
    /// `array_repeat(v, n)`: `n` values.
    ArrayRepeat,
    /// `array_resize(a, n[, fill])`: `n` values.
    Resize,
    /// `range`/`generate_series`, of numbers or of dates and timestamps: one value per step.
    Steps,
    /// Bounded by its input: its result is checked.
    Result,
    /// `levenshtein(a, b)`: small result, but time in proportion to the product of its
    /// arguments' lengths, in one call that no deadline interrupts.
    Pairs,
}

/// Most character pairs one `levenshtein` call (one batch of rows) may compare: a few seconds.
pub const MAX_PAIRS: u128 = 1_000_000_000;

/// A scalar function within a statement's memory limit.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Sized {
    inner: Arc<ScalarUDF>,
    foresee: Foresee,
    limit: usize,
}

fn too_large(name: &str, bytes: u128, limit: usize) -> DataFusionError {
    DataFusionError::ResourcesExhausted(format!(
        "{name}() would build about {} MiB, more than the statement's {} MiB (query_memory)",
        bytes >> 20,
        limit >> 20
    ))
}

/// Argument `i` as one value per row, as i64 (`None`: not a number, or missing).
fn ints(args: &ScalarFunctionArgs, i: usize) -> Option<Vec<i64>> {
    let rows = args.number_rows.max(1);
    let array = match args.args.get(i)? {
        ColumnarValue::Array(a) => a.clone(),
        ColumnarValue::Scalar(s) => s.to_array_of_size(1).ok()?,
    };
    if !array.data_type().is_integer() {
        return None;
    }
    let values = cast(&array, &DataType::Int64).ok()?;
    let values = values.as_primitive::<Int64Type>();
    let out: Vec<i64> = values.iter().map(|v| v.unwrap_or(0)).collect();
    Some(match matches!(args.args.get(i)?, ColumnarValue::Scalar(_)) {
        true => vec![out.first().copied().unwrap_or(0); rows],
        false => out,
    })
}

/// Argument `i` as one array of `rows` values (a scalar repeated), cast to `to`.
fn cast_arg(args: &ScalarFunctionArgs, i: usize, to: &DataType) -> Option<ArrayRef> {
    let rows = args.number_rows.max(1);
    let array = match args.args.get(i)? {
        ColumnarValue::Array(a) => a.clone(),
        ColumnarValue::Scalar(s) => s.to_array_of_size(rows).ok()?,
    };
    cast(&array, to).ok()
}

/// Values of a `range`/`generate_series` of dates or timestamps with an interval step:
/// the span divided by the shortest the step can be (a month of 28 days, a day of 23 hours).
fn temporal_steps(args: &ScalarFunctionArgs) -> Option<u128> {
    let micros = DataType::Timestamp(TimeUnit::Microsecond, None);
    let temporal = |i: usize| {
        let t = args.arg_fields.get(i)?.data_type().clone();
        matches!(t, DataType::Date32 | DataType::Date64 | DataType::Timestamp(..)).then_some(())
    };
    temporal(0)?;
    temporal(1)?;
    let as_micros = |i: usize| -> Option<Vec<i64>> {
        let a = cast_arg(args, i, &micros)?;
        let a = cast(&a, &DataType::Int64).ok()?;
        Some(a.as_primitive::<Int64Type>().iter().map(|v| v.unwrap_or(0)).collect())
    };
    let (start, stop) = (as_micros(0)?, as_micros(1)?);
    let step = cast_arg(args, 2, &DataType::Interval(IntervalUnit::MonthDayNano))?;
    let step = step.as_primitive::<IntervalMonthDayNanoType>();
    let mut total = 0u128;
    for (row, (start, stop)) in start.iter().zip(&stop).enumerate() {
        let span = (i128::from(*stop) - i128::from(*start)).unsigned_abs() * 1_000;
        let s = step.value(row);
        let shortest = i128::from(s.months).abs() * 28 * 86_400_000_000_000
            + i128::from(s.days).abs() * 82_800_000_000_000
            + i128::from(s.nanoseconds).abs();
        // Parts of opposite signs can cancel: count every nanosecond.
        let mixed = [i128::from(s.months), i128::from(s.days), i128::from(s.nanoseconds)]
            .windows(2)
            .any(|w| w[0] * w[1] < 0);
        let shortest = if mixed { 1 } else { shortest.max(1) } as u128;
        total += (span / shortest + 1) * 8;
    }
    Some(total)
}

/// `lpad`/`rpad` lengths below 0 made 0 (the same result, an empty string): DataFusion sizes
/// its buffer by the lengths' sum with each cast to `usize`, so a negative length (outside its
/// path for a constant length and fill) asked for a buffer of `usize::MAX` bytes and panicked.
fn no_negative_lengths(args: &mut ScalarFunctionArgs) {
    match args.args.get_mut(1) {
        Some(ColumnarValue::Scalar(ScalarValue::Int64(Some(n)))) if *n < 0 => *n = 0,
        Some(ColumnarValue::Array(a)) if a.data_type() == &DataType::Int64 => {
            let lengths = a.as_primitive::<Int64Type>();
            if lengths.iter().flatten().any(|n| n < 0) {
                let clamped: Int64Array = lengths.iter().map(|n| n.map(|n| n.max(0))).collect();
                *a = Arc::new(clamped);
            }
        }
        _ => {}
    }
}

/// Bytes of argument `i` per row (strings), or its values' width.
fn widths(args: &ScalarFunctionArgs, i: usize) -> Vec<u128> {
    let rows = args.number_rows.max(1);
    let (array, scalar): (ArrayRef, bool) = match args.args.get(i) {
        Some(ColumnarValue::Array(a)) => (a.clone(), false),
        Some(ColumnarValue::Scalar(s)) => match s.to_array_of_size(1) {
            Ok(a) => (a, true),
            Err(_) => return vec![8; rows],
        },
        None => return vec![8; rows],
    };
    let lens: Vec<u128> = match length(&array).ok().and_then(|l| cast(&l, &DataType::Int64).ok()) {
        Some(l) => {
            l.as_primitive::<Int64Type>().iter().map(|v| v.unwrap_or(0).max(0) as u128).collect()
        }
        None => vec![array.data_type().primitive_width().unwrap_or(8) as u128; array.len()],
    };
    match scalar {
        true => vec![lens.first().copied().unwrap_or(0); rows],
        false => lens,
    }
}

impl Sized {
    /// The bytes the call would build, if foreseeable.
    fn foreseen(&self, args: &ScalarFunctionArgs) -> Option<u128> {
        let count = |i: usize| ints(args, i);
        match self.foresee {
            Foresee::Repeat => {
                let n = count(1)?;
                let w = widths(args, 0);
                Some(w.iter().zip(&n).map(|(w, n)| w * (*n).max(0) as u128).sum())
            }
            Foresee::Pad => Some(count(1)?.iter().map(|n| 4 * (*n).max(0) as u128).sum()),
            Foresee::ArrayRepeat => {
                let n = count(1)?;
                let w = widths(args, 0);
                Some(w.iter().zip(&n).map(|(w, n)| (*w).max(1) * (*n).max(0) as u128).sum())
            }
            Foresee::Resize => {
                let n = count(1)?;
                let w = widths(args, 2);
                Some(n.iter().zip(&w).map(|(n, w)| (*w).max(8) * (*n).max(0) as u128).sum())
            }
            Foresee::Steps if ints(args, 0).is_none() => temporal_steps(args),
            Foresee::Steps => {
                let (start, stop, step) = match args.args.len() {
                    1 => (None, count(0)?, None),
                    2 => (Some(count(0)?), count(1)?, None),
                    _ => (Some(count(0)?), count(1)?, Some(count(2)?)),
                };
                let mut total = 0u128;
                for (row, stop) in stop.iter().enumerate() {
                    let start = start.as_ref().map_or(0, |s| s[row]);
                    let step = step.as_ref().map_or(1, |s| s[row]).unsigned_abs().max(1);
                    let span = (i128::from(*stop) - i128::from(start)).unsigned_abs();
                    total += (span / u128::from(step) + 1) * 8;
                }
                Some(total)
            }
            Foresee::Result | Foresee::Pairs => None,
        }
    }

    /// Refuses a call whose time grows with the product of its arguments past [`MAX_PAIRS`]
    /// over its rows: a single call cannot be interrupted by the statement's deadline.
    fn check_work(&self, args: &ScalarFunctionArgs) -> Result<()> {
        if self.foresee != Foresee::Pairs {
            return Ok(());
        }
        let (a, b) = (widths(args, 0), widths(args, 1));
        match a.iter().zip(&b).map(|(a, b)| a * b).sum::<u128>() {
            pairs if pairs > MAX_PAIRS => Err(DataFusionError::ArrowError(
                Box::new(ArrowError::InvalidArgumentError(format!(
                    "{}() of strings this long compares {pairs} character pairs; one call \
                     may compare at most {MAX_PAIRS}",
                    self.name()
                ))),
                None,
            )),
            _ => Ok(()),
        }
    }
}

impl ScalarUDFImpl for Sized {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        self.inner.inner().schema_name(args)
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.inner().return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn is_nullable(&self, args: &[Expr], schema: &dyn ExprSchema) -> bool {
        #[allow(deprecated)]
        self.inner.inner().is_nullable(args, schema)
    }

    fn invoke_with_args(&self, mut args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let limit = self.limit as u128;
        self.check_work(&args)?;
        if self.foresee == Foresee::Pad {
            no_negative_lengths(&mut args);
        }
        if let Some(bytes) = self.foreseen(&args) {
            if bytes > limit {
                return Err(too_large(self.name(), bytes, self.limit));
            }
        }
        let out = self.inner.invoke_with_args(args)?;
        let bytes = match &out {
            ColumnarValue::Array(a) => a.get_array_memory_size(),
            ColumnarValue::Scalar(s) => s.size(),
        };
        match bytes as u128 > limit {
            true => Err(too_large(self.name(), bytes as u128, self.limit)),
            false => Ok(out),
        }
    }

    fn with_updated_config(&self, config: &ConfigOptions) -> Option<ScalarUDF> {
        let inner = self.inner.inner().with_updated_config(config)?;
        Some(ScalarUDF::new_from_impl(Sized {
            inner: Arc::new(inner),
            foresee: self.foresee,
            limit: self.limit,
        }))
    }

    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        // A simplification that evaluates the call (constant arguments) runs the wrapper.
        match self.inner.simplify(args, info)? {
            ExprSimplifyResult::Simplified(e) => Ok(ExprSimplifyResult::Simplified(e)),
            ExprSimplifyResult::Original(args) => Ok(ExprSimplifyResult::Original(args)),
        }
    }

    fn short_circuits(&self) -> bool {
        self.inner.short_circuits()
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }
}

/// The functions wrapped, and how each one's size is foreseen.
const WRAPPED: &[(&str, Foresee)] = &[
    ("repeat", Foresee::Repeat),
    ("lpad", Foresee::Pad),
    ("rpad", Foresee::Pad),
    ("array_repeat", Foresee::ArrayRepeat),
    ("array_resize", Foresee::Resize),
    ("range", Foresee::Steps),
    ("generate_series", Foresee::Steps),
    ("concat", Foresee::Result),
    ("concat_ws", Foresee::Result),
    ("replace", Foresee::Result),
    ("regexp_replace", Foresee::Result),
    ("overlay", Foresee::Result),
    ("translate", Foresee::Result),
    ("array_concat", Foresee::Result),
    ("encode", Foresee::Result),
    ("to_hex", Foresee::Result),
    ("format", Foresee::Result),
    ("levenshtein", Foresee::Pairs),
];

/// Replaces `ctx`'s functions that can build large values with ones that stay within `limit`
/// bytes per call, and checks the results of `||` ([`CappedConcat`]).
pub fn register(ctx: &SessionContext, limit: usize) {
    let state = ctx.state();
    for (name, foresee) in WRAPPED {
        let Some(inner) = state.scalar_functions().get(*name).cloned() else { continue };
        // Already wrapped (a shared state).
        if (inner.inner().as_ref() as &dyn Any).downcast_ref::<Sized>().is_some() {
            continue;
        }
        ctx.register_udf(ScalarUDF::new_from_impl(Sized { inner, foresee: *foresee, limit }));
    }
    ctx.add_analyzer_rule(Arc::new(CappedConcat { limit }));
}

fn capped_signature() -> Signature {
    Signature::any(1, Volatility::Immutable)
}

/// The name of the function [`CappedConcat`] wraps `||` in.
const CAPPED: &str = "ebb_capped";

/// Its argument, once found within the statement's memory limit.
#[derive(Debug, PartialEq, Eq, Hash)]
struct CappedValue {
    limit: usize,
    signature: Signature,
}

impl ScalarUDFImpl for CappedValue {
    fn name(&self) -> &str {
        CAPPED
    }

    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        // Named as what it wraps: `SELECT a || b` keeps its column name.
        match args.first() {
            Some(a) => Ok(a.schema_name().to_string()),
            None => Ok(CAPPED.to_string()),
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(arg_types.first().cloned().unwrap_or(DataType::Null))
    }

    fn invoke_with_args(&self, mut args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let value = args.args.pop().unwrap_or(ColumnarValue::Scalar(ScalarValue::Null));
        let bytes = match &value {
            ColumnarValue::Array(a) => a.get_array_memory_size(),
            ColumnarValue::Scalar(s) => s.size(),
        };
        match bytes > self.limit {
            true => Err(too_large("||", bytes as u128, self.limit)),
            false => Ok(value),
        }
    }
}

/// Wraps every `a || b` in a check of its result's size (`ebb_capped(a || b)`, named as
/// `a || b`) against `limit` bytes.
#[derive(Debug)]
struct CappedConcat {
    limit: usize,
}

impl datafusion::optimizer::AnalyzerRule for CappedConcat {
    fn analyze(
        &self,
        plan: datafusion::logical_expr::LogicalPlan,
        _config: &ConfigOptions,
    ) -> Result<datafusion::logical_expr::LogicalPlan> {
        let limit = self.limit;
        plan.transform_up_with_subqueries(|p| {
            p.map_expressions(|e| {
                e.transform_up(|e| match &e {
                    Expr::BinaryExpr(b) if b.op == Operator::StringConcat => {
                        let capped = ScalarUDF::new_from_impl(CappedValue {
                            limit,
                            signature: capped_signature(),
                        });
                        Ok(Transformed::yes(Expr::ScalarFunction(ScalarFunction::new_udf(
                            Arc::new(capped),
                            vec![e],
                        ))))
                    }
                    _ => Ok(Transformed::no(e)),
                })
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "capped_concat"
    }
}
