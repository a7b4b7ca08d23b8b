//! `system.users`, `system.grants` and `system.tokens` (never a secret or a hash).

use std::sync::Arc;

use datafusion::arrow::array::UInt64Array;
use datafusion::arrow::array::{ArrayRef, BooleanArray, StringArray, TimestampMillisecondArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::TableProvider;
use datafusion::datasource::MemTable;
use datafusion::error::Result as DfResult;

use super::{AccessState, Scope};

/// Names of the access tables in `system`.
pub const ACCESS_TABLES: &[&str] = &["grants", "tokens", "users"];

fn ts(name: &str) -> Field {
    Field::new(name, DataType::Timestamp(TimeUnit::Millisecond, None), false)
}

/// Access table `name` of `state`; `None` if `name` is not one.
pub fn access_table(state: &AccessState, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
    let batch = match name {
        "users" => {
            let users: Vec<_> = state.users().collect();
            let tokens = |u: &str| state.tokens().filter(|t| t.user == u).count() as u64;
            let schema = Arc::new(Schema::new(vec![
                Field::new("name", DataType::Utf8, false),
                Field::new("password", DataType::Boolean, false),
                Field::new("tokens", DataType::UInt64, false),
                ts("created_at"),
            ]));
            let cols: Vec<ArrayRef> = vec![
                Arc::new(StringArray::from_iter_values(users.iter().map(|u| u.name.as_str()))),
                Arc::new(BooleanArray::from(
                    users.iter().map(|u| u.password.is_some()).collect::<Vec<_>>(),
                )),
                Arc::new(UInt64Array::from_iter_values(users.iter().map(|u| tokens(&u.name)))),
                Arc::new(TimestampMillisecondArray::from_iter_values(
                    users.iter().map(|u| u.created_ms as i64),
                )),
            ];
            RecordBatch::try_new(schema, cols)?
        }
        "grants" => {
            let grants: Vec<_> = state.grants().collect();
            let schema = Arc::new(Schema::new(vec![
                Field::new("user", DataType::Utf8, false),
                Field::new("database", DataType::Utf8, true),
                Field::new("privilege", DataType::Utf8, false),
            ]));
            let cols: Vec<ArrayRef> = vec![
                Arc::new(StringArray::from_iter_values(grants.iter().map(|g| g.user.as_str()))),
                Arc::new(StringArray::from(
                    grants
                        .iter()
                        .map(|g| match &g.scope {
                            Scope::All => None,
                            Scope::Database(d) => Some(d.as_str()),
                        })
                        .collect::<Vec<_>>(),
                )),
                Arc::new(StringArray::from_iter_values(grants.iter().map(|g| g.privilege.name()))),
            ];
            RecordBatch::try_new(schema, cols)?
        }
        "tokens" => {
            let tokens: Vec<_> = state.tokens().collect();
            let schema = Arc::new(Schema::new(vec![
                Field::new("id", DataType::Utf8, false),
                Field::new("user", DataType::Utf8, false),
                ts("created_at"),
            ]));
            let cols: Vec<ArrayRef> = vec![
                Arc::new(StringArray::from_iter_values(tokens.iter().map(|t| t.id.as_str()))),
                Arc::new(StringArray::from_iter_values(tokens.iter().map(|t| t.user.as_str()))),
                Arc::new(TimestampMillisecondArray::from_iter_values(
                    tokens.iter().map(|t| t.created_ms as i64),
                )),
            ];
            RecordBatch::try_new(schema, cols)?
        }
        _ => return Ok(None),
    };
    Ok(Some(Arc::new(MemTable::try_new(batch.schema(), vec![vec![batch]])?)))
}
