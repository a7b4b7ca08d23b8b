//! `ALTER CLUSTER`: statements about the cluster itself, not a database.
//!
//! ```text
//! ALTER CLUSTER SPLIT SHARD <id>
//! ALTER CLUSTER FINALIZE UPGRADE
//! ALTER CLUSTER SET AUTO FINALIZE AFTER '<duration>' | NEVER
//! CREATE JOIN TOKEN [VALID FOR '<duration>'] [USES <n> | USES UNLIMITED]
//! DROP JOIN TOKEN '<id>'
//! ```

use std::time::Duration;

use super::shard::{JoinTokenChange, UpgradeChange};
use crate::error::{QueryError, Result};

/// A parsed statement about the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClusterStatement {
    /// Mint or drop a join token.
    JoinToken(JoinTokenChange),
    /// Split shard `.0` in two by the hashes of its series.
    SplitShard(u64),
    /// Finalize an upgrade, or set when one finalizes by itself.
    Upgrade(UpgradeChange),
}

/// The longest auto-finalize delay (a year): longer is a typo for `NEVER`.
const MAX_AUTO_FINALIZE: Duration = Duration::from_secs(366 * 24 * 3600);

/// The most join tokens' uses one may admit (more: `USES UNLIMITED`).
const MAX_JOIN_USES: u32 = 10_000;
/// The longest a join token may live (longer: none, or a mistake).
const MAX_JOIN_LIFETIME: Duration = Duration::from_secs(30 * 24 * 3600);

/// True if `sql` is a statement about the cluster: `ALTER CLUSTER`, `CREATE JOIN TOKEN` or
/// `DROP JOIN TOKEN` (its first words).
pub fn is_alter_cluster(sql: &str) -> bool {
    let mut words = sql.split_whitespace().map(|w| w.trim_end_matches(';'));
    let (a, b, c) = (words.next(), words.next(), words.next());
    let is = |w: Option<&str>, k: &str| w.is_some_and(|w| w.eq_ignore_ascii_case(k));
    (is(a, "alter") && is(b, "cluster"))
        || ((is(a, "create") || is(a, "drop")) && is(b, "join") && is(c, "token"))
}

/// Parses a statement about the cluster.
pub fn parse_alter_cluster(sql: &str) -> Result<ClusterStatement> {
    let body = sql.trim().trim_end_matches(';');
    let words: Vec<&str> = body.split_whitespace().collect();
    let upper: Vec<String> = words.iter().map(|w| w.to_ascii_uppercase()).collect();
    if upper.get(1).is_some_and(|w| w == "JOIN") {
        return parse_join_token(&words, &upper).map(ClusterStatement::JoinToken);
    }
    match upper.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["ALTER", "CLUSTER", "SPLIT", "SHARD", id] => id
            .parse::<u64>()
            .ok()
            .filter(|id| *id > 0)
            .map(ClusterStatement::SplitShard)
            .ok_or_else(|| QueryError::invalid(format!("{id:?} is not a shard id"))),
        ["ALTER", "CLUSTER", "FINALIZE", "UPGRADE"] => {
            Ok(ClusterStatement::Upgrade(UpgradeChange::Finalize))
        }
        ["ALTER", "CLUSTER", "SET", "AUTO", "FINALIZE", "NEVER"] => {
            Ok(ClusterStatement::Upgrade(UpgradeChange::AutoFinalizeAfter(None)))
        }
        ["ALTER", "CLUSTER", "SET", "AUTO", "FINALIZE", "AFTER", _] => {
            let text = words[6].trim_matches('\'');
            let after = super::ddl::parse_retention(text)
                .ok()
                .flatten()
                .filter(|d| *d <= MAX_AUTO_FINALIZE)
                .ok_or_else(|| {
                    QueryError::invalid(format!(
                        "{:?} is not a delay (such as '1h' or '7d', at most a year)",
                        words[6]
                    ))
                })?;
            Ok(ClusterStatement::Upgrade(UpgradeChange::AutoFinalizeAfter(Some(after))))
        }
        _ => Err(QueryError::invalid(
            "ALTER CLUSTER takes SPLIT SHARD <id> (see system.shards for the ids), \
             FINALIZE UPGRADE, or SET AUTO FINALIZE AFTER '<duration>' | NEVER",
        )),
    }
}

