//! Routing writes: each series belongs to the shard whose span holds its hash (see
//! [`super::hashspace`]); a node that
//! receives a write splits it by shard and hands each part to the shard's leader, here or on
//! another node, acknowledging only what every leader committed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ebb_query::db::WriteSource;
use ebb_query::lp::shape::Shape;
use ebb_query::lp::wire::{PointsReader, PointsWriter};
use ebb_query::lp::{Line, Lines, Precision};
use ebb_query::{QueryError, WriteSummary};

use ebb_raft::transport::{Connections, Groups};

use super::hashspace::series_hash;
use super::meta::Meta;
use super::proto::cluster_client::ClusterClient;
use super::proto::{LeadersRequest, WritePointsRequest};
use super::replication::PROPOSE_TIMEOUT;
use super::shards::Shards;

/// How many times a write may be forwarded between nodes looking for a shard's leader.
pub const MAX_HOPS: u32 = 3;

/// How long one attempt at a shard write may take before it is retried (on the leader of the
/// moment: a leader that steps down mid-write may never answer). Retrying is safe: a row
/// written twice is the same row.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);

/// A precision as the wire carries it.
pub fn wire_precision(p: Precision) -> super::proto::Precision {
    use super::proto::Precision as W;
    match p {
        Precision::Nanoseconds => W::Nanoseconds,
        Precision::Microseconds => W::Microseconds,
        Precision::Milliseconds => W::Milliseconds,
        Precision::Seconds => W::Seconds,
        Precision::Minutes => W::Minutes,
        Precision::Hours => W::Hours,
    }
}

/// The precision a write carries (refused if this build does not know it).
pub fn precision_of(req: &WritePointsRequest) -> Result<Precision, RouteError> {
    use super::proto::Precision as W;
    let wire = W::try_from(req.precision).map_err(|_| {
        RouteError::Rejected(QueryError::Invalid(format!("unknown precision {}", req.precision)))
    })?;
    Ok(match wire {
        W::Nanoseconds => Precision::Nanoseconds,
        W::Microseconds => Precision::Microseconds,
        W::Milliseconds => Precision::Milliseconds,
        W::Seconds => Precision::Seconds,
        W::Minutes => Precision::Minutes,
        W::Hours => Precision::Hours,
    })
}

/// Why a routed write failed.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    /// The request is at fault (bad line, schema conflict); nothing of it was written.
    #[error(transparent)]
    Rejected(QueryError),
    /// A shard could not commit its part in time (no leader, no quorum, unreachable). Parts
    /// for other shards may have been written.
    #[error("{0}")]
    Unavailable(String),
    /// A shard leader's data volume is below its free space reserve: writes are refused there
    /// until space is freed. Parts for other shards may have been written.
    #[error("{0}")]
    DiskFull(String),
    /// A shard no longer holds the series of these points (a split moved them since the write
    /// was routed); nothing of them was written. [`Router::write_points`] routes them again.
    #[error("the series of a write moved to another shard")]
    Moved,
}

impl From<RouteError> for QueryError {
    fn from(e: RouteError) -> QueryError {
        match e {
            RouteError::Rejected(e) => e,
            RouteError::Unavailable(m) => QueryError::Unavailable(m),
            RouteError::DiskFull(m) => QueryError::DiskFull(m),
            e @ RouteError::Moved => QueryError::Unavailable(e.to_string()),
        }
    }
}

/// One shard's part of a write.
struct Part {
    /// Its points.
    points: PointsWriter,
    /// The tables they write.
    tables: BTreeSet<String>,
    /// The time of its oldest point (ns).
    oldest_ns: i64,
}

/// A shard's part of a write, ready to send.
struct Routed {
    /// Its points, encoded.
    points: Bytes,
    /// The time of its oldest point (ns).
    oldest_ns: i64,
    /// The shapes of the tables it writes ([`Shape::fingerprint`]).
    prints: Vec<u64>,
}

/// Where a call on a shard runs ([`Router::shard_route`]).
pub enum ShardRoute {
    /// On this node's replica, which leads the shard.
    Here(super::Shard),
    /// On the node at this gRPC address.
    There(String),
}

