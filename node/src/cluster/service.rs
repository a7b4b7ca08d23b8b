//! The cluster gRPC service nodes call on each other, and its client side.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::{BasicNode, ChangeMembers};
use tonic::{Request, Response, Status};

use ebb_raft::transport::{ClusterChannel, Connections};
use tonic::transport::ClientTlsConfig;

use super::meta::{Meta, MetaError};
use super::proto::cluster_client::ClusterClient;
use super::proto::cluster_server::{Cluster, ClusterServer};
use super::proto::{
    ApplyReply, CampaignReply, CampaignRequest, ChangeMetaReply, ChangeMetaRequest,
    DecommissionReply, DecommissionRequest, JoinReply, JoinRequest, LeadersReply, LeadersRequest,
    ListingReply, Member, QueryChunk, SetShardMembersReply, SetShardMembersRequest, ShardLeader,
    WritePointsReply, WritePointsRequest,
};
use super::proto::{
    ForkShardReply, ForkShardRequest, ShardCall, SplitShardReply, SplitShardRequest, TableReply,
    TrimShardReply, TrimShardRequest,
};
use super::router::{RouteError, Router, ShardRoute};
use super::shards::Shards;
use super::version::{PeerVersion, VersionRange};
use super::view::MetaView;
use crate::error::{NodeError, Result};

/// How long a read waits to confirm this node still leads its shard.
pub const READ_BARRIER_TIMEOUT: Duration = Duration::from_secs(3);

/// How long adding a replica may take (the new replica catches up first).
pub const MOVE_TIMEOUT: Duration = Duration::from_secs(600);

/// The cluster service of one node.
#[derive(Debug, Clone)]
pub struct ClusterService {
    meta: Arc<Meta>,
    shards: Arc<Shards>,
    router: Arc<Router>,
}

impl ClusterService {
    /// The service over this node's metadata member, shard replicas and write router.
    pub fn new(meta: Arc<Meta>, shards: Arc<Shards>, router: Arc<Router>) -> ClusterService {
        ClusterService { meta, shards, router }
    }

