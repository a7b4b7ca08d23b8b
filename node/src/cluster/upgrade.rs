//! Finalizing an upgrade, on the metadata leader, and where one stands (`system.cluster`); see
//! [`super::version`] for what cluster versions are.
//!
//! Finalizing asks every node that has not left for its binary (the `Leaders` call, as
//! `system.nodes` does), under the lock that serializes joins, and raises the active version to
//! the newest all of them support. A node that does not answer blocks it: its binary is
//! unknown. By itself, the metadata leader finalizes once every node has supported a newer
//! version for the cluster's delay (`ALTER CLUSTER SET AUTO FINALIZE AFTER`, a day by default);
//! the delay counts from when the current leader first saw it so, and restarts when leadership
//! moves.

use std::time::{Duration, Instant};

use ebb_query::error::QueryError;
use ebb_query::sql::shard::{ClusterRow, UpgradeChange};
use ebb_raft::transport::Connections;
use tonic::Status;

use super::meta::{Meta, MetaError};
use super::proto::cluster_client::ClusterClient;
use super::proto::{upgrade_request, LeadersReply, LeadersRequest, UpgradeReply, UpgradeRequest};
use super::version::{ClusterVersion, PeerVersion, VersionRange};
use super::view::{self, ClusterVersionRecord, NodeInfo, NodeState, UpgradePolicy};

/// How long finalizing waits for each node to describe its binary.
const ASK: Duration = Duration::from_secs(2);

/// How often the metadata leader looks whether an upgrade can finalize by itself.
const AUTO_CHECK: Duration = Duration::from_secs(5);

/// The binary a node's `Leaders` answer describes.
pub fn reply_version(r: &LeadersReply) -> PeerVersion {
    match r.max_cluster_version {
        0 => PeerVersion { binary: None, range: VersionRange::LEGACY },
        max => PeerVersion {
            binary: Some(r.binary_version.chars().take(64).collect()),
            range: VersionRange { min: r.min_cluster_version.min(max), max },
        },
    }
}

/// The `Leaders` answer of the node at `addr`, if it comes within `wait`.
pub async fn ask(conns: &Connections, addr: &str, wait: Duration) -> Option<LeadersReply> {
    let ch = conns.channel(addr).ok()?;
    let call = async move { ClusterClient::new(ch).leaders(LeadersRequest {}).await };
    Some(tokio::time::timeout(wait, call).await.ok()?.ok()?.into_inner())
}

/// Every node that has not left, with its binary as it says now (`None`: it did not answer
/// within `wait`); this node answers for itself.
async fn members(meta: &Meta, wait: Duration) -> Vec<(NodeInfo, Option<PeerVersion>)> {
    let view = meta.view();
    let nodes: Vec<NodeInfo> =
        view.nodes.values().filter(|n| n.state != NodeState::Removed).cloned().collect();
    let calls = nodes.iter().map(|n| async move {
        if n.id == meta.node() {
            return Some(meta.versions().me());
        }
        ask(meta.conns(), &n.grpc_addr, wait).await.map(|r| reply_version(&r))
    });
    let versions = futures::future::join_all(calls).await;
    nodes.into_iter().zip(versions).collect()
}

/// Where an upgrade stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Standing {
    /// Every node's binary supports `to`, above the active version.
    Finalizable { to: ClusterVersion },
    /// Nothing to finalize (why, as a sentence).
    Current(String),
    /// Nothing to finalize until a node whose binary is older is upgraded (which, as a
    /// sentence).
    Behind(String),
    /// Whether it could finalize is unknown (why).
    Unknown(String),
}

/// Where an upgrade stands at `active` with `members`' binaries.
fn standing(active: ClusterVersion, members: &[(NodeInfo, Option<PeerVersion>)]) -> Standing {
    let mut target = ClusterVersion::MAX;
    let mut oldest = None;
    for (n, v) in members {
        let Some(v) = v else {
            return Standing::Unknown(format!(
                "node {} at {} does not answer: the cluster versions its binary supports are \
                 unknown",
                n.id, n.grpc_addr
            ));
        };
        if v.range.max < target {
            target = v.range.max;
            oldest = Some((n.id, v.describe()));
        }
    }
    match oldest {
        Some(_) if target > active => Standing::Finalizable { to: target },
        Some((id, binary))
            if members.iter().any(|(_, v)| v.as_ref().is_some_and(|v| v.range.max > active)) =>
        {
            Standing::Behind(format!("node {id} runs {binary}: upgrade it before finalizing"))
        }
        _ => Standing::Current(format!(
            "every node runs at cluster version {active}, the newest its binary supports"
        )),
    }
}

