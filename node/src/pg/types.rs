//! Result types and values for the PostgreSQL front end: Arrow types to PostgreSQL types, and
//! Arrow columns to `DataRow` values in text or binary format.
//!
//! | Arrow                                   | PostgreSQL                                 |
//! |-----------------------------------------|--------------------------------------------|
//! | Boolean                                 | `bool`                                     |
//! | Int8, Int16, UInt8                      | `int2`                                     |
//! | Int32, UInt16                           | `int4`                                     |
//! | Int64, UInt32                           | `int8`                                     |
//! | UInt64                                  | `int8` (exact in text, saturated in binary) |
//! | Float16, Float32 / Float64              | `float4` / `float8`                        |
//! | Utf8, LargeUtf8, Utf8View, Null         | `text`                                     |
//! | Binary, LargeBinary, BinaryView, fixed  | `bytea`                                    |
//! | Timestamp without / with time zone      | `timestamp` / `timestamptz` (UTC)          |
//! | Date32, Date64 / Time32, Time64         | `date` / `time`                            |
//! | Interval, Duration                      | `interval`                                 |
//! | Decimal32/64/128/256                    | `numeric`                                  |
//! | anything else                           | `text`, as Arrow displays it               |
//!
//! Text values follow PostgreSQL's output: `t`/`f`, `NaN`/`Infinity`, `2024-01-02 03:04:05.5`
//! (fraction only when non-zero, down to nanoseconds; `+00` for `timestamptz`), `\x` hex for
//! `bytea`, and `1 year 2 mons 3 days 04:05:06` for intervals.

use std::fmt::Write as _;
use std::sync::Arc;

use bytes::{BufMut, BytesMut};
use datafusion::arrow::array::{Array, ArrayRef, AsArray, PrimitiveArray, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{
    ArrowPrimitiveType, DataType, Date32Type, Float32Type, Float64Type, Int16Type, Int32Type,
    Int64Type, IntervalDayTimeType, IntervalMonthDayNanoType, IntervalUnit, IntervalYearMonthType,
    Schema, Time64NanosecondType, TimeUnit, UInt64Type,
};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use pgwire::api::portal::Format;
use pgwire::api::results::{FieldFormat, FieldInfo};
use pgwire::api::Type;
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::data::DataRow;

use super::user_error;
use super::values::{
    pg_micros, put_display, put_interval, put_numeric, units_per_sec, write_date, write_float,
    write_time, write_timestamp, NANOS_PER_SEC, PG_EPOCH_DAYS,
};

/// How a result column is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Bool,
    Int2,
    Int4,
    Int8,
    /// UInt64, sent as `int8`.
    Unsigned,
    Float4,
    Float8,
    Text,
    Bytea,
    Timestamp(TimeUnit),
    TimestampTz(TimeUnit),
    Date,
    Time,
    Interval,
    Duration(TimeUnit),
    Numeric,
    /// Sent as `text`, formatted by Arrow.
    Other,
}