/// `CREATE JOIN TOKEN [VALID FOR '<duration>'] [USES <n> | USES UNLIMITED]`,
/// `DROP JOIN TOKEN '<id>'`.
fn parse_join_token(words: &[&str], upper: &[String]) -> Result<JoinTokenChange> {
    let usage = || {
        QueryError::invalid(
            "join tokens: CREATE JOIN TOKEN [VALID FOR '<duration>'] [USES <n> | USES UNLIMITED], \
             or DROP JOIN TOKEN '<id>'",
        )
    };
    if upper[0] == "DROP" {
        let [_, _, _, id] = words else { return Err(usage()) };
        let id = id.trim_matches('\'');
        if id.is_empty() || id.len() > 64 || !id.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(QueryError::invalid(format!("{id:?} is not a join token id")));
        }
        return Ok(JoinTokenChange::Drop(id.to_string()));
    }
    let (mut valid_for, mut uses) = (Some(Duration::from_secs(3600)), Some(1));
    let mut rest = upper.iter().zip(words).skip(3);
    while let Some((w, _)) = rest.next() {
        match (w.as_str(), rest.next()) {
            ("VALID", Some((f, _))) if f == "FOR" => {
                let (_, text) = rest.next().ok_or_else(usage)?;
                let t = text.trim_matches('\'');
                valid_for = match super::ddl::parse_retention(t) {
                    Ok(Some(d)) if d <= MAX_JOIN_LIFETIME => Some(d),
                    _ => {
                        return Err(QueryError::invalid(format!(
                            "{text} is not a lifetime (such as '1h' or '7d', at most 30 days)"
                        )))
                    }
                };
            }
            ("USES", Some((n, _))) if n == "UNLIMITED" => uses = None,
            ("USES", Some((n, _))) => {
                uses = Some(n.parse().ok().filter(|n| (1..=MAX_JOIN_USES).contains(n)).ok_or_else(
                    || {
                        QueryError::invalid(format!(
                            "USES {n}: from 1 to {MAX_JOIN_USES} joins, or UNLIMITED"
                        ))
                    },
                )?)
            }
            _ => return Err(usage()),
        }
    }
    Ok(JoinTokenChange::Create { valid_for, uses })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_statements_parse_and_others_are_refused() {
        assert!(is_alter_cluster("  alter Cluster split shard 3;"));
        assert!(!is_alter_cluster("ALTER TABLE cpu SET (retention = '1d')"));
        assert!(!is_alter_cluster("ALTER"));
        assert_eq!(
            parse_alter_cluster("alter cluster split shard 12 ;").unwrap(),
            ClusterStatement::SplitShard(12)
        );
        assert_eq!(
            parse_alter_cluster("alter cluster finalize upgrade;").unwrap(),
            ClusterStatement::Upgrade(UpgradeChange::Finalize)
        );
        assert_eq!(
            parse_alter_cluster("ALTER CLUSTER SET AUTO FINALIZE AFTER '2h'").unwrap(),
            ClusterStatement::Upgrade(UpgradeChange::AutoFinalizeAfter(Some(Duration::from_secs(
                7200
            ))))
        );
        assert_eq!(
            parse_alter_cluster("ALTER CLUSTER SET AUTO FINALIZE NEVER").unwrap(),
            ClusterStatement::Upgrade(UpgradeChange::AutoFinalizeAfter(None))
        );
        assert!(is_alter_cluster("create join token valid for '2h'"));
        assert!(is_alter_cluster("DROP JOIN TOKEN 'ab12'"));
        assert!(!is_alter_cluster("CREATE TABLE join (x int)"));
        assert_eq!(
            parse_alter_cluster("CREATE JOIN TOKEN").unwrap(),
            ClusterStatement::JoinToken(JoinTokenChange::Create {
                valid_for: Some(Duration::from_secs(3600)),
                uses: Some(1)
            })
        );
        assert_eq!(
            parse_alter_cluster("create join token valid for '7d' uses 5;").unwrap(),
            ClusterStatement::JoinToken(JoinTokenChange::Create {
                valid_for: Some(Duration::from_secs(7 * 86_400)),
                uses: Some(5)
            })
        );
        assert_eq!(
            parse_alter_cluster("CREATE JOIN TOKEN USES UNLIMITED").unwrap(),
            ClusterStatement::JoinToken(JoinTokenChange::Create {
                valid_for: Some(Duration::from_secs(3600)),
                uses: None
            })
        );
        assert_eq!(
            parse_alter_cluster("DROP JOIN TOKEN 'a1b2c3d4e5f6'").unwrap(),
            ClusterStatement::JoinToken(JoinTokenChange::Drop("a1b2c3d4e5f6".into()))
        );
        for bad in [
            "CREATE JOIN TOKEN VALID FOR '90d'",
            "CREATE JOIN TOKEN USES 0",
            "CREATE JOIN TOKEN USES 99999999",
            "CREATE JOIN TOKEN FOR ME",
            "CREATE JOIN TOKEN VALID FOR",
            "DROP JOIN TOKEN",
            "DROP JOIN TOKEN 'a;b'",
            "ALTER CLUSTER FINALIZE",
            "ALTER CLUSTER FINALIZE UPGRADE NOW",
            "ALTER CLUSTER SET AUTO FINALIZE AFTER 'soon'",
            "ALTER CLUSTER SET AUTO FINALIZE AFTER '9999d'",
            "ALTER CLUSTER SPLIT SHARD",
            "ALTER CLUSTER SPLIT SHARD x",
            "ALTER CLUSTER SPLIT SHARD 0",
            "ALTER CLUSTER SPLIT SHARD -1",
            "ALTER CLUSTER SPLIT SHARD 1 2",
            "ALTER CLUSTER MERGE SHARD 1",
        ] {
            assert!(parse_alter_cluster(bad).is_err(), "{bad} parsed");
        }
    }
}