/// Raises the active cluster version to the newest every node supports (on the metadata
/// leader), as `by`: the versions before and after.
pub async fn finalize(
    meta: &Meta,
    by: &str,
) -> Result<(ClusterVersion, ClusterVersion), MetaError> {
    if !meta.is_leader() {
        return Err(MetaError::NotLeader(meta.leader()));
    }
    // Joins wait: no node of an older binary joins between the question and the record.
    let _g = meta.lock_changes().await;
    let active = meta.view().active_version();
    let to = match standing(active, &members(meta, ASK).await) {
        Standing::Finalizable { to } => to,
        Standing::Current(why) | Standing::Behind(why) => {
            return Err(MetaError::Failed(format!(
                "nothing to finalize at cluster version {active}: {why}"
            )))
        }
        Standing::Unknown(why) => {
            return Err(MetaError::Failed(format!("cannot finalize: {why}")));
        }
    };
    let mut b = ebb_storage::WriteBatch::new();
    let by = if by.is_empty() { "admin" } else { by };
    let record = ClusterVersionRecord { active: to, since_ms: ebb_query::now_ms(), by: by.into() };
    view::put_cluster_version(&mut b, &record);
    meta.propose(b).await?;
    tracing::info!(from = active, to, by, "upgrade finalized");
    Ok((active, to))
}

/// Sets how long after every node supports a newer version the upgrade finalizes by itself
/// (on the metadata leader).
async fn set_auto(meta: &Meta, after: Option<Duration>) -> Result<(), MetaError> {
    if !meta.is_leader() {
        return Err(MetaError::NotLeader(meta.leader()));
    }
    let policy = UpgradePolicy {
        auto_finalize_after_ms: after.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    };
    let mut b = ebb_storage::WriteBatch::new();
    view::put_upgrade_policy(&mut b, &policy);
    meta.propose(b).await
}

/// Makes `change` here, on the metadata leader: the active version after it, and a sentence.
async fn change_here(
    meta: &Meta,
    change: UpgradeChange,
    by: &str,
) -> Result<(ClusterVersion, String), MetaError> {
    match change {
        UpgradeChange::Finalize => {
            let (from, to) = finalize(meta, by).await?;
            Ok((
                to,
                format!(
                    "finalized: the cluster runs at cluster version {to} (it ran at {from}); \
                     nodes can no longer be rolled back to a binary without it"
                ),
            ))
        }
        UpgradeChange::AutoFinalizeAfter(after) => {
            set_auto(meta, after).await?;
            let when = match after {
                Some(d) => format!(
                    "upgrades finalize by themselves {} after every node supports a newer \
                     cluster version",
                    ebb_query::db::human_duration(d.as_secs())
                ),
                None => "upgrades finalize only with ALTER CLUSTER FINALIZE UPGRADE".into(),
            };
            Ok((meta.view().active_version(), when))
        }
        _ => Err(MetaError::Failed("this change is not supported".into())),
    }
}

/// `ALTER CLUSTER FINALIZE UPGRADE` and `ALTER CLUSTER SET AUTO FINALIZE`, from any node: made
/// here if this node leads the metadata group, else by the leader.
pub async fn request(
    meta: &Meta,
    change: UpgradeChange,
    by: &str,
) -> Result<(ClusterVersion, String), QueryError> {
    let wire = Some(match change {
        UpgradeChange::AutoFinalizeAfter(Some(d)) => upgrade_request::Change::AutoFinalizeAfterMs(
            u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
        ),
        UpgradeChange::AutoFinalizeAfter(None) => upgrade_request::Change::AutoFinalizeNever(true),
        _ => upgrade_request::Change::Finalize(true),
    });
    let here = change_here(meta, change, by);
    super::service::on_metadata_leader(meta, here, ASK * 3, |mut c| async move {
        let r = c.upgrade(UpgradeRequest { change: wire, issuer: by.to_string() }).await?;
        let r = r.into_inner();
        Ok((r.active_cluster_version, r.message))
    })
    .await
}

/// The `Upgrade` call: makes the change here (this node leads the metadata group).
pub async fn serve(meta: &Meta, r: UpgradeRequest) -> Result<UpgradeReply, Status> {
    let change = match r.change {
        Some(upgrade_request::Change::Finalize(_)) => UpgradeChange::Finalize,
        Some(upgrade_request::Change::AutoFinalizeAfterMs(ms)) => {
            UpgradeChange::AutoFinalizeAfter(Some(Duration::from_millis(ms)))
        }
        Some(upgrade_request::Change::AutoFinalizeNever(_)) => {
            UpgradeChange::AutoFinalizeAfter(None)
        }
        None => return Err(Status::invalid_argument("an upgrade request names its change")),
    };
    let by: String = r.issuer.chars().take(256).collect();
    match change_here(meta, change, &by).await {
        Ok((active, message)) => Ok(UpgradeReply { active_cluster_version: active, message }),
        Err(MetaError::NotLeader(_)) => Err(Status::unavailable("not the metadata leader")),
        Err(MetaError::Failed(why) | MetaError::Refused(why)) => {
            Err(Status::failed_precondition(why))
        }
    }
}