impl Kind {
    fn of(data_type: &DataType) -> Kind {
        match data_type {
            DataType::Boolean => Kind::Bool,
            DataType::Int8 | DataType::Int16 | DataType::UInt8 => Kind::Int2,
            DataType::Int32 | DataType::UInt16 => Kind::Int4,
            DataType::Int64 | DataType::UInt32 => Kind::Int8,
            DataType::UInt64 => Kind::Unsigned,
            DataType::Float16 | DataType::Float32 => Kind::Float4,
            DataType::Float64 => Kind::Float8,
            DataType::Null | DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                Kind::Text
            }
            DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
            | DataType::FixedSizeBinary(_) => Kind::Bytea,
            DataType::Timestamp(unit, None) => Kind::Timestamp(*unit),
            DataType::Timestamp(unit, Some(_)) => Kind::TimestampTz(*unit),
            DataType::Date32 | DataType::Date64 => Kind::Date,
            DataType::Time32(_) | DataType::Time64(_) => Kind::Time,
            DataType::Interval(_) => Kind::Interval,
            DataType::Duration(unit) => Kind::Duration(*unit),
            DataType::Decimal32(..)
            | DataType::Decimal64(..)
            | DataType::Decimal128(..)
            | DataType::Decimal256(..) => Kind::Numeric,
            DataType::Dictionary(_, value) => Kind::of(value),
            _ => Kind::Other,
        }
    }

    /// The PostgreSQL type and its `typlen`.
    fn pg_type(self) -> (Type, i16) {
        match self {
            Kind::Bool => (Type::BOOL, 1),
            Kind::Int2 => (Type::INT2, 2),
            Kind::Int4 => (Type::INT4, 4),
            Kind::Int8 | Kind::Unsigned => (Type::INT8, 8),
            Kind::Float4 => (Type::FLOAT4, 4),
            Kind::Float8 => (Type::FLOAT8, 8),
            Kind::Text | Kind::Other => (Type::TEXT, -1),
            Kind::Bytea => (Type::BYTEA, -1),
            Kind::Timestamp(_) => (Type::TIMESTAMP, 8),
            Kind::TimestampTz(_) => (Type::TIMESTAMPTZ, 8),
            Kind::Date => (Type::DATE, 4),
            Kind::Time => (Type::TIME, 8),
            Kind::Interval | Kind::Duration(_) => (Type::INTERVAL, 16),
            Kind::Numeric => (Type::NUMERIC, -1),
        }
    }
}

/// How one result column is encoded: its kind and wire format.
#[derive(Debug, Clone, Copy)]
pub(super) struct Column {
    kind: Kind,
    binary: bool,
}

/// The PostgreSQL type for values of an Arrow type (used for inferred parameter types).
pub(super) fn param_type(data_type: &DataType) -> Type {
    Kind::of(data_type).pg_type().0
}

/// The wire format of column (or parameter) `idx`; text when the client asked for nothing.
fn format_at(formats: Option<&Format>, idx: usize) -> FieldFormat {
    match formats {
        None | Some(Format::UnifiedText) => FieldFormat::Text,
        Some(Format::UnifiedBinary) => FieldFormat::Binary,
        Some(Format::Individual(codes)) => {
            codes.get(idx).map_or(FieldFormat::Text, |code| FieldFormat::from(*code))
        }
    }
}

/// True if parameter `idx` was bound in binary format.
pub(super) fn is_binary(formats: &Format, idx: usize) -> bool {
    format_at(Some(formats), idx) == FieldFormat::Binary
}

/// The row description of `schema` in the requested `formats`, and how to encode each column.
pub(super) fn describe_schema(
    schema: &Schema,
    formats: Option<&Format>,
) -> (Vec<FieldInfo>, Vec<Column>) {
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(idx, field)| {
            let kind = Kind::of(field.data_type());
            let (pg_type, size) = kind.pg_type();
            let format = format_at(formats, idx);
            let mut info = FieldInfo::new(field.name().clone(), None, None, pg_type, format)
                .with_type_size(size);
            if let Some(modifier) = numeric_modifier(field.data_type()) {
                info = info.with_type_modifier(modifier);
            }
            (info, Column { kind, binary: format == FieldFormat::Binary })
        })
        .unzip()
}

/// `atttypmod` of a decimal column: `numeric(precision, scale)`.
fn numeric_modifier(data_type: &DataType) -> Option<i32> {
    let (precision, scale) = match data_type {
        DataType::Decimal32(p, s)
        | DataType::Decimal64(p, s)
        | DataType::Decimal128(p, s)
        | DataType::Decimal256(p, s) => (i32::from(*p), i32::from(*s)),
        _ => return None,
    };
    (scale >= 0).then_some(((precision << 16) | scale) + 4)
}

/// The `DataRow`s of one batch.
pub(super) fn encode_batch(batch: &RecordBatch, columns: &[Column]) -> PgWireResult<Vec<DataRow>> {
    if batch.num_columns() != columns.len() {
        return Err(internal(format!(
            "result batch has {} columns, expected {}",
            batch.num_columns(),
            columns.len()
        )));
    }
    let width = i16::try_from(columns.len()).map_err(|_| internal("too many columns".into()))?;
    let mut rows: Vec<BytesMut> =
        (0..batch.num_rows()).map(|_| BytesMut::with_capacity(16 * columns.len())).collect();
    for (column, array) in columns.iter().zip(batch.columns()) {
        encode_column(array, *column, &mut rows)
            .map_err(|e| internal(format!("cannot encode a result column: {e}")))?;
    }
    Ok(rows.into_iter().map(|data| DataRow::new(data, width)).collect())
}

