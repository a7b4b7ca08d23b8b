//! Running the user management statements: each becomes [`AccessChange`]s, planned against the
//! current state and written by the access store in one batch.

use std::sync::Arc;

use datafusion::arrow::array::{RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};

use crate::access::statement::AccessStatement;
use crate::access::{new_token, AccessChange, AccessError, AccessStore, Grant, PasswordHash, User};
use crate::error::{QueryError, Result};
use crate::sql::{command_output, rows_output};
use crate::{QueryOutput, StatementKind};

async fn hash(password: String) -> Result<PasswordHash> {
    // Argon2 takes tens of milliseconds of CPU and memory: off the async threads.
    tokio::task::spawn_blocking(move || PasswordHash::new(&password))
        .await
        .map_err(|e| QueryError::Internal(format!("hashing task failed: {e}")))?
        .map_err(QueryError::from)
}

/// Runs `stmt` against `store`.
pub async fn run(store: &Arc<dyn AccessStore>, stmt: AccessStatement) -> Result<QueryOutput> {
    let now = crate::now_ms();
    let (changes, out) = match stmt {
        AccessStatement::CreateUser { name, password } => {
            let password = match password {
                Some(p) => Some(hash(p).await?),
                None => None,
            };
            let user = User { name, password, created_ms: now };
            (vec![AccessChange::CreateUser(user)], command_output("CREATE USER"))
        }
        AccessStatement::AlterUser { name, password } => {
            let password = hash(password).await?;
            (vec![AccessChange::SetPassword { name, password }], command_output("ALTER USER"))
        }
        AccessStatement::DropUser { name, if_exists } => {
            if if_exists && store.access().user(&name).is_none() {
                return Ok(command_output("DROP USER"));
            }
            (vec![AccessChange::DropUser { name }], command_output("DROP USER"))
        }
        AccessStatement::Grant { revoke, privileges, scope, user } => {
            let changes = privileges
                .into_iter()
                .map(|privilege| {
                    let g = Grant { user: user.clone(), scope: scope.clone(), privilege };
                    if revoke {
                        AccessChange::Revoke(g)
                    } else {
                        AccessChange::Grant(g)
                    }
                })
                .collect();
            (changes, command_output(if revoke { "REVOKE" } else { "GRANT" }))
        }
        AccessStatement::CreateToken { user } => {
            let t = new_token(&user, now);
            let schema = Arc::new(Schema::new(vec![
                Field::new("user", DataType::Utf8, false),
                Field::new("id", DataType::Utf8, false),
                Field::new("token", DataType::Utf8, false),
            ]));
            let batch = RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(StringArray::from(vec![user])),
                    Arc::new(StringArray::from(vec![t.record.id.clone()])),
                    Arc::new(StringArray::from(vec![t.secret])),
                ],
            )
            .map_err(|e| QueryError::Internal(e.to_string()))?;
            (
                vec![AccessChange::CreateToken(t.record)],
                rows_output(schema, batch, StatementKind::Query),
            )
        }
        AccessStatement::DropToken { id } => {
            (vec![AccessChange::DropToken { id }], command_output("DROP TOKEN"))
        }
    };
    let mut state = (*store.access()).clone();
    let mut ops = Vec::new();
    for c in &changes {
        for op in c.plan(&state)? {
            state.apply(&op).map_err(|e: AccessError| QueryError::Internal(e.to_string()))?;
            ops.push(op);
        }
    }
    store.write_access(ops).await?;
    Ok(out)
}
