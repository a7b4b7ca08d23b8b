//! Access records: how users, grants and tokens are stored, as keys under the store's own
//! prefix (the catalog's or the metadata group's) with JSON values.
//!
//! ```text
//! 'U' user                          -> User (JSON)
//! 'G' user 0x00 scope 0x00 priv     -> ""          scope: '*' (all) or 'd' database
//! 'K' user 0x00 id                  -> Token (JSON)
//! ```
//!
//! User names hold no 0x00, so a user's grants and tokens are one key range each, removed
//! whole with the user.

use serde::{Deserialize, Serialize};

use super::{AccessError, AccessState, Grant, Privilege, Scope, Token, User};

const USER: u8 = b'U';
const GRANT: u8 = b'G';
const TOKEN: u8 = b'K';

/// One record operation, on a key relative to the store's prefix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum AccessOp {
    /// Writes a record.
    Put {
        /// Key.
        key: Vec<u8>,
        /// Value.
        value: Vec<u8>,
    },
    /// Removes a record.
    Delete {
        /// Key.
        key: Vec<u8>,
    },
    /// Removes every record in `[lo, hi)`.
    DeleteRange {
        /// First key.
        lo: Vec<u8>,
        /// End (exclusive).
        hi: Vec<u8>,
    },
}

fn key(kind: u8, parts: &[&[u8]]) -> Vec<u8> {
    let mut k = vec![kind];
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            k.push(0);
        }
        k.extend_from_slice(p);
    }
    k
}

fn scope_bytes(s: &Scope) -> Vec<u8> {
    match s {
        Scope::All => b"*".to_vec(),
        Scope::Database(d) => {
            let mut v = b"d".to_vec();
            v.extend_from_slice(d.as_bytes());
            v
        }
    }
}

fn grant_key(g: &Grant) -> Vec<u8> {
    key(GRANT, &[g.user.as_bytes(), &scope_bytes(&g.scope), g.privilege.name().as_bytes()])
}

fn json<T: Serialize>(v: &T) -> Result<Vec<u8>, AccessError> {
    serde_json::to_vec(v)
        .map_err(|e| AccessError::Corrupt { key: "(new record)".into(), why: e.to_string() })
}

pub(super) fn put_user(u: &User) -> Result<AccessOp, AccessError> {
    Ok(AccessOp::Put { key: key(USER, &[u.name.as_bytes()]), value: json(u)? })
}

pub(super) fn put_grant(g: &Grant) -> AccessOp {
    AccessOp::Put { key: grant_key(g), value: Vec::new() }
}

pub(super) fn delete_grant(g: &Grant) -> AccessOp {
    AccessOp::Delete { key: grant_key(g) }
}

pub(super) fn put_token(t: &Token) -> Result<AccessOp, AccessError> {
    Ok(AccessOp::Put { key: key(TOKEN, &[t.user.as_bytes(), t.id.as_bytes()]), value: json(t)? })
}

pub(super) fn delete_token(t: &Token) -> AccessOp {
    AccessOp::Delete { key: key(TOKEN, &[t.user.as_bytes(), t.id.as_bytes()]) }
}

/// The user's record and the ranges of its grants and tokens.
pub(super) fn drop_user(name: &str) -> Vec<AccessOp> {
    let range = |kind: u8| {
        let mut lo = key(kind, &[name.as_bytes()]);
        lo.push(0);
        let mut hi = lo.clone();
        if let Some(last) = hi.last_mut() {
            *last = 1;
        }
        AccessOp::DeleteRange { lo, hi }
    };
    vec![AccessOp::Delete { key: key(USER, &[name.as_bytes()]) }, range(GRANT), range(TOKEN)]
}

fn corrupt(key: &[u8], why: impl ToString) -> AccessError {
    AccessError::Corrupt { key: String::from_utf8_lossy(key).into_owned(), why: why.to_string() }
}

fn text(key: &[u8], b: &[u8]) -> Result<String, AccessError> {
    String::from_utf8(b.to_vec()).map_err(|_| corrupt(key, "not UTF-8"))
}

fn parse_grant(k: &[u8]) -> Result<Grant, AccessError> {
    let mut parts = k[1..].split(|b| *b == 0);
    let (Some(user), Some(scope), Some(privilege), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(corrupt(k, "not user, scope and privilege"));
    };
    let scope = match scope.split_first() {
        Some((b'*', [])) => Scope::All,
        Some((b'd', d)) => Scope::Database(text(k, d)?),
        _ => return Err(corrupt(k, "bad scope")),
    };
    let privilege =
        Privilege::parse(&text(k, privilege)?).ok_or_else(|| corrupt(k, "bad privilege"))?;
    Ok(Grant { user: text(k, user)?, scope, privilege })
}

fn in_range(k: &[u8], lo: &[u8], hi: &[u8]) -> bool {
    k >= lo && k < hi
}

pub(super) fn apply(state: &mut AccessState, op: &AccessOp) -> Result<(), AccessError> {
    match op {
        AccessOp::Put { key, value } => match key.first() {
            Some(&USER) => {
                let u: User = serde_json::from_slice(value).map_err(|e| corrupt(key, e))?;
                state.users.insert(u.name.clone(), u);
            }
            Some(&GRANT) => {
                state.grants.insert(parse_grant(key)?);
            }
            Some(&TOKEN) => {
                let t: Token = serde_json::from_slice(value).map_err(|e| corrupt(key, e))?;
                state.tokens.insert(t.hash.clone(), t);
            }
            _ => return Err(corrupt(key, "unknown record kind")),
        },
        AccessOp::Delete { key: k } => match k.first() {
            Some(&USER) => {
                state.users.remove(&text(k, &k[1..])?);
            }
            Some(&GRANT) => {
                state.grants.remove(&parse_grant(k)?);
            }
            Some(&TOKEN) => {
                state.tokens.retain(|_, t| key(TOKEN, &[t.user.as_bytes(), t.id.as_bytes()]) != *k);
            }
            _ => return Err(corrupt(k, "unknown record kind")),
        },
        AccessOp::DeleteRange { lo, hi } => {
            state.users.retain(|n, _| !in_range(&key(USER, &[n.as_bytes()]), lo, hi));
            state.grants.retain(|g| !in_range(&grant_key(g), lo, hi));
            state.tokens.retain(|_, t| {
                !in_range(&key(TOKEN, &[t.user.as_bytes(), t.id.as_bytes()]), lo, hi)
            });
        }
    }
    Ok(())
}
