//! Join tokens: besides a certificate the cluster CA signed, a node joining the cluster shows a
//! token an admin minted (`CREATE JOIN TOKEN [VALID FOR '1h'] [USES n | USES UNLIMITED]`, one use
//! and an hour by default), checked by the metadata leader under the lock that serializes joins
//! (kubeadm's bootstrap tokens, CockroachDB's join tokens).
//!
//! - A token is `ebbj_`, its id (12 hex digits), `_`, and 43 characters of URL-safe base64 of 32
//!   random bytes; the cluster keeps only its SHA-256, and shows the token once.
//! - A use is spent in the same metadata batch that registers the node, and remembered with the
//!   joining process's nonce: a join retried after a lost answer gets the same node id without
//!   spending another use.
//! - The node that creates a cluster registers the token in its `--join-token-file` (the
//!   chart's Secret), if any, as the token `bootstrap`: without expiry or a limit of uses, so that
//!   the chart's other pods join with it, and scaling out later does too. An admin replaces it
//!   with `DROP JOIN TOKEN 'bootstrap'` and a minted one in the Secret.
//! - Tokens are required once the cluster runs at the version that has them
//!   ([`super::version::Gate::JoinTokens`]): a cluster a previous release created needs one minted
//!   after it is finalized.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine;
use ebb_query::error::QueryError;
use ebb_query::sql::shard::{JoinTokenChange, JoinTokenRow};
use rand::RngCore;
use serde::{Deserialize, Serialize};

/// What every minted token starts with.
pub const PREFIX: &str = "ebbj_";

/// The id of the token a new cluster's first node registers from its token file.
pub const BOOTSTRAP: &str = "bootstrap";

/// The shortest token a token file may hold.
pub const MIN_FILE_TOKEN: usize = 32;

/// The most joins one token remembers (for retried joins).
const REMEMBERED_USES: usize = 64;

/// The longest lifetime a minted token may have.
pub const MAX_LIFETIME: Duration = Duration::from_secs(30 * 24 * 3600);

/// The most uses a minted token may have (more: `USES UNLIMITED`).
pub const MAX_USES: u32 = 10_000;

/// A join token as the cluster keeps it (no secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinToken {
    /// Its id (`bootstrap` for the first node's).
    pub id: String,
    /// SHA-256 of the token, hex.
    pub hash: String,
    /// When it was made, and by whom.
    pub created_ms: u64,
    /// Who made it.
    pub created_by: String,
    /// When it stops admitting nodes (`None`: never).
    pub expires_ms: Option<u64>,
    /// Joins it still admits (`None`: any number).
    pub uses_left: Option<u32>,
    /// The nodes it admitted, latest last (the most recent [`REMEMBERED_USES`]).
    pub used_by: Vec<JoinUse>,
}

/// One join a token admitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinUse {
    /// The node id it got.
    pub node: u64,
    /// The joining process's nonce.
    pub nonce: String,
}

/// A token just minted: the secret to show once, and the record to keep.
#[derive(Debug)]
pub struct Minted {
    /// The token.
    pub secret: String,
    /// The record.
    pub record: JoinToken,
}

/// Mints a token by `by` at `now_ms`, valid for `valid_for` (`None`: never expires) and `uses`
/// joins (`None`: any number).
pub fn mint(by: &str, now_ms: u64, valid_for: Option<Duration>, uses: Option<u32>) -> Minted {
    let mut raw = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut raw);
    let mut id = [0u8; 6];
    rand::rngs::OsRng.fill_bytes(&mut id);
    let id: String = id.iter().map(|b| format!("{b:02x}")).collect();
    let body = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw);
    let secret = format!("{PREFIX}{id}_{body}");
    let record = JoinToken {
        id,
        hash: ebb_query::access::token_hash(&secret),
        created_ms: now_ms,
        created_by: by.to_string(),
        expires_ms: valid_for.map(|d| now_ms.saturating_add(d.as_millis() as u64)),
        uses_left: uses,
        used_by: Vec::new(),
    };
    Minted { secret, record }
}

