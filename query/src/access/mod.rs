//! Users, privileges and bearer tokens: who may do what, kept as records in the catalog (a
//! single node) or in the cluster's metadata group, and checked at the front door.
//!
//! - A user has a password (hashed with Argon2id for HTTP Basic and InfluxDB `u`/`p` logins,
//!   plus a SCRAM-SHA-256 verifier for the PostgreSQL wire protocol; never the password) and any
//!   number of bearer tokens (only their SHA-256 is kept).
//! - A grant gives a user one [`Privilege`] on one database or on all of them. `READ` runs
//!   queries, `WRITE` writes rows (and creates tables by writing them), `DELETE` deletes, erases,
//!   drops tables and changes retention, `ADMIN` does everything on its databases; `ADMIN` on all
//!   databases also manages users.
//! - Authentication is required once any user exists. A server without users trusts every
//!   client, which it only allows on loopback (or when told `--insecure`).
//!
//! Changes are [`AccessChange`]s, planned against the current [`AccessState`] into record
//! operations ([`AccessOp`]) that the store writes durably; every replica installs the same
//! operations with [`AccessState::apply`].

mod password;
mod records;
pub mod statement;
mod tables;
mod token;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use password::{PasswordCheck, PasswordHash, ScramVerifier};
pub use records::AccessOp;
pub use tables::{access_table, ACCESS_TABLES};
pub use token::{new_token, token_hash, NewToken, TOKEN_PREFIX};

/// What a grant allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Privilege {
    /// Run queries.
    Read,
    /// Write rows (line protocol, `INSERT`).
    Write,
    /// `DELETE`, `ERASE`, `DROP TABLE`, retention changes.
    Delete,
    /// Everything, including DDL; on all databases, user management too.
    Admin,
}

impl Privilege {
    /// Every privilege.
    pub const ALL: [Privilege; 4] =
        [Privilege::Read, Privilege::Write, Privilege::Delete, Privilege::Admin];

    /// The privilege named `s` (case-insensitive).
    pub fn parse(s: &str) -> Option<Privilege> {
        Privilege::ALL.into_iter().find(|p| p.name().eq_ignore_ascii_case(s))
    }

    /// Its SQL name.
    pub fn name(self) -> &'static str {
        match self {
            Privilege::Read => "READ",
            Privilege::Write => "WRITE",
            Privilege::Delete => "DELETE",
            Privilege::Admin => "ADMIN",
        }
    }
}

impl fmt::Display for Privilege {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The databases a grant covers.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Scope {
    /// Every database, present and future (`ON ALL DATABASES`).
    All,
    /// One database.
    Database(String),
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::All => f.write_str("*"),
            Scope::Database(d) => f.write_str(d),
        }
    }
}

/// One grant.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Grant {
    /// The user.
    pub user: String,
    /// Where it applies.
    pub scope: Scope,
    /// What it allows.
    pub privilege: Privilege,
}

/// A user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    /// Name.
    pub name: String,
    /// Password hashes; `None`: the user logs in with tokens only.
    pub password: Option<PasswordHash>,
    /// When it was created (ms since the epoch).
    pub created_ms: u64,
}

/// A bearer token of a user (its secret is shown once, when created; only its hash is kept).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Token {
    /// Its id, to name it in `DROP TOKEN`.
    pub id: String,
    /// The user it authenticates as.
    pub user: String,
    /// SHA-256 of the secret, hex.
    pub hash: String,
    /// When it was created (ms since the epoch).
    pub created_ms: u64,
}

/// Why an access change or check failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AccessError {
    /// No valid credentials (HTTP 401, SQLSTATE 28P01).
    #[error("authentication failed: {0}")]
    Unauthenticated(String),
    /// Valid credentials without the privilege (HTTP 403, SQLSTATE 42501).
    #[error("permission denied: {0}")]
    Forbidden(String),
    /// A user management statement that cannot apply (unknown user, duplicate name...).
    #[error("{0}")]
    Invalid(String),
    /// A stored record that does not decode.
    #[error("access record {key}: {why}")]
    Corrupt {
        /// The record's key.
        key: String,
        /// What is wrong.
        why: String,
    },
}

/// Users, grants and tokens, as every node holds them in memory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessState {
    users: BTreeMap<String, User>,
    grants: BTreeSet<Grant>,
    /// Tokens by hash.
    tokens: BTreeMap<String, Token>,
}

/// A user name is 1 to 63 characters of letters, digits, `_`, `-`, `.` and `@`.
pub fn check_user_name(name: &str) -> Result<(), AccessError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "_-.@".contains(c));
    if ok {
        Ok(())
    } else {
        Err(AccessError::Invalid(format!(
            "invalid user name {name:?}: use 1 to 63 letters, digits, '_', '-', '.' or '@'"
        )))
    }
}

impl AccessState {
    /// True once any user exists (then every request must authenticate).
    pub fn has_users(&self) -> bool {
        !self.users.is_empty()
    }

    /// The user named `name`.
    pub fn user(&self, name: &str) -> Option<&User> {
        self.users.get(name)
    }