/// Routes this node's writes to shard leaders.
#[derive(Debug)]
pub struct Router {
    intent_patience: Duration,
    meta: Arc<Meta>,
    shards: Arc<Shards>,
    conns: Arc<Connections>,
    groups: Arc<Groups>,
    /// Turns through a shard's replicas when this node does not know the leader, so a dead
    /// replica is not asked forever.
    rotation: std::sync::atomic::AtomicUsize,
    /// The node's readiness, kept current by [`super::readiness`].
    health: Arc<crate::health::Health>,
    /// Table shapes every shard accepted lately (see [`super::write_check`]).
    checked: super::write_check::CheckedShapes,
    /// The statements this node's front door ran lately.
    statements: Arc<ebb_query::statements::StatementLog>,
    /// This node's backups (set once the server is up: they take parts through this router).
    backups: std::sync::OnceLock<Arc<dyn ebb_query::backups::Backups>>,
}

fn add(a: &mut WriteSummary, b: &WriteSummary) {
    a.lines += b.lines;
    a.rows += b.rows;
    a.tables_created += b.tables_created;
    a.series_created += b.series_created;
}

impl Router {
    /// Gives this node's backups to the SQL layer (`BACKUP TO`, `system.backups`).
    pub fn set_backups(&self, backups: Arc<dyn ebb_query::backups::Backups>) {
        let _ = self.backups.set(backups);
    }

    /// This node's backups, once set.
    pub(super) fn backups(&self) -> Option<Arc<dyn ebb_query::backups::Backups>> {
        self.backups.get().cloned()
    }
}

/// How long a statement run on every shard waits for all of them by default.
pub const DEFAULT_INTENT_PATIENCE: Duration = Duration::from_secs(30);

impl Router {
    /// Why this node no longer serves, if it has left the cluster: decommissioned, and either
    /// marked removed or holding no replica any more (a node dropped from the metadata group may
    /// never see the entry that marks it removed). Its view of the cluster is no longer kept up
    /// to date, so it takes no request.
    pub fn left(&self) -> Option<String> {
        use super::view::NodeState;
        let me = self.meta.node();
        // Asked on every write and table lookup: read in place, not copied.
        let left = self.meta.with_view(|v| match v.nodes.get(&me).map(|n| n.state) {
            Some(NodeState::Removed) => true,
            Some(NodeState::Draining) => !v.shards.values().any(|s| s.involves(me)),
            Some(NodeState::Active) | None => false,
        });
        left.then(|| {
            format!(
                "node {me} was decommissioned and has left the cluster: it holds no data and may \
                 be stopped; send requests to another node"
            )
        })
    }

    /// The router over this node's metadata, shard replicas, connections and Raft groups.
    pub fn new(
        meta: Arc<Meta>,
        shards: Arc<Shards>,
        conns: Arc<Connections>,
        groups: Arc<Groups>,
    ) -> Router {
        Router {
            meta,
            shards,
            conns,
            groups,
            rotation: Default::default(),
            backups: Default::default(),
            health: Default::default(),
            checked: Default::default(),
            statements: Default::default(),
            intent_patience: DEFAULT_INTENT_PATIENCE,
        }
    }

    /// The router, waiting `patience` for every shard to answer a statement run on all of
    /// them before answering that it is recorded and still running.
    pub fn with_intent_patience(mut self, patience: Duration) -> Router {
        self.intent_patience = patience;
        self
    }

    /// How long a statement run on every shard waits for all of them.
    pub fn intent_patience(&self) -> Duration {
        self.intent_patience
    }

    /// This node's readiness (see [`crate::health`]).
    pub fn health(&self) -> &Arc<crate::health::Health> {
        &self.health
    }

    /// The statements this node's front door ran lately (`system.queries`).
    pub fn statement_log(&self) -> &Arc<ebb_query::statements::StatementLog> {
        &self.statements
    }

    /// This node's connections to the others.
    pub fn conns(&self) -> &Arc<Connections> {
        &self.conns
    }