/// The record of the token in a new cluster's first node's token file.
pub fn bootstrap(secret: &str, now_ms: u64) -> JoinToken {
    JoinToken {
        id: BOOTSTRAP.into(),
        hash: ebb_query::access::token_hash(secret),
        created_ms: now_ms,
        created_by: "the node that created the cluster".into(),
        expires_ms: None,
        uses_left: None,
        used_by: Vec::new(),
    }
}

/// The id a token names: its own if minted, else the bootstrap token's.
fn id_of(secret: &str) -> &str {
    secret
        .strip_prefix(PREFIX)
        .and_then(|rest| rest.split_once('_'))
        .map(|(id, _)| id)
        .filter(|id| id.len() == 12 && id.bytes().all(|b| b.is_ascii_hexdigit()))
        .unwrap_or(BOOTSTRAP)
}

/// What a join with a token comes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Admitted: the token's record with the use spent (to write with the node's).
    Admit(JoinToken),
    /// The same join again (its answer was lost): the node id it got.
    Again(u64),
}

/// Checks `secret`, shown by a joining process with `nonce`, against `tokens` at `now_ms`: why
/// it is refused, or what admitting it changes (`node`: the id the node would get).
pub fn admit(
    tokens: &BTreeMap<String, JoinToken>,
    secret: Option<&str>,
    nonce: &str,
    node: u64,
    now_ms: u64,
) -> Result<Admission, String> {
    let Some(secret) = secret.filter(|s| !s.is_empty()) else {
        return Err(
            "joining this cluster needs a join token: an admin mints one with CREATE \
                    JOIN TOKEN, and the node reads it from --join-token-file (EBB_JOIN_TOKEN_FILE)"
                .into(),
        );
    };
    let id = id_of(secret);
    let unknown = || {
        "the join token is not one of this cluster's (dropped, mistyped, or minted by another \
         cluster)"
            .to_string()
    };
    let t = tokens.get(id).ok_or_else(unknown)?;
    let hash = ebb_query::access::token_hash(secret);
    if !constant_time_eq(hash.as_bytes(), t.hash.as_bytes()) {
        return Err(unknown());
    }
    if let Some(u) = t.used_by.iter().find(|u| !nonce.is_empty() && u.nonce == nonce) {
        return Ok(Admission::Again(u.node));
    }
    if let Some(at) = t.expires_ms.filter(|at| now_ms >= *at) {
        let when = chrono::DateTime::from_timestamp_millis(at as i64)
            .map_or_else(|| at.to_string(), |d| d.to_rfc3339());
        return Err(format!("join token {} expired at {when}: mint another", t.id));
    }
    if t.uses_left == Some(0) {
        return Err(format!("join token {} is used up: mint another", t.id));
    }
    let mut spent = t.clone();
    spent.uses_left = t.uses_left.map(|n| n - 1);
    spent.used_by.push(JoinUse { node, nonce: nonce.chars().take(64).collect() });
    let extra = spent.used_by.len().saturating_sub(REMEMBERED_USES);
    spent.used_by.drain(..extra);
    Ok(Admission::Admit(spent))
}

/// `CREATE JOIN TOKEN` and `DROP JOIN TOKEN`, as `issuer`, from any node (the metadata leader
/// writes the record).
pub async fn change(
    meta: &super::meta::Meta,
    change: JoinTokenChange,
    issuer: &str,
) -> Result<JoinTokenRow, QueryError> {
    let mut b = ebb_storage::WriteBatch::new();
    let row = match change {
        JoinTokenChange::Create { valid_for, uses } => {
            let by = if issuer.is_empty() { "admin" } else { issuer };
            let m = mint(by, ebb_query::now_ms(), valid_for, uses);
            super::view::put_join_token(&mut b, &m.record);
            JoinTokenRow { token: Some(m.secret), ..row(&m.record) }
        }
        JoinTokenChange::Drop(id) => {
            let known = meta.with_view(|v| v.join_tokens.get(&id).cloned());
            let t = known.ok_or_else(|| QueryError::invalid(format!("no join token {id}")))?;
            super::view::drop_join_token(&mut b, &id);
            row(&t)
        }
        _ => return Err(QueryError::Unsupported("this join token change".into())),
    };
    meta.change(b).await.map_err(|e| QueryError::Unavailable(e.to_string()))?;
    Ok(row)
}