    /// The tonic server for it.
    pub fn into_server(self) -> ClusterServer<ClusterService> {
        ClusterServer::new(self)
            .max_decoding_message_size(super::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(super::MAX_MESSAGE_BYTES)
    }
}

/// How long one forwarded cluster call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one attempt to join through one seed may take.
const JOIN_ATTEMPT: Duration = Duration::from_secs(5);
/// How long a node forwards a join to the metadata leader before answering that it cannot.
const JOIN_FORWARD: Duration = Duration::from_secs(2);

/// A node that could not be connected to.
#[derive(Debug, thiserror::Error)]
#[error("{addr}: {source}")]
pub(super) struct ConnectError {
    /// The node's cluster address.
    pub addr: String,
    /// Why.
    pub source: tonic::transport::Error,
}

/// A node that cannot be connected to is unavailable.
impl From<ConnectError> for Status {
    fn from(e: ConnectError) -> Status {
        Status::unavailable(e.to_string())
    }
}

pub(super) async fn connect(
    conns: &Connections,
    addr: &str,
) -> std::result::Result<ClusterClient<ClusterChannel>, ConnectError> {
    let ch = conns
        .connect(addr, CALL_TIMEOUT)
        .await
        .map_err(|source| ConnectError { addr: addr.to_string(), source })?;
    Ok(ClusterClient::new(ch))
}

/// A change the metadata leader makes (`here`, tried first on this node), asked of the leader
/// through `remote` when another node leads, within `wait`: failures as a statement reports
/// them (a refusal as invalid, anything else as unavailable).
pub(super) async fn on_metadata_leader<T, R>(
    meta: &Meta,
    here: impl std::future::Future<Output = std::result::Result<T, MetaError>>,
    wait: Duration,
    remote: impl FnOnce(ClusterClient<ClusterChannel>) -> R,
) -> std::result::Result<T, ebb_query::error::QueryError>
where
    R: std::future::Future<Output = std::result::Result<T, Status>>,
{
    use ebb_query::error::QueryError;
    match here.await {
        Ok(done) => Ok(done),
        Err(MetaError::NotLeader(Some((_, addr)))) => {
            let c = connect(meta.conns(), &addr)
                .await
                .map_err(|e| QueryError::Unavailable(e.to_string()))?;
            match tokio::time::timeout(wait, remote(c)).await {
                Ok(Ok(done)) => Ok(done),
                Ok(Err(s)) if s.code() == tonic::Code::FailedPrecondition => {
                    Err(QueryError::invalid(s.message()))
                }
                Ok(Err(s)) if s.code() == tonic::Code::Unimplemented => {
                    Err(QueryError::invalid(format!(
                        "the metadata leader at {addr} runs an older release, which cannot do \
                         this: upgrade every node first"
                    )))
                }
                Ok(Err(s)) => Err(QueryError::Unavailable(s.message().to_string())),
                Err(_) => Err(QueryError::Unavailable("the metadata leader did not answer".into())),
            }
        }
        Err(MetaError::NotLeader(None)) => {
            Err(QueryError::Unavailable("the metadata group has no leader".into()))
        }
        Err(MetaError::Failed(why) | MetaError::Refused(why)) => Err(QueryError::invalid(why)),
    }
}

/// Bytes a shard replica holds: its engine files and its active memtable.
pub(super) fn replica_bytes(s: &super::Shard) -> u64 {
    let st = s.db.engine().stats();
    st.levels.iter().map(|l| l.bytes).sum::<u64>() + st.memtable_bytes as u64
}

/// A stream of query result chunks.
pub type QueryStream =
    std::pin::Pin<Box<dyn futures::Stream<Item = std::result::Result<QueryChunk, Status>> + Send>>;

/// What a shard leader answers for `e`: the one mapping of a shard's errors to gRPC statuses
/// (the caller maps them back with [`super::shard_client`]).
pub(super) fn query_status(e: ebb_query::QueryError) -> Status {
    shard_status(e.into())
}

/// `e` as a gRPC status.
pub(super) fn shard_status(e: ebb_query::sql::shard::ShardError) -> Status {
    use ebb_query::sql::shard::ShardError;
    match e {
        ShardError::NotFound(e) => Status::not_found(e.to_string()),
        ShardError::Invalid(e) => Status::invalid_argument(e.to_string()),
        e => Status::unavailable(e.to_string()),
    }
}

impl ClusterService {
    /// Where a call on `shard` runs: this node's replica if it leads the shard, else a client
    /// of the node to forward it to (see [`Router::shard_route`]).
    async fn route(&self, shard: u64, hops: u32) -> std::result::Result<Route, Status> {
        match self.router.shard_route(shard, hops).await {
            Ok(ShardRoute::Here(s)) => Ok(Route::Here(s)),
            Ok(ShardRoute::There(addr)) => {
                let c = connect(self.router.conns(), &addr).await?;
                Ok(Route::There(Box::new(c.max_decoding_message_size(super::MAX_MESSAGE_BYTES))))
            }
            Err(e) => Err(Status::unavailable(e.to_string())),
        }
    }
}

/// Where a shard call runs ([`ClusterService::route`]).
enum Route {
    Here(super::Shard),
    There(Box<ClusterClient<ClusterChannel>>),
}

#[tonic::async_trait]
impl Cluster for ClusterService {
    type ScanStream = QueryStream;

    async fn table(
        &self,
        req: Request<ShardCall>,
    ) -> std::result::Result<Response<TableReply>, Status> {
        let call = req.into_inner();
        let shard = match self.route(call.shard, call.hops).await? {
            Route::Here(shard) => shard,
            Route::There(mut c) => {
                return c.table(ShardCall { hops: call.hops - 1, ..call }).await;
            }
        };
        Ok(Response::new(super::shard_reads::table(&shard, &call).await?))
    }