    /// This node's Raft groups.
    pub fn groups(&self) -> &Arc<Groups> {
        &self.groups
    }

    /// This node's member of the metadata group.
    pub fn meta(&self) -> &Arc<Meta> {
        &self.meta
    }

    /// This node's shard replicas.
    pub fn shards(&self) -> &Arc<Shards> {
        &self.shards
    }

    /// Every shard id of the cluster that writes are routed to (not those being split off).
    pub fn shard_ids(&self) -> Vec<u64> {
        self.meta.view().routed().map(|s| s.id).collect()
    }

    /// Writes a line-protocol request: parsed once, every line checked first (a bad line
    /// rejects the whole request), then each shard's points go to its leader, all shards at
    /// once.
    pub async fn write_lines(
        &self,
        db: &str,
        body: &str,
        precision: Precision,
        now_ns: i64,
    ) -> Result<WriteSummary, RouteError> {
        let lines = Lines::new(body).map(|r| r.map_err(|e| RouteError::Rejected(e.into())));
        self.write_points(db, lines, precision, now_ns).await
    }

    /// Writes parsed points (numbered as their request numbers them): each shard's points go
    /// to its leader, after every shard the request writes checked its part (unless it
    /// accepted the same table shapes lately, see [`super::write_check`]). Points a split moved
    /// meanwhile are routed again with the new shard map.
    pub async fn write_points<'a>(
        &self,
        db: &str,
        lines: impl Iterator<Item = Result<(usize, Line<'a>), RouteError>>,
        precision: Precision,
        now_ns: i64,
    ) -> Result<WriteSummary, RouteError> {
        if let Some(why) = self.left() {
            return Err(RouteError::Unavailable(why));
        }
        let deadline = Instant::now() + PROPOSE_TIMEOUT;
        let mut total = WriteSummary::default();
        let mut routed = self.route(db, lines, precision, now_ns)?;
        loop {
            let mut changes = self.meta.subscribe();
            let (written, moved) = self.write_routed(db, routed, precision, now_ns).await?;
            add(&mut total, &written);
            if moved.is_empty() {
                return Ok(total);
            }
            if Instant::now() >= deadline {
                return Err(RouteError::Unavailable(
                    "a shard split moved the series of this write, and the new shard map has \
                     not arrived"
                        .into(),
                ));
            }
            // The split's new spans are in the metadata by the time the old shard refuses.
            let _ = tokio::time::timeout(Duration::from_millis(200), changes.changed()).await;
            let mut again = Vec::new();
            for buf in &moved {
                let reader =
                    PointsReader::new(buf).map_err(|e| RouteError::Unavailable(e.to_string()))?;
                again.extend(reader.map(|r| r.map_err(|e| RouteError::Unavailable(e.to_string()))));
            }
            routed = self.route(db, again.into_iter(), precision, now_ns)?;
        }
    }

    /// Splits points between the shards of their series, checking the request's shapes (a
    /// field of two types, a name used as tag and field) as it goes.
    fn route<'a>(
        &self,
        db: &str,
        lines: impl Iterator<Item = Result<(usize, Line<'a>), RouteError>>,
        precision: Precision,
        now_ns: i64,
    ) -> Result<BTreeMap<u64, Routed>, RouteError> {
        let map = self
            .meta
            .view()
            .shard_map()
            .ok_or_else(|| RouteError::Unavailable("the cluster is not created yet".into()))?
            .map_err(|e| RouteError::Unavailable(format!("shard map: {e}")))?;
        let mut parts: BTreeMap<u64, Part> = BTreeMap::new();
        let mut shape = Shape::default();
        for item in lines {
            let (no, line) = item?;
            shape.add(no, &line).map_err(RouteError::Rejected)?;
            let shard = map.shard_of(series_hash(&line.measurement, &line.tags));
            let part = parts.entry(shard).or_insert_with(|| Part {
                points: PointsWriter::default(),
                tables: BTreeSet::new(),
                oldest_ns: i64::MAX,
            });
            part.points.push(no, &line);
            if !part.tables.contains(line.measurement.as_ref()) {
                part.tables.insert(line.measurement.to_string());
            }
            let t = precision.time_of(line.timestamp, now_ns);
            part.oldest_ns = part.oldest_ns.min(t.unwrap_or(i64::MIN));
        }
        Ok(parts
            .into_iter()
            .map(|(shard, p)| {
                let prints = p.tables.iter().filter_map(|t| shape.fingerprint(db, t)).collect();
                let points = Bytes::from(p.points.finish());
                (shard, Routed { points, oldest_ns: p.oldest_ns, prints })
            })
            .collect())
    }

