//! Delete requests across the cluster: each node reports and audits its own shard replicas;
//! any node gathers every node's answer (`system.deletions`, `ebb audit verify`); and every
//! replica's Raft log is purged for deletes nearing their deadline ([`purge_loop`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use ebb_query::deletions::{local_deletions, ReplicaDeletion};
use ebb_raft::{LogPurger, PurgeOutcome};
use tokio::sync::watch;
use tracing::Instrument;

use super::proto;
use super::proto::cluster_client::ClusterClient;
use super::router::Router;
use super::shard::Shard;
use super::shards::Shards;
use crate::audit::{request_delete_ids, ReplicaReport, SourceReport, Unaccounted, VerifyReport};

/// How long a node may take to answer for its replicas.
const ASK_TIMEOUT: Duration = Duration::from_secs(30);

/// Every request the ledgers of this node's replicas hold.
pub fn local_rows(shards: &Shards, node: u64) -> Vec<ReplicaDeletion> {
    shards.all().iter().flat_map(|s| local_deletions(&s.db, s.id, node)).collect()
}

/// Why a replica's scan for a request failed.
#[derive(Debug, thiserror::Error)]
enum ScanError {
    /// Its engine failed.
    #[error(transparent)]
    Engine(#[from] ebb_storage::Error),
    /// Its Raft log failed.
    #[error(transparent)]
    Log(#[from] ebb_raft::LogError),
    /// Its snapshots or other engine copies failed.
    #[error(transparent)]
    Replica(#[from] ebb_raft::ReplicaError),
}

/// Scans one replica for request `id`: its engine, its Raft log, its snapshots.
pub fn audit_shard(shard: &Shard, id: u64, node: u64) -> ReplicaReport {
    let mut r = ReplicaReport::new(shard.id, node);
    let ids = request_delete_ids(&shard.db, id);
    if ids.is_empty() {
        return r;
    }
    r.holds_request = true;
    let engine = shard.db.engine();
    let scans = (|| -> Result<Vec<_>, ScanError> {
        let c = engine.coverage(&ids)?;
        let mut all = engine.audit(&c)?;
        all.extend(shard.group.log.audit(&c)?);
        all.extend(shard.group.replica.audit_other_files(&c)?);
        Ok(all)
    })();
    match scans {
        Ok(s) => r.sources = s.into_iter().map(SourceReport::from).collect(),
        Err(e) => r.error = Some(e.to_string()),
    }
    let engine_dir = engine.dir().file_name().map(|n| n.to_string_lossy().into_owned());
    let log_dir = shard.group.log.dir().file_name().map(|n| n.to_string_lossy().into_owned());
    match engine.account() {
        Ok(a) => r.add_accounts(&engine_dir.unwrap_or_default(), &a),
        Err(e) => r.error = Some(e.to_string()),
    }
    match shard.group.log.account() {
        Ok(a) => r.add_accounts(&log_dir.unwrap_or_default(), &a),
        Err(e) => r.error = Some(e.to_string()),
    }
    match shard.group.replica.account_other_files() {
        Ok(dirs) => {
            for (dir, a) in dirs {
                r.add_accounts(&dir, &a);
            }
        }
        Err(e) => r.error = Some(e.to_string()),
    }
    r
}

/// Scans every replica of this node for request `id`.
pub fn local_audit(shards: &Shards, id: u64, node: u64) -> Vec<ReplicaReport> {
    shards.all().iter().map(|s| audit_shard(s, id, node)).collect()
}

/// As sent between nodes.
pub fn row_to_proto(r: &ReplicaDeletion) -> proto::ReplicaDeletion {
    proto::ReplicaDeletion {
        id: r.id,
        kind: r.kind.clone(),
        target: r.target.clone(),
        issued_by: r.issued_by.clone(),
        rows: r.rows,
        issued_at_ms: r.issued_at_ms,
        deadline_ms: r.deadline_ms,
        shard: r.shard,
        node: r.node,
        applied_at_ms: r.applied_at_ms,
        persisted_at_ms: r.persisted_at_ms,
        deletes: r.deletes,
        pending: r.pending,
    }
}

fn row_from_proto(r: proto::ReplicaDeletion) -> ReplicaDeletion {
    ReplicaDeletion {
        id: r.id,
        kind: r.kind,
        target: r.target,
        issued_by: r.issued_by,
        rows: r.rows,
        issued_at_ms: r.issued_at_ms,
        deadline_ms: r.deadline_ms,
        shard: r.shard,
        node: r.node,
        applied_at_ms: r.applied_at_ms,
        persisted_at_ms: r.persisted_at_ms,
        deletes: r.deletes,
        pending: r.pending,
        awaiting: false,
        backup: None,
    }
}

/// As sent between nodes.
pub fn report_to_proto(r: &ReplicaReport) -> proto::ReplicaAudit {
    proto::ReplicaAudit {
        shard: r.shard,
        node: r.node,
        holds_request: r.holds_request,
        sources: r
            .sources
            .iter()
            .map(|s| proto::SourceScan {
                kind: s.kind.clone(),
                name: s.name.clone(),
                bytes: s.bytes,
                entries: s.entries,
                found: s.found,
                examples: s.examples.clone(),
            })
            .collect(),
        error: r.error.clone().unwrap_or_default(),
        files_accounted: r.files_accounted,
        bytes_accounted: r.bytes_accounted,
        unaccounted: r
            .unaccounted
            .iter()
            .map(|u| proto::UnaccountedBytes {
                kind: u.kind.clone(),
                file: u.file.clone(),
                offset: u.offset,
                len: u.len,
            })
            .collect(),
    }
}

fn report_from_proto(r: proto::ReplicaAudit) -> ReplicaReport {
    ReplicaReport {
        shard: r.shard,
        node: r.node,
        holds_request: r.holds_request,
        sources: r
            .sources
            .into_iter()
            .map(|s| SourceReport {
                kind: s.kind,
                name: s.name,
                bytes: s.bytes,
                entries: s.entries,
                found: s.found,
                examples: s.examples,
            })
            .collect(),
        error: (!r.error.is_empty()).then_some(r.error),
        files_accounted: r.files_accounted,
        bytes_accounted: r.bytes_accounted,
        unaccounted: r
            .unaccounted
            .into_iter()
            .map(|u| Unaccounted { kind: u.kind, file: u.file, offset: u.offset, len: u.len })
            .collect(),
        copy: None,
    }
}

/// gRPC addresses of every other node holding a replica, by node id.
fn other_holders(router: &Router) -> BTreeMap<u64, String> {
    let v = router.meta().view();
    let me = router.meta().node();
    let holders: BTreeSet<u64> = v.shards.values().flat_map(|s| s.holders()).collect();
    holders
        .into_iter()
        .filter(|n| *n != me)
        .filter_map(|n| v.nodes.get(&n).map(|i| (n, i.grpc_addr.clone())))
        .collect()
}

/// Every request of every replica in the cluster. A replica whose node did not answer gets a
/// row without `applied_at` for every request its shard's other replicas report, so the
/// request shows as at risk rather than looking complete.
pub async fn gather(router: &Router) -> Vec<ReplicaDeletion> {
    let me = router.meta().node();
    let mut rows = local_rows(router.shards(), me);
    let nodes = other_holders(router);
    let calls = nodes.iter().map(|(id, addr)| async move {
        let ch = router.conns().channel(addr).ok()?;
        let mut c = ClusterClient::new(ch).max_decoding_message_size(super::MAX_MESSAGE_BYTES);
        let r = tokio::time::timeout(ASK_TIMEOUT, c.deletions(proto::DeletionsRequest {}));
        Some((*id, r.await.ok()?.ok()?.into_inner()))
    });
    let mut answered: BTreeSet<u64> = BTreeSet::from([me]);
    for (id, reply) in futures::future::join_all(calls).await.into_iter().flatten() {
        answered.insert(id);
        rows.extend(reply.deletions.into_iter().map(row_from_proto));
    }
    let v = router.meta().view();
    let mut missing = Vec::new();
    for s in v.shards.values() {
        let seen: BTreeMap<u64, &ReplicaDeletion> =
            rows.iter().filter(|r| r.shard == s.id).map(|r| (r.id, r)).collect();
        for n in s.replicas.iter().filter(|n| !answered.contains(n)) {
            for r in seen.values() {
                missing.push(ReplicaDeletion {
                    node: *n,
                    applied_at_ms: None,
                    persisted_at_ms: None,
                    ..(*r).clone()
                });
            }
        }
    }
    rows.extend(missing);
    let awaiting = super::intents::awaiting(router, &rows);
    rows.extend(awaiting);
    rows
}

/// Why another node did not report its replicas' scans.
#[derive(Debug, thiserror::Error)]
enum Unscanned {
    /// No channel to the node.
    #[error(transparent)]
    Channel(#[from] tonic::transport::Error),
    /// The node answered with an error.
    #[error("{}", .0.message())]
    Refused(#[source] Box<tonic::Status>),
    /// The node did not answer within [`ASK_TIMEOUT`].
    #[error("no answer within {ASK_TIMEOUT:?}")]
    Timeout,
}

/// Verifies request `id` on every replica in the cluster.
pub async fn verify(router: &Router, id: u64) -> VerifyReport {
    let me = router.meta().node();
    let shards = router.shards().clone();
    let mut reports =
        tokio::task::spawn_blocking(move || local_audit(&shards, id, me)).await.unwrap_or_default();
    let nodes = other_holders(router);
    let calls = nodes.iter().map(|(n, addr)| async move {
        let answer = async {
            let ch = router.conns().channel(addr)?;
            let mut c = ClusterClient::new(ch).max_decoding_message_size(super::MAX_MESSAGE_BYTES);
            let r = c.audit(proto::AuditRequest { request_id: id });
            match tokio::time::timeout(ASK_TIMEOUT, r).await {
                Ok(Ok(r)) => Ok(r.into_inner().replicas),
                Ok(Err(e)) => Err(Unscanned::Refused(Box::new(e))),
                Err(_) => Err(Unscanned::Timeout),
            }
        };
        (*n, answer.await)
    });
    let v = router.meta().view();
    for (n, answer) in futures::future::join_all(calls).await {
        match answer {
            Ok(replicas) => reports.extend(replicas.into_iter().map(report_from_proto)),
            Err(e) => {
                for s in v.shards.values().filter(|s| s.holders().contains(&n)) {
                    reports.push(ReplicaReport {
                        error: Some(format!("node {n} could not be scanned: {e}")),
                        ..ReplicaReport::new(s.id, n)
                    });
                }
            }
        }
    }
    VerifyReport::new(id, reports)
}

/// How often a replica's log may be compacted for deletes: a twentieth of the delete deadline,
/// between 1 s and 60 s (more often as a deadline nears; see [`LogPurger`]).
pub fn purge_interval(deadline: Option<Duration>) -> Duration {
    deadline.map_or(Duration::from_secs(60), |d| {
        (d / 20).clamp(Duration::from_secs(1), Duration::from_secs(60))
    })
}

/// Every second, on every replica of this node: refreshes its log watermark and compacts its
/// Raft log when a delete the engine has persisted waits only for the log or a snapshot.
pub async fn purge_loop(shards: Arc<Shards>, interval: Duration, stop: watch::Receiver<bool>) {
    let mut purgers: BTreeMap<u64, Arc<LogPurger>> = BTreeMap::new();
    let mut passes: BTreeMap<u64, tokio::task::JoinHandle<()>> = BTreeMap::new();
    loop {
        if *stop.borrow() {
            for (_, pass) in std::mem::take(&mut passes) {
                pass.abort();
            }
            return;
        }
        let held = shards.all();
        purgers.retain(|id, _| held.iter().any(|s| s.id == *id));
        passes.retain(|_, pass| !pass.is_finished());
        // Each replica's pass is a task of its own: a slow compaction (a snapshot under heavy
        // ingest) holds up neither the other replicas nor this loop.
        for s in held {
            if passes.contains_key(&s.id) {
                continue;
            }
            let p =
                purgers.entry(s.id).or_insert_with(|| Arc::new(LogPurger::new(interval))).clone();
            let shard_id = s.id;
            let pass = tokio::spawn(
                async move {
                    let now = ebb_query::now_ms();
                    match p.tick(&s.group, now).await {
                        Ok(PurgeOutcome::Compacted(index)) => {
                            tracing::info!(shard = s.id, index, "Raft log compacted for deletes");
                        }
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(shard = s.id, %e, "compacting the Raft log for deletes")
                        }
                    }
                }
                .instrument(tracing::debug_span!("purge", shard = shard_id)),
            );
            passes.insert(shard_id, pass);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