    async fn scan(
        &self,
        req: Request<ShardCall>,
    ) -> std::result::Result<Response<QueryStream>, Status> {
        let call = req.into_inner();
        let shard = match self.route(call.shard, call.hops).await? {
            Route::Here(shard) => shard,
            Route::There(mut c) => {
                let stream = c.scan(ShardCall { hops: call.hops - 1, ..call }).await?.into_inner();
                return Ok(Response::new(Box::pin(stream)));
            }
        };
        Ok(Response::new(super::shard_reads::scan(&shard, &call).await?))
    }

    async fn backup_part(
        &self,
        req: Request<ShardCall>,
    ) -> std::result::Result<Response<super::proto::BackupPartReply>, Status> {
        use super::backup::{part_status, take_here, PartGroup, PartRequest};
        let call = req.into_inner();
        let r: PartRequest = ebb_query::sql::shard::request::decode(call.version, &call.body)
            .map_err(query_status)?;
        let (replica, shard) = match r.group {
            PartGroup::Shard => match self.route(call.shard, call.hops).await? {
                Route::Here(shard) => {
                    super::shard_reads::read_barrier(&shard).await?;
                    (shard.group.replica.clone(), shard.id)
                }
                Route::There(mut c) => {
                    return c.backup_part(ShardCall { hops: call.hops - 1, ..call }).await;
                }
            },
            PartGroup::Meta if self.meta.is_leader() => {
                let barrier = tokio::time::timeout(
                    READ_BARRIER_TIMEOUT,
                    self.meta.raft().ensure_linearizable(),
                );
                match barrier.await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => return Err(Status::unavailable(format!("read barrier: {e}"))),
                    Err(_) => return Err(Status::unavailable("read barrier timed out")),
                }
                (self.meta.group().replica.clone(), 0)
            }
            PartGroup::Meta => {
                let Some((_, addr)) = self.meta.leader().filter(|_| call.hops > 0) else {
                    return Err(Status::unavailable("the metadata group's leader is not known"));
                };
                let mut c = connect(self.router.conns(), &addr).await?;
                return c.backup_part(ShardCall { hops: call.hops - 1, ..call }).await;
            }
        };
        // On a task of its own: a coordinator that stops waiting (it failed, or asks again)
        // does not cut the part short, which then releases its lock and staging itself.
        let reply = tokio::spawn(take_here(replica, shard, r))
            .await
            .map_err(|e| Status::internal(format!("the part's task: {e}")))?
            .map_err(part_status)?;
        Ok(Response::new(reply))
    }

    async fn apply(
        &self,
        req: Request<ShardCall>,
    ) -> std::result::Result<Response<ApplyReply>, Status> {
        let call = req.into_inner();
        let shard = match self.route(call.shard, call.hops).await? {
            Route::Here(shard) => shard,
            Route::There(mut c) => {
                return c.apply(ShardCall { hops: call.hops - 1, ..call }).await;
            }
        };
        Ok(Response::new(super::shard_reads::apply(&shard, &call).await?))
    }

    async fn listing(
        &self,
        req: Request<ShardCall>,
    ) -> std::result::Result<Response<ListingReply>, Status> {
        let call = req.into_inner();
        let shard = match self.route(call.shard, call.hops).await? {
            Route::Here(shard) => shard,
            Route::There(mut c) => {
                return c.listing(ShardCall { hops: call.hops - 1, ..call }).await;
            }
        };
        Ok(Response::new(super::shard_reads::listing(&shard).await?))
    }

    async fn engine_rows(
        &self,
        req: Request<ShardCall>,
    ) -> std::result::Result<Response<QueryChunk>, Status> {
        let call = req.into_inner();
        let shard = match self.route(call.shard, call.hops).await? {
            Route::Here(shard) => shard,
            Route::There(mut c) => {
                return c.engine_rows(ShardCall { hops: call.hops - 1, ..call }).await;
            }
        };
        Ok(Response::new(super::shard_reads::engine_rows(&shard, &call).await?))
    }