    /// One pass of [`Router::write_points`]: what was written, and the points of parts a
    /// shard refused because a split moved their series.
    async fn write_routed(
        &self,
        db: &str,
        parts: BTreeMap<u64, Routed>,
        precision: Precision,
        now_ns: i64,
    ) -> Result<(WriteSummary, Vec<Bytes>), RouteError> {
        // Each shard's part goes under an id of its own, so retries apply it once.
        let request = |shard: u64, points: &Bytes, check_only: bool| WritePointsRequest {
            shard,
            database: db.to_string(),
            points: points.clone(),
            precision: wire_precision(precision).into(),
            now_ns,
            hops: MAX_HOPS,
            check_only,
            write_id: (!check_only).then(ebb_query::db::new_request_id),
        };
        if parts.len() > 1 {
            // Every shard checks its part before any writes (unless it accepted the same
            // shapes lately): a refusal rejects the request whole, with nothing written.
            let stale: Vec<(u64, &Routed)> = parts
                .iter()
                .filter(|(s, p)| !self.checked.all_fresh(**s, &p.prints, p.oldest_ns))
                .map(|(s, p)| (*s, p))
                .collect();
            let checks = stale
                .iter()
                .map(|(s, p)| async move { self.write_shard(&request(*s, &p.points, true)).await });
            let mut moved = false;
            for r in futures::future::join_all(checks).await {
                match r {
                    Err(RouteError::Moved) => moved = true,
                    r => drop(r?),
                }
            }
            if moved {
                // Nothing is written yet: all of it is routed again.
                return Ok((
                    WriteSummary::default(),
                    parts.into_values().map(|p| p.points).collect(),
                ));
            }
            for (s, p) in &stale {
                self.checked.remember(*s, &p.prints, p.oldest_ns);
            }
        }
        let writes = parts.iter().map(|(shard, p)| {
            let req = request(*shard, &p.points, false);
            async move { (*shard, self.write_shard(&req).await, req.points, &p.prints) }
        });
        let mut total = WriteSummary::default();
        let mut failed = None;
        let mut moved = Vec::new();
        for (shard, r, points, prints) in futures::future::join_all(writes).await {
            match r {
                Ok(s) => add(&mut total, &s),
                Err(RouteError::Moved) => moved.push(points),
                Err(e @ RouteError::Rejected(_)) => {
                    self.checked.forget(shard, prints);
                    failed = Some(e);
                }
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok((total, moved)),
        }
    }

    /// Writes one shard's points on its leader: here if this node leads it, else forwarded.
    /// Retries through elections until [`PROPOSE_TIMEOUT`].
    pub async fn write_shard(&self, req: &WritePointsRequest) -> Result<WriteSummary, RouteError> {
        let deadline = Instant::now() + PROPOSE_TIMEOUT;
        let mut last = String::new();
        while Instant::now() < deadline {
            match tokio::time::timeout(ATTEMPT_TIMEOUT, self.try_write_shard(req)).await {
                Ok(Ok(s)) => return Ok(s),
                Ok(Err(
                    e @ (RouteError::Rejected(_) | RouteError::DiskFull(_) | RouteError::Moved),
                )) => return Err(e),
                Ok(Err(RouteError::Unavailable(why))) => last = why,
                Err(_) => last = format!("no answer within {ATTEMPT_TIMEOUT:?}"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(RouteError::Unavailable(format!("shard {}: {last}", req.shard)))
    }

    /// One attempt at a shard write (what a node does for a forwarded write: the node that
    /// received the request retries).
    pub async fn try_write_shard(
        &self,
        req: &WritePointsRequest,
    ) -> Result<WriteSummary, RouteError> {
        let precision = precision_of(req)?;
        let addr = match self.shard_route(req.shard, req.hops).await? {
            ShardRoute::Here(shard) => return write_on_leader(&shard, req, precision).await,
            ShardRoute::There(addr) => addr,
        };
        let ch = self
            .conns
            .connect(&addr, ATTEMPT_TIMEOUT)
            .await
            .map_err(|e| RouteError::Unavailable(format!("{addr}: {e}")))?;
        let mut fwd = req.clone();
        fwd.hops -= 1;
        let r = ClusterClient::new(ch)
            .max_decoding_message_size(crate::cluster::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(crate::cluster::MAX_MESSAGE_BYTES)
            .write_points(fwd)
            .await
            .map_err(|s| match s.code() {
                tonic::Code::ResourceExhausted => RouteError::DiskFull(s.message().to_string()),
                tonic::Code::Aborted => RouteError::Moved,
                _ => RouteError::Unavailable(format!("{addr}: {}", s.message())),
            })?
            .into_inner();
        if let Some(why) = r.rejected {
            return Err(RouteError::Rejected(super::refusal::from_wire(r.refusal, why)));
        }
        Ok(WriteSummary {
            lines: r.lines as usize,
            rows: r.rows as usize,
            tables_created: r.tables_created as usize,
            series_created: r.series_created as usize,
        })
    }

    /// The leader of every shard: from this node's replica where it holds one, else asked of
    /// the nodes holding replicas (the answer from the highest term wins). Shards whose leader
    /// nobody could tell within a second are left out.
    pub async fn leaders(&self) -> BTreeMap<u64, u64> {
        let mut best: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        let mut note = |shard: u64, leader: Option<u64>, term: u64| {
            let Some(leader) = leader else { return };
            if best.get(&shard).is_none_or(|(_, t)| term > *t) {
                best.insert(shard, (leader, term));
            }
        };
        for s in self.shards.all() {
            let m = s.group.raft.metrics().borrow().clone();
            note(s.id, m.current_leader, m.current_term);
        }
        let v = self.meta.view();
        let held = self.shards.ids();
        let me = self.meta.node();
        let mut ask: Vec<String> = v
            .shards
            .values()
            .filter(|s| !held.contains(&s.id))
            .flat_map(|s| s.replicas.iter().filter(|n| **n != me))
            .filter_map(|n| v.nodes.get(n).map(|i| i.grpc_addr.clone()))
            .collect();
        ask.sort();
        ask.dedup();
        let calls = ask.iter().map(|addr| async move {
            let ch = self.conns.channel(addr).ok()?;
            let mut c = ClusterClient::new(ch);
            let r = tokio::time::timeout(Duration::from_secs(1), c.leaders(LeadersRequest {}));
            Some(r.await.ok()?.ok()?.into_inner().leaders)
        });
        for answer in futures::future::join_all(calls).await.into_iter().flatten() {
            for l in answer {
                if !held.contains(&l.shard) {
                    note(l.shard, l.leader, l.term);
                }
            }
        }
        best.into_iter().map(|(shard, (leader, _))| (shard, leader)).collect()
    }

    /// Where to send a shard's write: its leader if this node knows it, else a node holding
    /// a replica (which forwards it on).
    /// Where a call on `shard` that may still be forwarded `hops` times runs: here if this
    /// node leads the shard, else at its leader as this node knows it. A node holding a
    /// replica that knows of no leader (an election is under way) waits for one, up to three
    /// election timeouts, rather than passing the call to another replica that knows no
    /// more and would pass it back.
    pub async fn shard_route(&self, shard: u64, hops: u32) -> Result<ShardRoute, RouteError> {
        if let Some(s) = self.shards.get(shard) {
            if s.is_leader() {
                return Ok(ShardRoute::Here(s));
            }
            let raft = &s.group.raft;
            let patience = Duration::from_millis(raft.config().election_timeout_max * 3);
            let m = raft
                .wait(Some(patience))
                .metrics(
                    |m| m.state.is_leader() || m.current_leader.is_some_and(|l| l != m.id),
                    "a known shard leader",
                )
                .await
                .map_err(|_| {
                    RouteError::Unavailable(format!(
                        "shard {shard} has elected no leader within {patience:?}"
                    ))
                })?;
            if m.state.is_leader() {
                return Ok(ShardRoute::Here(s));
            }
        }
        if hops == 0 {
            return Err(RouteError::Unavailable(format!(
                "too many forwards looking for the leader of shard {shard}"
            )));
        }
        self.leader_addr(shard).map(ShardRoute::There)
    }

    /// The address of shard `shard`'s leader as this node knows it, else of one of its
    /// replicas (in turn).
    pub fn leader_addr(&self, shard: u64) -> Result<String, RouteError> {
        if let Some(s) = self.shards.get(shard) {
            let m = s.group.raft.metrics().borrow().clone();
            if let Some(node) = m
                .current_leader
                .and_then(|l| m.membership_config.membership().get_node(&l).cloned())
            {
                return Ok(node.addr);
            }
        }
        let v = self.meta.view();
        let info = v
            .shards
            .get(&shard)
            .ok_or_else(|| RouteError::Unavailable(format!("no shard {shard}")))?;
        let me = self.meta.raft().metrics().borrow().id;
        let holders: Vec<String> = info
            .replicas
            .iter()
            .filter(|n| **n != me)
            .filter_map(|n| v.nodes.get(n))
            .map(|n| n.grpc_addr.clone())
            .collect();
        if holders.is_empty() {
            return Err(RouteError::Unavailable(format!("shard {shard} has no reachable replica")));
        }
        let turn = self.rotation.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(holders[turn % holders.len()].clone())
    }
}

/// Writes (or checks) `req` on `shard`, which this node leads.
async fn write_on_leader(
    shard: &super::Shard,
    req: &WritePointsRequest,
    precision: Precision,
) -> Result<WriteSummary, RouteError> {
    // The write is planned against the leader's catalog, which must hold every entry
    // of the terms before this leader's: a new leader that has not applied them yet
    // could give a new series an id one of them gave another series, or a second id
    // to a series one of them created (two series for one key).
    // Read in place (the metrics are not cloned on every write).
    let behind = {
        let m = shard.group.raft.metrics();
        let m = m.borrow();
        m.last_applied.map(|l| l.leader_id.term) != Some(m.current_term)
    };
    if behind {
        super::shard_reads::read_barrier(shard)
            .await
            .map_err(|s| RouteError::Unavailable(s.message().to_string()))?;
    }
    let (db, name, points, now) =
        (shard.db.clone(), req.database.clone(), req.points.clone(), req.now_ns);
    let (check_only, id) = (req.check_only, req.write_id);
    let res = tokio::task::spawn_blocking(move || {
        let points = WriteSource::Points(&points);
        match (check_only, id) {
            (true, _) => db.check(&name, points, precision, now).map(|()| WriteSummary::default()),
            (false, Some(id)) => db.write_once(&name, points, precision, now, id),
            (false, None) => Err(QueryError::Invalid("a shard write without an id".into())),
        }
    })
    .await
    .map_err(|e| RouteError::Unavailable(e.to_string()))?;
    res.map_err(|e| match e {
        QueryError::NotLeader(_) | QueryError::Replication(_) => {
            RouteError::Unavailable(e.to_string())
        }
        QueryError::NotHeld { .. } => RouteError::Moved,
        e if e.is_disk_full() => RouteError::DiskFull(e.to_string()),
        e if e.is_client_error() => RouteError::Rejected(e),
        e => RouteError::Unavailable(e.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_spread_over_every_shard() {
        let map = super::super::hashspace::ShardMap::unsplit(8);
        let mut seen = std::collections::BTreeSet::new();
        for h in 0..200 {
            let s = map.shard_of(series_hash("cpu", &[("host", format!("h{h}"))]));
            assert!((1..=8).contains(&s));
            seen.insert(s);
        }
        assert_eq!(seen.len(), 8, "200 series should reach all 8 shards");
    }
}