fn internal(message: String) -> PgWireError {
    user_error("XX000", message)
}

/// Appends each value of `array` (length prefix, then what `put` writes) to its row.
fn each(rows: &mut [BytesMut], array: &dyn Array, mut put: impl FnMut(usize, &mut BytesMut)) {
    let nulls = array.logical_nulls();
    for (idx, row) in rows.iter_mut().enumerate() {
        if nulls.as_ref().is_some_and(|n| n.is_null(idx)) {
            row.put_i32(-1);
            continue;
        }
        let at = row.len();
        row.put_i32(0);
        put(idx, row);
        let len = i32::try_from(row.len() - at - 4).unwrap_or(i32::MAX);
        row[at..at + 4].copy_from_slice(&len.to_be_bytes());
    }
}

fn primitive<T: ArrowPrimitiveType>(array: &ArrayRef) -> Result<&PrimitiveArray<T>, ArrowError> {
    array.as_primitive_opt::<T>().ok_or_else(|| mismatch(array))
}

fn mismatch(array: &ArrayRef) -> ArrowError {
    ArrowError::CastError(format!("unexpected column type {}", array.data_type()))
}

/// Encodes an integer column cast to Arrow type `$to`: big-endian in binary, decimal in text.
macro_rules! integers {
    ($rows:expr, $array:expr, $binary:expr, $to:ident, $ty:ty, $put:ident) => {{
        let c = cast($array.as_ref(), &DataType::$to)?;
        let a = primitive::<$ty>(&c)?;
        each($rows, a, |i, row| {
            let v = a.value(i);
            if $binary {
                row.$put(v)
            } else {
                put_display(row, v)
            }
        });
    }};
}