    async fn join(
        &self,
        req: Request<JoinRequest>,
    ) -> std::result::Result<Response<JoinReply>, Status> {
        let r = req.into_inner();
        if r.grpc_addr.is_empty() {
            return Err(Status::invalid_argument("a joining node must give its gRPC address"));
        }
        // Bounded, so the joining node hears back well within its attempt: a leader that has
        // lost its quorum would otherwise keep it waiting, and an answer is what tells it a
        // cluster is here.
        let peer = joining_version(&r);
        let registered = tokio::time::timeout(
            JOIN_FORWARD,
            self.meta.register(
                &r.grpc_addr,
                &r.http_addr,
                &r.pg_addr,
                &peer,
                Some(r.join_token.as_str()).filter(|t| !t.is_empty()),
                &r.nonce,
            ),
        )
        .await
        .map_err(|_| Status::unavailable("the metadata group cannot take a node right now"))?;
        match registered {
            Ok(node_id) => Ok(Response::new(JoinReply {
                node_id,
                cluster_id: self.router.conns().cluster_id().unwrap_or_default(),
                cluster_version: self.meta.versions().active(),
            })),
            // Final: the joining node stops trying and says why.
            Err(MetaError::Refused(why)) => Err(Status::failed_precondition(why)),
            Err(MetaError::NotLeader(Some((_, addr)))) => {
                // One hop to the leader; the joining node retries if leadership moves again.
                // Bounded, so the joining node hears back (an answer tells it a cluster is
                // here) well within its own attempt.
                let forward = async {
                    let mut leader = connect(self.router.conns(), &addr).await?;
                    leader.join(r).await
                };
                match tokio::time::timeout(JOIN_FORWARD, forward).await {
                    Ok(res) => res,
                    Err(_) => Err(Status::unavailable(format!(
                        "the metadata leader at {addr} does not answer"
                    ))),
                }
            }
            Err(MetaError::NotLeader(None)) => {
                Err(Status::unavailable("the cluster has no metadata leader right now"))
            }
            Err(MetaError::Failed(e)) => Err(Status::unavailable(e)),
        }
    }

    async fn decommission(
        &self,
        req: Request<DecommissionRequest>,
    ) -> std::result::Result<Response<DecommissionReply>, Status> {
        decommission(&self.meta, req.into_inner().node_id).await?;
        Ok(Response::new(DecommissionReply {}))
    }

    async fn campaign(
        &self,
        req: Request<CampaignRequest>,
    ) -> std::result::Result<Response<CampaignReply>, Status> {
        let shard = req.into_inner().shard;
        let s = self
            .shards
            .get(shard)
            .ok_or_else(|| Status::not_found(format!("no replica of shard {shard} here")))?;
        s.group.raft.trigger().elect().await.map_err(|e| Status::internal(e.to_string()))?;
        tracing::info!(shard, "standing for election to balance leaders");
        Ok(Response::new(CampaignReply {}))
    }

    async fn split_shard(
        &self,
        req: Request<SplitShardRequest>,
    ) -> std::result::Result<Response<SplitShardReply>, Status> {
        let child = super::split::serve_split(&self.meta, req.into_inner()).await?;
        Ok(Response::new(SplitShardReply { child }))
    }

    async fn fork_shard(
        &self,
        req: Request<ForkShardRequest>,
    ) -> std::result::Result<Response<ForkShardReply>, Status> {
        super::split::serve_fork(&self.shards, req.into_inner()).await.map(Response::new)
    }

    async fn trim_shard(
        &self,
        req: Request<TrimShardRequest>,
    ) -> std::result::Result<Response<TrimShardReply>, Status> {
        super::split::serve_trim(&self.shards, req.into_inner()).await.map(Response::new)
    }

    async fn backup_keys(
        &self,
        req: Request<super::proto::BackupKeysRequest>,
    ) -> std::result::Result<Response<super::proto::BackupKeysReply>, Status> {
        let keys = super::backup::key_dir_of(&self.meta.group().replica);
        let req = req.into_inner();
        let answered =
            tokio::task::spawn_blocking(move || super::backup::keys_here(&keys, req)).await;
        match answered {
            Ok(Ok(reply)) => Ok(Response::new(reply)),
            Ok(Err(e)) => Err(Status::internal(e.to_string())),
            Err(e) => Err(Status::internal(e.to_string())),
        }
    }

