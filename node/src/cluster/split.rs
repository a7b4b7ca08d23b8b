//! Shard splits. A shard splits in two by halving its span of series hashes (a series stays on
//! one shard); the metadata leader carries a split out in steps, each safe to repeat, so a
//! leader that fails midway leaves the next one to finish it:
//!
//! 1. **Plan** (`ALTER CLUSTER SPLIT SHARD n`): the metadata records the new shard, on the
//!    parent's nodes, holding the upper half, marked as splitting: not routed to or queried,
//!    but statements that delete run on it too (they wait for it to exist).
//! 2. **Fork**: once the statements recorded before the plan are done, the parent's leader
//!    proposes the `Split` entry (writes planned before it are applied before it): every
//!    replica forks the new shard's first state from its engine at that entry, and from it on
//!    the parent refuses writes of the upper half (routers route them again).
//! 3. **Switch**: one metadata change gives the parent the lower half and routes the upper
//!    half to the new shard. Queries name the span they want from each shard, so one planned
//!    before the switch reads the upper half from the parent (which still holds it), one
//!    planned after reads it from the new shard: no row is read twice or missed.
//! 4. **Trim**: a little later each side drops the other half's rows and series records with
//!    one range delete per run of consecutive series ids (deletes GLORAN indexes whole). The
//!    deletion ledger and pending deletes were forked with the data, so every delete's deadline
//!    holds on both sides.
//!
//! Merging shards back is not supported: a merge must interleave two logs' rows under one
//! sequence, which the log-index sequence numbers of a group cannot express; spans only ever
//! halve.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ebb_query::model::hashspace::{HashFilter, Span};
use ebb_query::QueryError;
use ebb_storage::WriteBatch;
use tonic::Status;

use super::meta::{Meta, MetaError};
use super::proto::{
    ForkShardReply, ForkShardRequest, HashSpan, SplitShardRequest, TrimShardReply, TrimShardRequest,
};
use super::service::{connect, ConnectError};
use super::shards::Shards;
use super::view::{self, MetaView, ShardInfo, SplitFrom};

/// How long after the switch a shard waits before dropping the other half (queries planned
/// before the switch still read it from the parent).
pub const TRIM_DELAY: Duration = Duration::from_secs(10);

/// How long a fork or trim call may take on the shard's leader.
const STEP_TIMEOUT: Duration = Duration::from_secs(60);

/// The wire form of a hash filter.
pub fn to_proto(h: &HashFilter) -> HashSpan {
    HashSpan { roots: h.roots, root: h.span.root, lo: h.span.lo, end: h.span.end }
}

/// A hash span from the wire that names no span of the hash space.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
#[error("bad hash span {0:?}")]
pub struct BadSpan(pub HashSpan);

/// A span from the wire is the caller's fault.
impl From<BadSpan> for Status {
    fn from(e: BadSpan) -> Status {
        Status::invalid_argument(e.to_string())
    }
}

/// A hash filter from the wire, checked.
pub fn from_proto(p: &HashSpan) -> Result<HashFilter, BadSpan> {
    if p.roots == 0 || p.root >= p.roots || p.end.is_some_and(|e| e <= p.lo) {
        return Err(BadSpan(*p));
    }
    Ok(HashFilter { roots: p.roots, span: Span { root: p.root, lo: p.lo, end: p.end } })
}

/// Why a split cannot be planned.
fn refuse(why: String) -> MetaError {
    MetaError::Failed(why)
}

/// Plans the split of shard `shard` (on the metadata leader); returns the new shard's id.
pub async fn plan(meta: &Meta, shard: u64) -> Result<u64, MetaError> {
    if !meta.is_leader() {
        return Err(MetaError::NotLeader(meta.leader()));
    }
    let _g = meta.lock_changes().await;
    let v = meta.view();
    let roots = v.settings.ok_or_else(|| refuse("the cluster is not created yet".into()))?.shards;
    let s = v.shards.get(&shard).ok_or_else(|| refuse(format!("there is no shard {shard}")))?;
    if v.in_split(shard) {
        return Err(refuse(format!("shard {shard} is being split already")));
    }
    if s.target.is_some() {
        return Err(refuse(format!("shard {shard} is moving between nodes; try again soon")));
    }
    let (keep, give) = s
        .span()
        .halves(roots)
        .ok_or_else(|| refuse(format!("shard {shard} holds too few hashes to split")))?;
    let child = v.shards.keys().max().copied().unwrap_or(0) + 1;
    let info = ShardInfo {
        id: child,
        replicas: s.replicas.clone(),
        target: None,
        span: Some(give),
        split_from: Some(SplitFrom {
            parent: shard,
            keep,
            before: v.intents.keys().copied().collect(),
        }),
        untrimmed: true,
    };
    let mut b = WriteBatch::new();
    view::put_shard(&mut b, &info);
    meta.propose(b).await?;
    tracing::info!(shard, child, "split planned");
    Ok(child)
}

