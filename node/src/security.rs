//! The server's access defaults: the `admin` user created from the configured password on a
//! server without users, the refusal to serve other machines without any user, and the
//! warning an `--insecure` server logs while it serves without users.

use std::sync::Arc;
use std::time::Duration;

use ebb_query::access::statement::AccessStatement;
use ebb_query::front::{FrontDoor, Principal, Protocol};
use ebb_query::QueryError;

use crate::config::Config;
use crate::error::{NodeError, Result};

/// Name of the user created from the configured admin password.
pub const ADMIN_USER: &str = "admin";

/// How often an insecure server repeats its warning.
const INSECURE_WARNING_EVERY: Duration = Duration::from_secs(60);

/// How long a cluster node tries to create `admin` (the metadata group may still be electing).
const BOOTSTRAP_TIMEOUT: Duration = Duration::from_secs(60);

/// What a server that reaches other machines without users is told.
pub fn refusal(config: &Config) -> NodeError {
    NodeError::Config(format!(
        "refusing to serve HTTP {}, PostgreSQL {}, gRPC {} and Flight SQL {} to other machines \
         without any \
         user: set an admin password (--admin-password-file PATH, or EBB_ADMIN_PASSWORD) to \
         create user `admin`, or listen on 127.0.0.1 only; --insecure serves without users \
         (every client may read, write and delete everything)",
        config.http_addr, config.pg_addr, config.grpc_addr, config.flight_addr
    ))
}

/// Checks the configuration before anything starts: a server reaching other machines needs an
/// admin password or `--insecure` (whether users already exist is checked once it is open).
pub fn may_start_open(config: &Config) -> bool {
    config.loopback_only() || config.admin_password.is_some() || config.insecure
}

/// Creates `admin` with the configured password if the server has no users, and refuses a
/// server reaching other machines that still has none. On a cluster, nodes race to create it
/// and all but one find it made.
pub async fn bootstrap(door: &Arc<FrontDoor>, config: &Config) -> Result<()> {
    if let Some(pw) = &config.admin_password {
        let deadline = tokio::time::Instant::now() + BOOTSTRAP_TIMEOUT;
        while !door.auth_required() {
            let stmt = AccessStatement::CreateUser {
                name: ADMIN_USER.into(),
                password: Some(pw.0.clone()),
            };
            let who = Principal::trusted(Protocol::Internal, None);
            match door.run_access(&who, stmt).await {
                Ok(_) => {
                    tracing::info!(user = ADMIN_USER, "created the administrator");
                    break;
                }
                Err(QueryError::Access(e)) if door.auth_required() => {
                    tracing::debug!(%e, "another node created the administrator first");
                    break;
                }
                Err(e) if tokio::time::Instant::now() < deadline => {
                    tracing::debug!(%e, "creating the administrator; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => {
                    return Err(NodeError::Config(format!("creating user {ADMIN_USER}: {e}")))
                }
            }
        }
    }
    if !door.auth_required() && !config.loopback_only() && !config.insecure {
        return Err(refusal(config));
    }
    Ok(())
}

/// Logs a warning every minute while `door` serves other machines without users.
pub async fn warn_while_insecure(door: Arc<FrontDoor>, config: Config) {
    if config.loopback_only() || !config.insecure {
        return;
    }
    let mut tick = tokio::time::interval(INSECURE_WARNING_EVERY);
    loop {
        tick.tick().await;
        if !door.auth_required() {
            tracing::warn!(
                http = %config.http_addr,
                pg = %config.pg_addr,
                grpc = %config.grpc_addr,
                flight = %config.flight_addr,
                "serving other machines without users (--insecure): every client may read, write \
                 and delete everything; CREATE USER turns authentication on"
            );
        }
    }
}