    async fn statements(
        &self,
        _req: Request<super::proto::StatementsRequest>,
    ) -> std::result::Result<Response<super::proto::StatementsReply>, Status> {
        let statements = self
            .router
            .statement_log()
            .recent()
            .into_iter()
            .map(|r| super::proto::Statement {
                started_ns: r.started_ns,
                protocol: r.protocol,
                user: r.user,
                database: r.database,
                kind: r.kind,
                duration_us: r.duration_us,
                rows: r.rows,
                ok: r.ok,
            })
            .collect();
        Ok(Response::new(super::proto::StatementsReply { statements }))
    }

    async fn upgrade(
        &self,
        req: Request<super::proto::UpgradeRequest>,
    ) -> std::result::Result<Response<super::proto::UpgradeReply>, Status> {
        super::upgrade::serve(&self.meta, req.into_inner()).await.map(Response::new)
    }

    async fn leaders(
        &self,
        _req: Request<LeadersRequest>,
    ) -> std::result::Result<Response<LeadersReply>, Status> {
        let leaders = self
            .shards
            .all()
            .iter()
            .map(|s| {
                let m = s.group.raft.metrics().borrow().clone();
                ShardLeader {
                    shard: s.id,
                    leader: m.current_leader,
                    term: m.current_term,
                    last_log_index: m.last_log_index.unwrap_or(0),
                    applied_index: m.last_applied.map_or(0, |l| l.index),
                    bytes: replica_bytes(s),
                    rows_written: s.db.rows_written(),
                }
            })
            .collect();
        let health = self.router.health().get();
        let versions = self.meta.versions();
        Ok(Response::new(LeadersReply {
            leaders,
            ready: health.is_ready(),
            not_ready: health.reasons,
            binary_version: crate::VERSION.to_string(),
            commit: crate::COMMIT.to_string(),
            min_cluster_version: versions.range().min,
            max_cluster_version: versions.range().max,
            active_cluster_version: versions.active(),
        }))
    }

    async fn deletions(
        &self,
        _req: Request<super::proto::DeletionsRequest>,
    ) -> std::result::Result<Response<super::proto::DeletionsReply>, Status> {
        let node = self.meta.node();
        let rows = super::deletions::local_rows(&self.shards, node);
        Ok(Response::new(super::proto::DeletionsReply {
            deletions: rows.iter().map(super::deletions::row_to_proto).collect(),
            shards: self.shards.ids(),
        }))
    }