/// Splits shard `shard` from any node: planned on the metadata leader.
pub async fn request(meta: &Meta, shard: u64) -> Result<u64, QueryError> {
    super::service::on_metadata_leader(meta, plan(meta, shard), STEP_TIMEOUT, |mut c| async move {
        Ok(c.split_shard(SplitShardRequest { shard }).await?.into_inner().child)
    })
    .await
}

/// The `SplitShard` call: plans the split here (this node leads the metadata group).
pub async fn serve_split(meta: &Meta, r: SplitShardRequest) -> Result<u64, Status> {
    match plan(meta, r.shard).await {
        Ok(child) => Ok(child),
        Err(MetaError::NotLeader(_)) => Err(Status::unavailable("not the metadata leader")),
        Err(MetaError::Failed(why) | MetaError::Refused(why)) => {
            Err(Status::failed_precondition(why))
        }
    }
}

/// This node's shard `shard`, if it leads it.
fn leading(shards: &Shards, shard: u64) -> Result<super::Shard, Status> {
    shards
        .get(shard)
        .filter(|s| s.is_leader())
        .ok_or_else(|| Status::unavailable(format!("this node does not lead shard {shard}")))
}

/// The `ForkShard` call: proposes the split entry on this node's leading replica.
pub async fn serve_fork(shards: &Shards, r: ForkShardRequest) -> Result<ForkShardReply, Status> {
    let s = leading(shards, r.shard)?;
    let span = |p: Option<HashSpan>| -> Result<HashFilter, Status> {
        Ok(from_proto(&p.ok_or_else(|| Status::invalid_argument("a span is missing"))?)?)
    };
    let (keep, give) = (span(r.keep)?, span(r.give)?);
    let db = s.db.clone();
    let forked = tokio::task::spawn_blocking(move || db.split(r.child, keep, give))
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map_err(|e| Status::unavailable(e.to_string()))?;
    tracing::info!(shard = r.shard, child = r.child, index = ?forked, "split entry applied");
    Ok(ForkShardReply { index: forked.unwrap_or(0) })
}

/// The `TrimShard` call: drops the rows of series this node's leading replica no longer holds.
pub async fn serve_trim(shards: &Shards, r: TrimShardRequest) -> Result<TrimShardReply, Status> {
    let s = leading(shards, r.shard)?;
    let db = s.db.clone();
    let out = tokio::task::spawn_blocking(move || db.trim())
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map_err(|e| Status::unavailable(e.to_string()))?;
    tracing::info!(shard = r.shard, series = out.series, ranges = out.ranges, "shard trimmed");
    Ok(TrimShardReply { series: out.series, ranges: out.ranges })
}

/// Why no node holding a shard answered a call (the last node's failure).
#[derive(Debug, thiserror::Error)]
enum NoAnswer {
    /// No node holding the shard has an address.
    #[error("shard {0} has no replicas")]
    NoReplicas(u64),
    /// The node could not be connected to.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The node answered with an error (one that does not lead the shard, say).
    #[error("{addr}: {}", status.message())]
    Refused {
        /// The node's address.
        addr: String,
        /// Its answer.
        #[source]
        status: Box<Status>,
    },
    /// The node did not answer within [`STEP_TIMEOUT`].
    #[error("{addr}: no answer within {STEP_TIMEOUT:?}")]
    Timeout {
        /// The node's address.
        addr: String,
    },
}

/// Calls `call` on each node holding shard `shard` until one (its leader) answers.
async fn on_leader<T, F, Fut>(meta: &Meta, v: &MetaView, shard: u64, call: F) -> Result<T, NoAnswer>
where
    F: Fn(super::proto::cluster_client::ClusterClient<ebb_raft::transport::ClusterChannel>) -> Fut,
    Fut: std::future::Future<Output = Result<tonic::Response<T>, Status>>,
{
    let holders = v.shards.get(&shard).map(|s| s.replicas.clone()).unwrap_or_default();
    let mut last = NoAnswer::NoReplicas(shard);
    for n in holders {
        let Some(addr) = v.nodes.get(&n).map(|n| n.grpc_addr.clone()) else { continue };
        let c = match connect(meta.conns(), &addr).await {
            Ok(c) => c,
            Err(e) => {
                last = e.into();
                continue;
            }
        };
        match tokio::time::timeout(STEP_TIMEOUT, call(c)).await {
            Ok(Ok(r)) => return Ok(r.into_inner()),
            Ok(Err(s)) => last = NoAnswer::Refused { addr, status: Box::new(s) },
            Err(_) => last = NoAnswer::Timeout { addr },
        }
    }
    Err(last)
}