/// The metadata leader's watch for an upgrade that finalizes by itself.
#[derive(Debug, Default)]
pub struct AutoFinalize {
    /// The version every node has supported, and since when this leader has seen it so.
    pending: Option<(ClusterVersion, Instant)>,
    checked: Option<Instant>,
}

impl AutoFinalize {
    /// One look (every few seconds, on the metadata leader): finalizes once the delay is up.
    pub async fn step(&mut self, meta: &Meta) {
        if !meta.is_leader() {
            self.pending = None;
            return;
        }
        if self.checked.is_some_and(|t| t.elapsed() < AUTO_CHECK) {
            return;
        }
        self.checked = Some(Instant::now());
        let view = meta.view();
        let active = view.active_version();
        let Standing::Finalizable { to } = standing(active, &members(meta, ASK).await) else {
            self.pending = None;
            return;
        };
        let since = match self.pending {
            Some((v, since)) if v == to => since,
            _ => {
                tracing::info!(
                    active,
                    to,
                    "every node supports a newer cluster version: the upgrade can be finalized"
                );
                self.pending.insert((to, Instant::now())).1
            }
        }
        .elapsed();
        let policy = view.upgrade.unwrap_or_default();
        let Some(after) = policy.auto_finalize_after_ms.map(Duration::from_millis) else {
            return;
        };
        if since >= after {
            match finalize(meta, "auto").await {
                Ok(_) => self.pending = None,
                Err(e) => tracing::warn!(%e, "finalizing the upgrade by itself"),
            }
        }
    }
}

/// The cluster as a whole, for `system.cluster`.
pub async fn cluster_row(meta: &Meta) -> ClusterRow {
    let view = meta.view();
    let active = view.active_version();
    let policy = view.upgrade.unwrap_or_default();
    let auto_finalize_after = policy.auto_finalize_after_ms.map(Duration::from_millis);
    let (finalizable_to, upgrade) = match standing(active, &members(meta, ASK / 2).await) {
        Standing::Finalizable { to } => {
            let by_itself = match auto_finalize_after {
                Some(d) => format!(
                    ", or by itself {} after the metadata leader saw every node support it",
                    ebb_query::db::human_duration(d.as_secs())
                ),
                None => String::new(),
            };
            (
                Some(to),
                format!(
                    "pending: every node supports cluster version {to}; rolling a node back is \
                     possible until ALTER CLUSTER FINALIZE UPGRADE{by_itself}"
                ),
            )
        }
        Standing::Current(why) => (None, format!("finalized: {why}")),
        Standing::Behind(why) => (None, format!("waiting: {why}")),
        Standing::Unknown(why) => (None, format!("unknown: {why}")),
    };
    ClusterRow {
        cluster_id: meta.conns().cluster_id(),
        active_version: active,
        active_since_ms: view.cluster_version.as_ref().map(|v| v.since_ms),
        activated_by: view.cluster_version.as_ref().map(|v| v.by.clone()),
        finalizable_to,
        upgrade,
        auto_finalize_after,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: u64) -> NodeInfo {
        NodeInfo {
            id,
            grpc_addr: format!("127.0.0.1:{id}"),
            http_addr: String::new(),
            pg_addr: String::new(),
            state: NodeState::Active,
        }
    }

    fn runs(range: VersionRange) -> Option<PeerVersion> {
        Some(PeerVersion { binary: Some("x".into()), range })
    }

    #[test]
    fn an_upgrade_finalizes_to_what_every_node_supports_and_only_then() {
        let new = runs(VersionRange { min: 1, max: 2 });
        let old = Some(PeerVersion { binary: None, range: VersionRange::LEGACY });
        let all_new = [(node(1), new.clone()), (node(2), new.clone())];
        assert_eq!(standing(1, &all_new), Standing::Finalizable { to: 2 });
        let Standing::Current(why) = standing(2, &all_new) else { panic!("finalized") };
        assert!(why.contains("every node runs at cluster version 2"), "{why}");
        let mixed = [(node(1), new.clone()), (node(3), old)];
        let Standing::Behind(why) = standing(1, &mixed) else { panic!("mixed") };
        assert!(why.starts_with("node 3 runs ebb 0.1.0 or older (cluster versions 1-1)"), "{why}");
        let silent = [(node(1), new), (node(4), None)];
        let Standing::Unknown(why) = standing(1, &silent) else { panic!("unknown") };
        assert!(why.contains("node 4 at 127.0.0.1:4 does not answer"), "{why}");
    }
}