    async fn audit(
        &self,
        req: Request<super::proto::AuditRequest>,
    ) -> std::result::Result<Response<super::proto::AuditReply>, Status> {
        let (id, node, shards) =
            (req.into_inner().request_id, self.meta.node(), self.shards.clone());
        let reports =
            tokio::task::spawn_blocking(move || super::deletions::local_audit(&shards, id, node))
                .await
                .map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(super::proto::AuditReply {
            replicas: reports.iter().map(super::deletions::report_to_proto).collect(),
        }))
    }

    async fn write_points(
        &self,
        req: Request<WritePointsRequest>,
    ) -> std::result::Result<Response<WritePointsReply>, Status> {
        match self.router.try_write_shard(&req.into_inner()).await {
            Ok(s) => Ok(Response::new(WritePointsReply {
                lines: s.lines as u64,
                rows: s.rows as u64,
                tables_created: s.tables_created as u64,
                series_created: s.series_created as u64,
                rejected: None,
                refusal: None,
            })),
            Err(RouteError::Rejected(e)) => Ok(Response::new(WritePointsReply {
                rejected: Some(e.to_string()),
                refusal: Some(super::refusal::to_wire(&e)),
                ..Default::default()
            })),
            Err(RouteError::Unavailable(why)) => Err(Status::unavailable(why)),
            Err(RouteError::DiskFull(why)) => Err(Status::resource_exhausted(why)),
            Err(e @ RouteError::Moved) => Err(Status::aborted(e.to_string())),
        }
    }

    async fn set_shard_members(
        &self,
        req: Request<SetShardMembersRequest>,
    ) -> std::result::Result<Response<SetShardMembersReply>, Status> {
        let r = req.into_inner();
        let shard = self
            .shards
            .get(r.shard)
            .ok_or_else(|| Status::not_found(format!("shard {} is not on this node", r.shard)))?;
        let raft = shard.group.raft.clone();
        if !shard.is_leader() {
            let m = raft.metrics().borrow().clone();
            let leader = m
                .current_leader
                .and_then(|l| m.membership_config.membership().get_node(&l).cloned())
                .ok_or_else(|| Status::unavailable(format!("shard {} has no leader", r.shard)))?;
            let mut c = connect(self.router.conns(), &leader.addr).await?;
            return c.set_shard_members(r).await;
        }
        let membership = raft.metrics().borrow().membership_config.membership().clone();
        let known: BTreeSet<u64> = membership.nodes().map(|(id, _)| *id).collect();
        for m in &r.members {
            if !known.contains(&m.id) {
                raft.add_learner(m.id, BasicNode::new(m.addr.clone()), true)
                    .await
                    .map_err(|e| Status::unavailable(e.to_string()))?;
            }
        }
        let want: BTreeSet<u64> = r.members.iter().map(|m| m.id).collect();
        let voters: BTreeSet<u64> = membership.voter_ids().collect();
        if want != voters {
            raft.change_membership(ChangeMembers::ReplaceAllVoters(want), false)
                .await
                .map_err(|e| Status::unavailable(e.to_string()))?;
        }
        Ok(Response::new(SetShardMembersReply {}))
    }

    async fn change_meta(
        &self,
        req: Request<ChangeMetaRequest>,
    ) -> std::result::Result<Response<ChangeMetaReply>, Status> {
        let r = req.into_inner();
        let batch = ebb_storage::WriteBatch::from_bytes(&r.batch)
            .ok_or_else(|| Status::invalid_argument("not a write batch"))?;
        if !super::view::forwardable(&batch) {
            return Err(Status::invalid_argument(
                "only access records and intents may be written here",
            ));
        }
        match self.meta.propose_at(batch).await {
            Ok(index) => Ok(Response::new(ChangeMetaReply { index })),
            Err(MetaError::NotLeader(_)) => {
                Err(Status::unavailable("this node no longer leads the metadata group"))
            }
            Err(MetaError::Failed(e) | MetaError::Refused(e)) => Err(Status::unavailable(e)),
        }
    }
}

/// Makes `members` the voters of `shard`, through a node that holds it (it forwards to the
/// shard's leader). Returns once the membership change is committed.
pub async fn set_shard_members(
    conns: &Connections,
    view: &MetaView,
    shard: u64,
    members: &[u64],
) -> Result<()> {
    let info =
        view.shards.get(&shard).ok_or_else(|| NodeError::Cluster(format!("no shard {shard}")))?;
    let addr = |id: &u64| view.nodes.get(id).map(|n| n.grpc_addr.clone()).unwrap_or_default();
    let req = SetShardMembersRequest {
        shard,
        members: members.iter().map(|id| Member { id: *id, addr: addr(id) }).collect(),
    };
    let mut last = String::from("no node holds it");
    for holder in &info.replicas {
        match connect(conns, &addr(holder)).await {
            Ok(mut c) => match c.set_shard_members(req.clone()).await {
                Ok(_) => return Ok(()),
                Err(s) => last = s.message().to_string(),
            },
            Err(e) => last = e.to_string(),
        }
    }
    Err(NodeError::Cluster(format!("moving shard {shard}: {last}")))
}

