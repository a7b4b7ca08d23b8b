//! `ALTER CLUSTER`: statements about the cluster itself, not a database.
//!
//! ```text
//! ALTER CLUSTER SPLIT SHARD <id>
//! ALTER CLUSTER FINALIZE UPGRADE
//! ALTER CLUSTER SET AUTO FINALIZE AFTER '<duration>' | NEVER
//! ```

use std::time::Duration;

use super::shard::UpgradeChange;
use crate::error::{QueryError, Result};

/// A parsed `ALTER CLUSTER` statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClusterStatement {
    /// Split shard `.0` in two by the hashes of its series.
    SplitShard(u64),
    /// Finalize an upgrade, or set when one finalizes by itself.
    Upgrade(UpgradeChange),
}

/// The longest auto-finalize delay (a year): longer is a typo for `NEVER`.
const MAX_AUTO_FINALIZE: Duration = Duration::from_secs(366 * 24 * 3600);

/// True if `sql` is an `ALTER CLUSTER` statement (its first two words).
pub fn is_alter_cluster(sql: &str) -> bool {
    let mut words = sql.split_whitespace();
    matches!(
        (words.next(), words.next()),
        (Some(a), Some(c)) if a.eq_ignore_ascii_case("alter")
            && c.trim_end_matches(';').eq_ignore_ascii_case("cluster")
    )
}

/// Parses an `ALTER CLUSTER` statement.
pub fn parse_alter_cluster(sql: &str) -> Result<ClusterStatement> {
    let body = sql.trim().trim_end_matches(';');
    let words: Vec<&str> = body.split_whitespace().collect();
    let upper: Vec<String> = words.iter().map(|w| w.to_ascii_uppercase()).collect();
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
        for bad in [
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
