//! A shard's refusal of a write, between nodes: the refusing leader sends its kind and parts
//! ([`proto::Refusal`]), and the node that received the request rebuilds the same
//! [`QueryError`], so a client gets the status, SQLSTATE and message a single node gives.

use ebb_query::db::WriteLimits;
use ebb_query::error::LimitError;
use ebb_query::lp::LineError;
use ebb_query::model::schema::FieldType;
use ebb_query::QueryError;

use super::proto::{self, refusal::Kind};

/// The wire form of a refusal.
pub fn to_wire(e: &QueryError) -> proto::Refusal {
    let mut r = proto::Refusal { message: e.to_string(), ..Default::default() };
    match e {
        QueryError::Line(l) => {
            r.set_kind(Kind::Line);
            r.line = Some(l.line as u64);
            r.reason = l.reason.clone();
        }
        QueryError::TypeConflict { table, field, existing, given, line } => {
            r.set_kind(Kind::TypeConflict);
            (r.table, r.field) = (table.clone(), field.clone());
            (r.existing, r.given) = (existing.to_string(), given.to_string());
            r.line = line.map(|l| l as u64);
        }
        QueryError::Limit(l) => {
            r.set_kind(Kind::Limit);
            (r.what, r.limit, r.setting) = (l.what.clone(), l.limit as u64, l.setting.to_string());
        }
        QueryError::BeyondRetention { line, .. } => {
            r.set_kind(Kind::BeyondRetention);
            r.line = line.map(|l| l as u64);
        }
        _ => r.set_kind(Kind::Other),
    }
    r
}

/// The error a refusal stands for: `refusal` if the shard sent one (a node of an older build
/// sends only the message, `rejected`). Parts this build does not know give the message alone.
pub fn from_wire(refusal: Option<proto::Refusal>, rejected: String) -> QueryError {
    let Some(r) = refusal else { return QueryError::Invalid(rejected) };
    let line = r.line.and_then(|l| usize::try_from(l).ok());
    let limit = usize::try_from(r.limit).unwrap_or(usize::MAX);
    match r.kind() {
        Kind::Line => match line {
            Some(line) => QueryError::Line(LineError { line, reason: r.reason }),
            None => QueryError::Invalid(r.message),
        },
        Kind::TypeConflict => match (type_name(&r.existing), type_name(&r.given)) {
            (Some(existing), Some(given)) => {
                QueryError::TypeConflict { table: r.table, field: r.field, existing, given, line }
            }
            _ => QueryError::Invalid(r.message),
        },
        Kind::Limit => match write_setting(&r.setting) {
            Some(setting) => QueryError::Limit(LimitError { what: r.what, limit, setting }),
            None => QueryError::Invalid(r.message),
        },
        Kind::BeyondRetention => QueryError::BeyondRetention { message: r.message, line },
        Kind::Other => QueryError::Invalid(r.message),
    }
}

/// The name of a field type, as [`FieldType::name`] gives it.
fn type_name(name: &str) -> Option<&'static str> {
    use FieldType::*;
    [Float, Integer, UInteger, Boolean, String]
        .into_iter()
        .map(FieldType::name)
        .find(|n| *n == name)
}

/// A write limit's setting, as [`WriteLimits`] names it.
fn write_setting(name: &str) -> Option<&'static str> {
    WriteLimits::SETTINGS.into_iter().find(|s| *s == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_cross_the_wire_unchanged() {
        let refusals = [
            QueryError::Line(LineError { line: 7, reason: "no fields".into() }),
            QueryError::TypeConflict {
                table: "cpu".into(),
                field: "usage".into(),
                existing: "float",
                given: "string",
                line: Some(3),
            },
            QueryError::TypeConflict {
                table: "cpu".into(),
                field: "n".into(),
                existing: "unsigned integer",
                given: "boolean",
                line: None,
            },
            QueryError::Limit(LimitError {
                what: "line 2: 300 tags".into(),
                limit: 256,
                setting: "max_tags_per_line",
            }),
            QueryError::BeyondRetention {
                message: "line 1: time 1970-01-01T00:00:00.000000005Z is older than ...".into(),
                line: Some(1),
            },
            QueryError::Invalid("table name too long".into()),
        ];
        for e in refusals {
            let wire = to_wire(&e);
            let back = from_wire(Some(wire), String::new());
            assert_eq!(format!("{back:?}"), format!("{e:?}"));
            assert_eq!(back.to_string(), e.to_string());
        }
        // From a node that sends only the message.
        let old = from_wire(None, "line 1: bad".into());
        assert!(matches!(&old, QueryError::Invalid(m) if m == "line 1: bad"), "{old:?}");
        // A setting or type this build does not know: the message alone.
        let mut odd = to_wire(&QueryError::Limit(LimitError {
            what: "x".into(),
            limit: 1,
            setting: "max_tags_per_line",
        }));
        odd.setting = "max_future_thing".into();
        let message = odd.message.clone();
        assert!(
            matches!(from_wire(Some(odd), String::new()), QueryError::Invalid(m) if m == message)
        );
    }
}