    /// Every user, by name.
    pub fn users(&self) -> impl Iterator<Item = &User> + '_ {
        self.users.values()
    }

    /// Every grant.
    pub fn grants(&self) -> impl Iterator<Item = &Grant> + '_ {
        self.grants.iter()
    }

    /// Every token.
    pub fn tokens(&self) -> impl Iterator<Item = &Token> + '_ {
        self.tokens.values()
    }

    /// The user a bearer token secret authenticates as.
    pub fn token_user(&self, secret: &str) -> Option<&str> {
        self.tokens.get(&token_hash(secret)).map(|t| t.user.as_str())
    }

    /// True if `user` may do `privilege` on `database` (`None`: on every database, as user
    /// management needs).
    pub fn allows(&self, user: &str, database: Option<&str>, privilege: Privilege) -> bool {
        self.grants.iter().any(|g| {
            g.user == user
                && (g.privilege == privilege || g.privilege == Privilege::Admin)
                && match (&g.scope, database) {
                    (Scope::All, _) => true,
                    (Scope::Database(d), Some(want)) => d == want,
                    (Scope::Database(_), None) => false,
                }
        })
    }

    /// Users holding `ADMIN` on all databases.
    fn admins(&self) -> impl Iterator<Item = &str> + '_ {
        self.grants
            .iter()
            .filter(|g| g.privilege == Privilege::Admin && g.scope == Scope::All)
            .map(|g| g.user.as_str())
    }

    /// Installs one record operation (what every replica does with a written change).
    pub fn apply(&mut self, op: &AccessOp) -> Result<(), AccessError> {
        records::apply(self, op)
    }
}

/// A change to users, grants or tokens, as a statement asks for it (passwords already hashed).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AccessChange {
    /// `CREATE USER`.
    CreateUser(User),
    /// `ALTER USER ... WITH PASSWORD`.
    SetPassword {
        /// The user.
        name: String,
        /// The new password's hashes.
        password: PasswordHash,
    },
    /// `DROP USER` (with its grants and tokens).
    DropUser {
        /// The user.
        name: String,
    },
    /// `GRANT`.
    Grant(Grant),
    /// `REVOKE`.
    Revoke(Grant),
    /// `CREATE TOKEN FOR`.
    CreateToken(Token),
    /// `DROP TOKEN`.
    DropToken {
        /// The token's id.
        id: String,
    },
}

impl AccessChange {
    /// The record operations that make the change, checked against `state`. The first user
    /// created gets `ADMIN` on all databases, and no change may leave users without such an
    /// administrator (nobody could manage them).
    pub fn plan(&self, state: &AccessState) -> Result<Vec<AccessOp>, AccessError> {
        let invalid = |m: String| Err(AccessError::Invalid(m));
        let known = |name: &str| {
            if state.users.contains_key(name) {
                Ok(())
            } else {
                Err(AccessError::Invalid(format!("user {name:?} does not exist")))
            }
        };
        let last_admin = |user: &str| {
            let mut admins = state.admins().filter(|a| *a != user);
            admins.next().is_none() && state.admins().any(|a| a == user)
        };
        Ok(match self {
            AccessChange::CreateUser(u) => {
                check_user_name(&u.name)?;
                if state.users.contains_key(&u.name) {
                    return invalid(format!("user {:?} already exists", u.name));
                }
                let mut ops = vec![records::put_user(u)?];
                if state.admins().next().is_none() {
                    let g = Grant {
                        user: u.name.clone(),
                        scope: Scope::All,
                        privilege: Privilege::Admin,
                    };
                    ops.push(records::put_grant(&g));
                }
                ops
            }
            AccessChange::SetPassword { name, password } => {
                known(name)?;
                let mut u = state.users[name].clone();
                u.password = Some(password.clone());
                vec![records::put_user(&u)?]
            }
            AccessChange::DropUser { name } => {
                known(name)?;
                if last_admin(name) {
                    return invalid(format!(
                        "{name:?} is the last user with ADMIN on all databases; grant it to \
                         another user first"
                    ));
                }
                records::drop_user(name)
            }
            AccessChange::Grant(g) => {
                known(&g.user)?;
                vec![records::put_grant(g)]
            }
            AccessChange::Revoke(g) => {
                known(&g.user)?;
                if !state.grants.contains(g) {
                    return invalid(format!(
                        "user {:?} has no {} grant on {}",
                        g.user,
                        g.privilege,
                        match &g.scope {
                            Scope::All => "all databases".to_string(),
                            Scope::Database(d) => format!("database {d:?}"),
                        }
                    ));
                }
                if g.privilege == Privilege::Admin && g.scope == Scope::All && last_admin(&g.user) {
                    return invalid(format!(
                        "{:?} is the last user with ADMIN on all databases; grant it to another \
                         user first",
                        g.user
                    ));
                }
                vec![records::delete_grant(g)]
            }
            AccessChange::CreateToken(t) => {
                known(&t.user)?;
                vec![records::put_token(t)?]
            }
            AccessChange::DropToken { id } => {
                let Some(t) = state.tokens.values().find(|t| &t.id == id) else {
                    return invalid(format!("no token with id {id:?}"));
                };
                vec![records::delete_token(t)]
            }
        })
    }
}

/// Where users, grants and tokens are kept: the single node's catalog, or the cluster's
/// metadata group.
#[async_trait]
pub trait AccessStore: Send + Sync + fmt::Debug {
    /// The state as of now.
    fn access(&self) -> Arc<AccessState>;

    /// Writes `ops` durably (on a cluster, through the metadata group) and installs them.
    async fn write_access(&self, ops: Vec<AccessOp>) -> crate::Result<()>;
}