/// The join tokens, without their secrets (`system.join_tokens`).
pub fn rows(meta: &super::meta::Meta) -> Vec<JoinTokenRow> {
    meta.with_view(|v| v.join_tokens.values().map(row).collect())
}

fn row(t: &JoinToken) -> JoinTokenRow {
    JoinTokenRow {
        id: t.id.clone(),
        token: None,
        created_by: t.created_by.clone(),
        created_ms: t.created_ms,
        expires_ms: t.expires_ms,
        uses_left: t.uses_left,
        used_by: t.used_by.iter().map(|u| u.node).collect(),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A new process's nonce (joins it retries carry it).
pub fn nonce() -> String {
    let mut raw = [0u8; 12];
    rand::rngs::OsRng.fill_bytes(&mut raw);
    raw.iter().map(|b| format!("{b:02x}")).collect()
}

/// Reads the token in `path` (trimmed); refuses a file too short to be a secret.
pub fn read_file(path: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("join token file {}: {e}", path.display()))?;
    let token = text.trim().to_string();
    if token.len() < MIN_FILE_TOKEN || token.contains(char::is_whitespace) {
        return Err(format!(
            "join token file {}: a token is one word of at least {MIN_FILE_TOKEN} characters \
             (CREATE JOIN TOKEN makes one, as does `head -c 32 /dev/urandom | base64`)",
            path.display()
        ));
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_admit_within_their_lifetime_and_uses_and_a_retry_is_not_a_use() {
        let m = mint("admin", 1_000, Some(Duration::from_secs(60)), Some(1));
        assert!(m.secret.starts_with(PREFIX) && m.secret.len() == 5 + 12 + 1 + 43);
        assert!(!m.record.hash.contains(&m.secret[18..]));
        let mut tokens = BTreeMap::from([(m.record.id.clone(), m.record.clone())]);
        let first = admit(&tokens, Some(&m.secret), "n1", 4, 2_000).unwrap();
        let Admission::Admit(spent) = first else { panic!("admitted") };
        assert_eq!(spent.uses_left, Some(0));
        tokens.insert(spent.id.clone(), spent);
        assert_eq!(admit(&tokens, Some(&m.secret), "n1", 5, 3_000), Ok(Admission::Again(4)));
        let used = admit(&tokens, Some(&m.secret), "n2", 5, 3_000).unwrap_err();
        assert!(used.contains("is used up"), "{used}");
        let late = mint("admin", 1_000, Some(Duration::from_secs(1)), None);
        let tokens = BTreeMap::from([(late.record.id.clone(), late.record.clone())]);
        let expired = admit(&tokens, Some(&late.secret), "n", 4, 2_000).unwrap_err();
        assert!(expired.contains("expired at 1970-01-01T00:00:02"), "{expired}");
        let wrong = format!("{}x", &late.secret[..late.secret.len() - 1]);
        let unknown = admit(&tokens, Some(&wrong), "n", 4, 1_500).unwrap_err();
        assert!(unknown.contains("not one of this cluster's"), "{unknown}");
        let none = admit(&tokens, None, "n", 4, 1_500).unwrap_err();
        assert!(none.contains("needs a join token"), "{none}");
    }

    #[test]
    fn the_bootstrap_token_is_any_long_secret_without_limits() {
        let secret = "c2VjcmV0LXRva2VuLWZvci10aGUtY2hhcnQtMDEyMzQ1Njc4OQ";
        let t = bootstrap(secret, 5);
        let tokens = BTreeMap::from([(t.id.clone(), t)]);
        for node in 2..20 {
            let nonce = format!("n{node}");
            let Ok(Admission::Admit(_)) = admit(&tokens, Some(secret), &nonce, node, u64::MAX - 1)
            else {
                panic!("the bootstrap token admits any number of nodes, forever")
            };
        }
        assert!(admit(&tokens, Some("something-else-entirely-0123456789"), "n", 2, 9).is_err());
    }
}
