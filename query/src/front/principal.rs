//! Who is asking: the user a request authenticated as, the protocol it came by and the client's
//! address. Deletions record it (`issued_by`), refusals log it.

use std::fmt;
use std::net::SocketAddr;

/// The protocol a request came by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Protocol {
    /// HTTP (line protocol, `/v1/sql`, the CLI).
    Http,
    /// The PostgreSQL wire protocol.
    Postgres,
    /// Arrow Flight SQL.
    Flight,
    /// Inside the server (retention purges, tests).
    Internal,
}

impl Protocol {
    /// Its name in logs and audit records.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Http => "http",
            Protocol::Postgres => "postgres",
            Protocol::Flight => "flight",
            Protocol::Internal => "internal",
        }
    }
}

/// An authenticated client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The user; `None` on a server without users, which trusts every client.
    pub user: Option<String>,
    /// How it connected.
    pub protocol: Protocol,
    /// From where, if over the network.
    pub client: Option<SocketAddr>,
}

impl Principal {
    /// A principal inside the server, or any client of a server without users.
    pub fn trusted(protocol: Protocol, client: Option<SocketAddr>) -> Principal {
        Principal { user: None, protocol, client }
    }

    /// The user's name, or `(anonymous)` for a server without users.
    pub fn user_name(&self) -> &str {
        self.user.as_deref().unwrap_or("(anonymous)")
    }
}

impl fmt::Display for Principal {
    /// `alice via postgres from 10.0.0.7:51234`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} via {}", self.user_name(), self.protocol.name())?;
        if let Some(a) = self.client {
            write!(f, " from {a}")?;
        }
        Ok(())
    }
}

/// What a client presented.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Credentials {
    /// Nothing.
    None,
    /// A user name and password (HTTP Basic, InfluxDB v1 `u`/`p`).
    Password {
        /// User name.
        user: String,
        /// Password.
        password: String,
    },
    /// A bearer token (HTTP `Authorization: Bearer` or InfluxDB v2 `Token`).
    Token(String),
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credentials::None => f.write_str("None"),
            Credentials::Password { user, .. } => write!(f, "Password({user}, ***)"),
            Credentials::Token(_) => f.write_str("Token(***)"),
        }
    }
}