/// How long the switch waits for every replica of the parent to fork the new shard (one that
/// is down or far behind gets the new shard's state from its leader instead).
const FORK_WAIT: Duration = Duration::from_secs(30);

/// Waits until every replica of `parent` has applied log index `index` (its split entry), so
/// each forks the new shard before the cluster routes to it, or [`FORK_WAIT`] passes.
async fn forked_everywhere(meta: &Arc<Meta>, v: &MetaView, parent: &ShardInfo, index: u64) {
    let until = Instant::now() + FORK_WAIT;
    while Instant::now() < until {
        let reports = super::rebalance::ask_replicas(meta, v, &parent.replicas).await;
        let applied = |n: u64| {
            reports.iter().any(|(m, r)| {
                *m == n && r.iter().any(|l| l.shard == parent.id && l.applied_index >= index)
            })
        };
        if parent.replicas.iter().all(|n| applied(*n)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tracing::warn!(shard = parent.id, index, "not every replica applied the split entry in time");
}

/// When this metadata leader switched shards to their new spans (trims wait [`TRIM_DELAY`]).
#[derive(Debug, Default)]
pub struct SplitClock {
    switched: BTreeMap<u64, Instant>,
}

/// One step of every split under way (on the metadata leader). Returns true if it changed the
/// metadata.
pub async fn step(meta: &Arc<Meta>, clock: &mut SplitClock) -> bool {
    if !meta.is_leader() {
        return false;
    }
    let v = meta.view();
    let Some(roots) = v.settings.map(|s| s.shards) else { return false };
    for child in v.shards.values().filter(|s| s.splitting()) {
        let Some(from) = &child.split_from else { continue };
        let Some(parent) = v.shards.get(&from.parent) else { continue };
        if from.before.iter().any(|i| v.intents.contains_key(i)) || parent.target.is_some() {
            continue;
        }
        let req = ForkShardRequest {
            shard: parent.id,
            child: child.id,
            keep: Some(to_proto(&HashFilter { roots, span: from.keep })),
            give: Some(to_proto(&HashFilter { roots, span: child.span() })),
        };
        let forked =
            on_leader(meta, &v, parent.id, |mut c| async move { c.fork_shard(req).await }).await;
        let index = match forked {
            Ok(r) => r.index,
            Err(why) => {
                tracing::warn!(shard = parent.id, child = child.id, %why, "split entry not applied yet");
                continue;
            }
        };
        if index > 0 {
            forked_everywhere(meta, &v, parent, index).await;
        }
        let mut b = WriteBatch::new();
        view::put_shard(
            &mut b,
            &ShardInfo { span: Some(from.keep), untrimmed: true, ..parent.clone() },
        );
        view::put_shard(&mut b, &ShardInfo { split_from: None, ..child.clone() });
        if let Err(e) = meta.propose(b).await {
            tracing::warn!(shard = parent.id, %e, "recording a split's new spans");
            return false;
        }
        tracing::info!(
            shard = parent.id,
            child = child.id,
            "split: writes and queries routed by the new spans"
        );
        clock.switched.insert(parent.id, Instant::now());
        clock.switched.insert(child.id, Instant::now());
        return true;
    }
    for s in v.shards.values().filter(|s| s.untrimmed && !v.in_split(s.id)) {
        let since = *clock.switched.entry(s.id).or_insert_with(Instant::now);
        if since.elapsed() < TRIM_DELAY {
            continue;
        }
        let trimmed = on_leader(meta, &v, s.id, |mut c| {
            let req = TrimShardRequest { shard: s.id };
            async move { c.trim_shard(req).await }
        })
        .await;
        if let Err(why) = trimmed {
            tracing::warn!(shard = s.id, %why, "trim after a split not done yet");
            continue;
        }
        let mut b = WriteBatch::new();
        view::put_shard(&mut b, &ShardInfo { untrimmed: false, ..s.clone() });
        if let Err(e) = meta.propose(b).await {
            tracing::warn!(shard = s.id, %e, "recording a trim");
            return false;
        }
        clock.switched.remove(&s.id);
        return true;
    }
    false
}
