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
/// (`%1$s`) and widths are refused. The result is at most the format's length plus the
/// arguments' (each argument is used at most once).
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
        let texts =
            args.args
                .iter()
                .map(|a| {
                    let a = datafusion::arrow::compute::cast(&a.to_array(rows)?, &DataType::Utf8)?;
                    a.as_any().downcast_ref::<StringArray>().cloned().ok_or_else(|| {
                        DataFusionError::Internal("format: an argument as text".into())
                    })
                })
                .collect::<datafusion::error::Result<Vec<StringArray>>>()?;
        let Some((fmt, values)) = texts.split_first() else {
            return Err(DataFusionError::Plan("format: takes a format string".into()));
        };
        let out = (0..rows)
            .map(|i| {
                if fmt.is_null(i) {
                    return Ok(None);
                }
                let args: Vec<Option<&str>> =
                    values.iter().map(|v| (!v.is_null(i)).then(|| v.value(i))).collect();
                formatted(fmt.value(i), &args).map(Some)
            })
            .collect::<datafusion::error::Result<StringArray>>()?;
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

/// `fmt` with its conversions replaced by `args` in order.
fn formatted(fmt: &str, args: &[Option<&str>]) -> datafusion::error::Result<String> {
    let mut out = String::with_capacity(fmt.len());
    let mut next = args.iter();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
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
            Some('s') => out.push_str(arg()?.unwrap_or("")),
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
        let f = |fmt: &str, args: &[Option<&str>]| formatted(fmt, args).expect(fmt);
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
            assert!(formatted(fmt, args).is_err(), "{fmt}");
        }
    }
}
