//! PostgreSQL's `format(fmt, arg, ...)`, which clients use to build names
//! (`format('%I.%I', schema, table)::regclass`, Metabase's column sync).

use std::sync::Arc;

use datafusion::arrow::array::{Array, StringArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// `format(fmt, arg, ...)`: `%s` is the next argument's text (empty if null), `%I` the next
/// argument as an identifier (double-quoted unless it is lower case letters, digits, `_` and
/// `$`, not starting with a digit; PostgreSQL also quotes its reserved words), `%L` the next
/// argument as a string literal (`NULL` if null), `%%` a percent sign. Argument positions
/// (`%1$s`) and widths are refused. Each argument is used at most once, and a batch of rows
/// makes at most [`MAX_RESULT_BYTES`].
#[derive(Debug, PartialEq, Eq, Hash)]
struct Format {
    signature: Signature,
}

/// The `format` function.
pub(super) fn udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(Format { signature: Signature::variadic_any(Volatility::Immutable) })
}

impl ScalarUDFImpl for Format {
    fn name(&self) -> &str {
        "format"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(
        &self,
        args: ScalarFunctionArgs,
    ) -> datafusion::error::Result<ColumnarValue> {
        let rows = args.number_rows;
        // A constant argument is read once, not copied for every row.
        let texts = args
            .args
            .iter()
            .map(|a| match a {
                ColumnarValue::Scalar(v) if v.is_null() => Ok(Text::One(None)),
                ColumnarValue::Scalar(v) => match v.cast_to(&DataType::Utf8)? {
                    datafusion::scalar::ScalarValue::Utf8(t) => Ok(Text::One(t)),
                    other => Ok(Text::One(Some(other.to_string()))),
                },
                ColumnarValue::Array(a) => {
                    let a = datafusion::arrow::compute::cast(a, &DataType::Utf8)?;
                    let a = a.as_any().downcast_ref::<StringArray>().cloned().ok_or_else(|| {
                        DataFusionError::Internal("format: an argument as text".into())
                    })?;
                    Ok(Text::Each(a))
                }
            })
            .collect::<datafusion::error::Result<Vec<Text>>>()?;
        let Some((fmt, values)) = texts.split_first() else {
            return Err(DataFusionError::Plan("format: takes a format string".into()));
        };
        let mut made = 0usize;
        let mut out = Vec::with_capacity(rows);
        for i in 0..rows {
            let Some(f) = fmt.get(i) else {
                out.push(None);
                continue;
            };
            let args: Vec<Option<&str>> = values.iter().map(|v| v.get(i)).collect();
            let text = formatted(f, &args, MAX_RESULT_BYTES - made)?;
            made += text.len();
            out.push(Some(text));
        }
        Ok(ColumnarValue::Array(Arc::new(StringArray::from(out))))
    }
}

/// Most bytes `format` makes for one batch of rows (the statement's memory limit counts them
/// too): text for names and messages, never a bulk value.
const MAX_RESULT_BYTES: usize = 16 << 20;

/// An argument's text: one for every row (a constant), or a value per row.
enum Text {
    One(Option<String>),
    Each(StringArray),
}

impl Text {
    fn get(&self, row: usize) -> Option<&str> {
        match self {
            Text::One(t) => t.as_deref(),
            Text::Each(a) => (!a.is_null(row)).then(|| a.value(row)),
        }
    }
}

/// `fmt` with its conversions replaced by `args` in order, refused past `budget` bytes.
fn formatted(fmt: &str, args: &[Option<&str>], budget: usize) -> datafusion::error::Result<String> {
    let mut out = String::with_capacity(fmt.len().min(budget));
    let mut next = args.iter();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if out.len() > budget {
            return Err(DataFusionError::ResourcesExhausted(format!(
                "format: the results of one batch of rows exceed {MAX_RESULT_BYTES} bytes"
            )));
        }
        if c != '%' {
            out.push(c);
            continue;
        }
        let conversion = chars.next();
        if conversion == Some('%') {
            out.push('%');
            continue;
        }
        let mut arg = || {
            next.next().copied().ok_or_else(|| {
                DataFusionError::Execution("format: too few arguments for the format".into())
            })
        };
        match conversion {
            Some('s') => {
                let text = arg()?.unwrap_or("");
                if out.len() + text.len() > budget {
                    return Err(DataFusionError::ResourcesExhausted(format!(
                        "format: the results of one batch of rows exceed {MAX_RESULT_BYTES} bytes"
                    )));
                }
                out.push_str(text);
            }
            Some('I') => match arg()? {
                Some(name) => out.push_str(&identifier(name)),
                None => {
                    return Err(DataFusionError::Execution(
                        "format: a null value cannot be formatted as an identifier".into(),
                    ))
                }
            },
            Some('L') => match arg()? {
                Some(text) => out.push_str(&crate::sql::quote_literal(text)),
                None => out.push_str("NULL"),
            },
            Some(other) => {
                return Err(DataFusionError::Execution(format!(
                    "format: unsupported conversion %{other} (%s, %I, %L and %% are)"
                )))
            }
            None => {
                return Err(DataFusionError::Execution("format: the format ends with %".into()))
            }
        }
    }
    if out.len() > budget {
        return Err(DataFusionError::ResourcesExhausted(format!(
            "format: the results of one batch of rows exceed {MAX_RESULT_BYTES} bytes"
        )));
    }
    Ok(out)
}

/// `name` as `%I` writes it.
fn identifier(name: &str) -> String {
    let mut chars = name.chars();
    let plain = chars.next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '$');
    if plain {
        name.to_string()
    } else {
        crate::sql::quote_ident(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_as_postgresql_writes_them() {
        let f = |fmt: &str, args: &[Option<&str>]| formatted(fmt, args, 1 << 20).expect(fmt);
        assert_eq!(f("%I.%I", &[Some("public"), Some("cpu")]), "public.cpu");
        assert_eq!(f("%I.%I", &[Some("My db"), Some("a\"b")]), "\"My db\".\"a\"\"b\"");
        assert_eq!(
            f("%s|%s|%L|%L|100%%", &[Some("x"), None, Some("it's"), None]),
            "x||'it''s'|NULL|100%"
        );
        assert_eq!(f("\"%s\".\"%s\"", &[Some("s"), Some("t")]), "\"s\".\"t\"");
        for (fmt, args) in [
            ("%s %s", &[Some("a")][..]),
            ("%1$s", &[Some("a")][..]),
            ("%", &[][..]),
            ("%I", &[None][..]),
        ] {
            assert!(formatted(fmt, args, 1 << 20).is_err(), "{fmt}");
        }
        // One value used many times: refused at the budget, before it is all made.
        let big = "x".repeat(1 << 16);
        let many = vec![Some(big.as_str()); 1_000];
        assert!(formatted(&"%s".repeat(1_000), &many, 1 << 20).is_err());
    }
}
