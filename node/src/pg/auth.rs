//! Logins over the PostgreSQL wire protocol. A server without users accepts every client as
//! it is; once a user exists, a client logs in with SCRAM-SHA-256 against the verifier the
//! front door keeps (the password never crosses the wire, nor is it stored). Which of the two
//! a connection gets is decided at its startup message and kept for its life.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use ebb_query::front::{FrontDoor, Principal, Protocol};
use futures::{Sink, SinkExt};
use pgwire::api::auth::noop::NoopStartupHandler;
use pgwire::api::auth::sasl::scram::{ScramAuth, ScramSecret};
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::StartupHandler;
use pgwire::api::auth::{
    AuthSource, DefaultServerParameterProvider, LoginInfo, Password, ServerParameterProvider,
};
use pgwire::api::{ClientInfo, ConnectionManager, METADATA_USER};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::startup::ParameterStatus;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use tracing::debug;

/// SCRAM verifiers from the front door's users.
#[derive(Debug)]
struct Verifiers {
    door: Arc<FrontDoor>,
}

#[async_trait]
impl AuthSource for Verifiers {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        // Never called for SCRAM (`get_scram_secret` answers); no password is kept to give.
        Err(PgWireError::InvalidPassword(login.user().unwrap_or_default().to_owned()))
    }

    async fn get_scram_secret(&self, login: &LoginInfo) -> PgWireResult<(ScramSecret, Option<()>)> {
        let user = login.user().unwrap_or_default();
        let client = login.host().parse::<std::net::IpAddr>().ok();
        if let Some(why) = self.door.login_blocked(user, client) {
            debug!(user, host = login.host(), "PostgreSQL login refused: too many failures");
            // Told as such, not as a wrong password (which it may not be).
            let info = pgwire::error::ErrorInfo::new("FATAL".to_owned(), "28000".to_owned(), why);
            return Err(PgWireError::UserError(Box::new(info)));
        }
        let Some(v) = self.door.scram_verifier(user) else {
            debug!(user, host = login.host(), "PostgreSQL login of a user without a password");
            return Err(PgWireError::InvalidPassword(user.to_owned()));
        };
        Ok((
            ScramSecret::Verifier {
                salt: v.salt,
                iterations: v.iterations as usize,
                stored_key: v.stored_key,
                server_key: v.server_key,
            },
            None,
        ))
    }
}

/// How a connection logs in: decided at its startup message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Login {
    /// A server without users: trusted as it is.
    Trusted,
    /// SCRAM-SHA-256 as the startup message's user.
    Scram,
}

/// The connection's principal, once logged in.
pub(super) fn principal<C: ClientInfo + ?Sized>(client: &C) -> Principal {
    let addr = Some(client.socket_addr());
    match client.session_extensions().get::<Login>().as_deref() {
        Some(Login::Scram) => Principal {
            user: client.metadata().get(METADATA_USER).cloned(),
            protocol: Protocol::Postgres,
            client: addr,
        },
        _ => Principal::trusted(Protocol::Postgres, addr),
    }
}

/// The parameters a connection is told at its start: pgwire's, with PostgreSQL's version as
/// EbbDB answers `version()`, and the connection's database as its `search_path` (the schema
/// its tables are listed in).
#[derive(Debug)]
struct Parameters(DefaultServerParameterProvider);

impl Parameters {
    fn new() -> Parameters {
        let mut parameters = DefaultServerParameterProvider::default();
        parameters.server_version = ebb_query::sql::pg_catalog::PG_VERSION.to_string();
        Parameters(parameters)
    }
}

impl ServerParameterProvider for Parameters {
    fn server_parameters<C: ClientInfo>(&self, client: &C) -> Option<HashMap<String, String>> {
        let mut parameters = self.0.server_parameters(client)?;
        parameters.insert("search_path".to_string(), super::database_name(client));
        Some(parameters)
    }
}

/// A startup handler without authentication (for a server without users).
struct Trust {
    connections: Arc<ConnectionManager>,
}

#[async_trait]
impl NoopStartupHandler for Trust {
    fn connection_manager(&self) -> Option<Arc<ConnectionManager>> {
        Some(Arc::clone(&self.connections))
    }

    /// pgwire's trusted startup sends its own default parameters: those that differ follow
    /// (a client keeps the last value it is sent).
    async fn post_startup<C>(
        &self,
        client: &mut C,
        _message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let parameters = Parameters::new().server_parameters(client).unwrap_or_default();
        for name in ["server_version", "search_path"] {
            if let Some(value) = parameters.get(name) {
                let status = ParameterStatus::new(name.to_string(), value.clone());
                client.send(PgWireBackendMessage::ParameterStatus(status)).await?;
            }
        }
        Ok(())
    }
}

/// The startup handler of every connection.
pub(super) struct Startup {
    door: Arc<FrontDoor>,
    /// The port has a certificate: a client must use TLS.
    tls_required: bool,
    trust: Trust,
    scram: SASLAuthStartupHandler<Parameters>,
}

impl Startup {
    pub(super) fn new(
        door: Arc<FrontDoor>,
        connections: Arc<ConnectionManager>,
        tls_required: bool,
    ) -> Startup {
        let scram = ScramAuth::new(Arc::new(Verifiers { door: door.clone() }));
        let scram = SASLAuthStartupHandler::new(Arc::new(Parameters::new()))
            .with_scram(scram)
            .with_connection_manager(connections.clone());
        Startup { door, tls_required, trust: Trust { connections }, scram }
    }
}

#[async_trait]
impl StartupHandler for Startup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let login = if let PgWireFrontendMessage::Startup(_) = &message {
            if self.tls_required && !client.is_secure() {
                debug!(client = %client.socket_addr(), "PostgreSQL startup without TLS refused");
                return Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                    "FATAL".into(),
                    "28000".into(),
                    "this server requires TLS: connect with sslmode=require or verify-full".into(),
                ))));
            }
            let login = if self.door.auth_required() { Login::Scram } else { Login::Trusted };
            client.session_extensions().insert(login);
            login
        } else {
            client.session_extensions().get::<Login>().map_or(Login::Scram, |l| *l)
        };
        match login {
            Login::Trusted => self.trust.on_startup(client, message).await,
            Login::Scram => {
                let r = self.scram.on_startup(client, message).await;
                let Err(PgWireError::InvalidPassword(named)) = r else { return r };
                // pgwire names no user when the proof is wrong: the startup packet's is the one.
                let user = match named.is_empty() {
                    true => client.metadata().get("user").cloned().unwrap_or_default(),
                    false => named,
                };
                let why = format!("SCRAM login of {user:?} failed");
                self.door.note_auth_failure(
                    Protocol::Postgres,
                    &user,
                    Some(client.socket_addr()),
                    &why,
                );
                Err(PgWireError::InvalidPassword(user))
            }
        }
    }
}