/// Starts draining node `id`: here if this node leads the metadata group, else through its
/// leader.
pub async fn decommission(meta: &Meta, id: u64) -> std::result::Result<(), Status> {
    match meta.decommission(id).await {
        Ok(()) => Ok(()),
        Err(MetaError::NotLeader(Some((_, addr)))) => {
            let mut leader = connect(meta.conns(), &addr).await?;
            leader.decommission(DecommissionRequest { node_id: id }).await.map(|_| ())
        }
        Err(MetaError::NotLeader(None)) => {
            Err(Status::unavailable("the cluster has no metadata leader right now"))
        }
        Err(MetaError::Failed(e) | MetaError::Refused(e)) => Err(Status::failed_precondition(e)),
    }
}

/// Why a node could not join.
#[derive(Debug, thiserror::Error)]
#[error("could not join through {seeds:?}: {last}")]
pub struct JoinFailed {
    /// The seeds tried.
    pub seeds: Vec<String>,
    /// The last failure.
    pub last: String,
    /// Some seed answered (it serves a cluster, which could not take the node just then), as
    /// opposed to none answering at all.
    pub answered: bool,
    /// The cluster refused the node for good (`last` says why): trying again cannot help.
    pub refused: bool,
}

/// How one attempt to join through a seed failed.
enum Attempt {
    /// The seed was not reached.
    Unreached(String),
    /// It answered, but could not take the node just then.
    Answered(String),
    /// It refused the node for good.
    Refused(String),
}

/// The binary a join request describes (release 0.1.0 sends none of it).
fn joining_version(r: &JoinRequest) -> PeerVersion {
    match r.max_cluster_version {
        0 => PeerVersion { binary: None, range: VersionRange::LEGACY },
        max => PeerVersion {
            binary: Some(r.binary_version.chars().take(64).collect()),
            range: VersionRange { min: r.min_cluster_version.min(max), max },
        },
    }
}

/// Registers this node with the cluster through any of `seeds` (gRPC addresses, reached with
/// `tls` when given), retrying until `timeout`. Returns the node id the cluster assigned and
/// its cluster id.
pub async fn join(
    seeds: &[String],
    req: JoinRequest,
    timeout: Duration,
    tls: Option<ClientTlsConfig>,
) -> std::result::Result<JoinReply, JoinFailed> {
    let deadline = Instant::now() + timeout;
    let mut last = String::from("no seed address given");
    let mut answered = false;
    while Instant::now() < deadline {
        for seed in seeds {
            // Bounded: a seed that is starting too has its port bound (connections queue) but
            // answers nothing until it has joined.
            let attempt = async {
                let ep = ebb_raft::transport::endpoint(seed, tls.clone(), Duration::from_secs(2))
                    .map_err(|e| Attempt::Unreached(e.to_string()))?;
                let ch = ep
                    .timeout(CALL_TIMEOUT)
                    .connect()
                    .await
                    .map_err(|e| Attempt::Unreached(e.to_string()))?;
                match ClusterClient::new(ch).join(req.clone()).await {
                    Ok(r) => Ok(r.into_inner()),
                    Err(s) if s.code() == tonic::Code::FailedPrecondition => {
                        Err(Attempt::Refused(s.message().to_string()))
                    }
                    // An answer, even a refusal, comes from a node serving a cluster.
                    Err(s) => Err(Attempt::Answered(s.message().to_string())),
                }
            };
            match tokio::time::timeout(JOIN_ATTEMPT, attempt).await {
                Ok(Ok(r)) => return Ok(r),
                Ok(Err(Attempt::Refused(why))) => {
                    let last = format!("{seed}: {why}");
                    let seeds = seeds.to_vec();
                    return Err(JoinFailed { seeds, last, answered: true, refused: true });
                }
                Ok(Err(Attempt::Answered(e))) => {
                    answered = true;
                    last = format!("{seed}: {e}");
                }
                Ok(Err(Attempt::Unreached(e))) => last = format!("{seed}: {e}"),
                Err(_) => last = format!("{seed}: no answer within {JOIN_ATTEMPT:?}"),
            }
        }
        tracing::info!(%last, "waiting to join the cluster");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(JoinFailed { seeds: seeds.to_vec(), last, answered, refused: false })
}