/// Appends column `array` to `rows`.
fn encode_column(
    array: &ArrayRef,
    column: Column,
    rows: &mut [BytesMut],
) -> Result<(), ArrowError> {
    let array = match array.data_type() {
        DataType::Dictionary(_, value) => cast(array.as_ref(), value)?,
        _ => Arc::clone(array),
    };
    let binary = column.binary;
    match column.kind {
        Kind::Bool => {
            let a = array.as_boolean_opt().ok_or_else(|| mismatch(&array))?;
            each(rows, a, |i, row| {
                let v = a.value(i);
                row.put_u8(match (binary, v) {
                    (true, v) => u8::from(v),
                    (false, true) => b't',
                    (false, false) => b'f',
                });
            });
        }
        Kind::Int2 => integers!(rows, array, binary, Int16, Int16Type, put_i16),
        Kind::Int4 => integers!(rows, array, binary, Int32, Int32Type, put_i32),
        Kind::Int8 => integers!(rows, array, binary, Int64, Int64Type, put_i64),
        Kind::Unsigned => {
            let a = primitive::<UInt64Type>(&array)?;
            each(rows, a, |i, row| {
                let v = a.value(i);
                if binary {
                    row.put_i64(i64::try_from(v).unwrap_or(i64::MAX));
                } else {
                    put_display(row, v);
                }
            });
        }
        Kind::Float4 => {
            let c = cast(array.as_ref(), &DataType::Float32)?;
            let a = primitive::<Float32Type>(&c)?;
            each(rows, a, |i, row| {
                let v = a.value(i);
                if binary {
                    row.put_f32(v)
                } else {
                    write_float(row, f64::from(v), v)
                }
            });
        }
        Kind::Float8 => {
            let a = primitive::<Float64Type>(&array)?;
            each(rows, a, |i, row| {
                let v = a.value(i);
                if binary {
                    row.put_f64(v)
                } else {
                    write_float(row, v, v)
                }
            });
        }
        Kind::Text => {
            // Text and binary formats of `text` are the same bytes.
            if let Some(a) = array.as_string_view_opt() {
                each(rows, a, |i, row| row.put_slice(a.value(i).as_bytes()));
            } else {
                let c = cast(array.as_ref(), &DataType::Utf8)?;
                let a = c.as_string_opt::<i32>().ok_or_else(|| mismatch(&c))?;
                each(rows, a, |i, row| row.put_slice(a.value(i).as_bytes()));
            }
        }
        Kind::Bytea => {
            let c = cast(array.as_ref(), &DataType::Binary)?;
            let a = c.as_binary_opt::<i32>().ok_or_else(|| mismatch(&c))?;
            each(rows, a, |i, row| {
                let v = a.value(i);
                if binary {
                    row.put_slice(v);
                } else {
                    row.put_slice(b"\\x");
                    for byte in v {
                        put_display(row, format_args!("{byte:02x}"));
                    }
                }
            });
        }
        Kind::Timestamp(unit) | Kind::TimestampTz(unit) => {
            let tz = matches!(column.kind, Kind::TimestampTz(_));
            let c = cast(array.as_ref(), &DataType::Int64)?;
            let a = primitive::<Int64Type>(&c)?;
            each(rows, a, |i, row| {
                let v = a.value(i);
                if binary {
                    row.put_i64(pg_micros(v, unit));
                } else {
                    write_timestamp(row, v, unit, tz);
                }
            });
        }
        Kind::Date => {
            let c = cast(array.as_ref(), &DataType::Date32)?;
            let a = primitive::<Date32Type>(&c)?;
            each(rows, a, |i, row| {
                let v = a.value(i);
                if binary {
                    row.put_i32(v.saturating_sub(PG_EPOCH_DAYS));
                } else {
                    write_date(row, v);
                }
            });
        }
        Kind::Time => {
            let c = cast(array.as_ref(), &DataType::Time64(TimeUnit::Nanosecond))?;
            let a = primitive::<Time64NanosecondType>(&c)?;
            each(rows, a, |i, row| {
                let v = a.value(i);
                if binary {
                    row.put_i64(v / 1_000)
                } else {
                    write_time(row, v)
                }
            });
        }
        Kind::Interval => match array.data_type() {
            DataType::Interval(IntervalUnit::YearMonth) => {
                let a = primitive::<IntervalYearMonthType>(&array)?;
                each(rows, a, |i, row| put_interval(row, binary, a.value(i), 0, 0));
            }
            DataType::Interval(IntervalUnit::DayTime) => {
                let a = primitive::<IntervalDayTimeType>(&array)?;
                each(rows, a, |i, row| {
                    let v = a.value(i);
                    put_interval(row, binary, 0, v.days, i64::from(v.milliseconds) * 1_000_000);
                });
            }
            _ => {
                let c = cast(array.as_ref(), &DataType::Interval(IntervalUnit::MonthDayNano))?;
                let a = primitive::<IntervalMonthDayNanoType>(&c)?;
                each(rows, a, |i, row| {
                    let v = a.value(i);
                    put_interval(row, binary, v.months, v.days, v.nanoseconds);
                });
            }
        },
        Kind::Duration(unit) => {
            let c = cast(array.as_ref(), &DataType::Int64)?;
            let a = primitive::<Int64Type>(&c)?;
            each(rows, a, |i, row| {
                let nanos = a.value(i).saturating_mul(NANOS_PER_SEC / units_per_sec(unit));
                put_interval(row, binary, 0, 0, nanos);
            });
        }
        Kind::Numeric => {
            let options = FormatOptions::new();
            let formatter = ArrayFormatter::try_new(array.as_ref(), &options)?;
            let mut text = String::new();
            each(rows, array.as_ref(), |i, row| {
                text.clear();
                let _ = write!(text, "{}", formatter.value(i));
                if binary {
                    put_numeric(row, &text)
                } else {
                    row.put_slice(text.as_bytes())
                }
            });
        }
        Kind::Other => {
            let options = FormatOptions::new();
            let formatter = ArrayFormatter::try_new(array.as_ref(), &options)?;
            each(rows, array.as_ref(), |i, row| put_display(row, formatter.value(i)));
        }
    }
    Ok(())
}
