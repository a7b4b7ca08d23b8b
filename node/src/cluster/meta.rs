//! The metadata group (Raft group 0): nodes, shards and settings. Its first three active nodes
//! vote; every other node follows it as a learner, so each node holds the metadata locally.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ebb_raft::transport::{Connections, GroupHandle, Groups};
use ebb_raft::{open_group, run_group, Applier, Command, GroupOptions, NodeId, TypeConfig};
use ebb_storage::{Engine, WriteBatch};
use openraft::error::{ClientWriteError, InitializeError, RaftError};
use openraft::{BasicNode, ChangeMembers, Raft};
use parking_lot::RwLock;
use tokio::sync::watch;

use super::join_token::{self, Admission};
use super::version::{Gate, PeerVersion, Versions};
use super::view::{self, MetaView, NodeInfo, NodeState, Settings, ShardInfo};
use crate::error::{NodeError, Result};

/// The metadata group's id.
pub const META_GROUP: u64 = 0;

/// Voters of the metadata group (the rest of the nodes are learners).
pub const META_VOTERS: usize = 3;

/// How long a metadata proposal or membership change may wait to commit. A leader cut off from
/// its voters does not step down by itself, so an unbounded wait would hold the change lock (and
/// every change behind it) for as long as the partition lasts.
const COMMIT_TIMEOUT: Duration = super::replication::PROPOSE_TIMEOUT;

/// `what` within [`COMMIT_TIMEOUT`], or [`MetaError::Failed`] saying it may still commit.
async fn bounded<T, E: std::fmt::Display>(
    what: &str,
    f: impl std::future::Future<Output = std::result::Result<T, E>>,
) -> std::result::Result<T, MetaError> {
    match tokio::time::timeout(COMMIT_TIMEOUT, f).await {
        Ok(r) => r.map_err(|e| MetaError::Failed(e.to_string())),
        Err(_) => Err(MetaError::Failed(format!(
            "{what} not committed within {COMMIT_TIMEOUT:?} (it may still commit)"
        ))),
    }
}

/// Why a metadata change was not made.
#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    /// This node does not lead the metadata group; the leader's id and address if known.
    #[error("not the metadata leader")]
    NotLeader(Option<(u64, String)>),
    /// Refused for good, whoever leads (a joining node whose binary the cluster cannot run).
    #[error("{0}")]
    Refused(String),
    /// Anything else.
    #[error("{0}")]
    Failed(String),
}

struct MetaApplier {
    view: Arc<RwLock<MetaView>>,
    changed: watch::Sender<u64>,
    versions: Arc<Versions>,
}

impl Applier for MetaApplier {
    fn apply(
        &self,
        engine: &Arc<Engine>,
        batch: &WriteBatch,
        seq: u64,
    ) -> std::result::Result<(), ebb_storage::Error> {
        // Every batch was checked against the view before it was proposed (`Meta::propose_at`),
        // so one that does not apply here holds records a newer build wrote. It stops this
        // replica of the metadata group rather than leaving its view short of them.
        let mut next = self.view.read().clone();
        next.apply(batch).map_err(|e| ebb_storage::Error::Unreadable {
            what: format!("cluster metadata entry at sequence {seq}"),
            why: e.to_string(),
        })?;
        engine.write(batch, seq)?;
        self.versions.set_active(next.active_version());
        *self.view.write() = next;
        self.changed.send_modify(|v| *v += 1);
        Ok(())
    }

    fn replaced(&self, engine: &Arc<Engine>) {
        match MetaView::load(engine) {
            Ok(v) => {
                self.versions.set_active(v.active_version());
                *self.view.write() = v;
            }
            Err(e) => tracing::error!(%e, "loading cluster metadata from a snapshot"),
        }
        self.changed.send_modify(|v| *v += 1);
    }
}

/// This node's member of the metadata group and its view of the metadata.
pub struct Meta {
    node: NodeId,
    group: GroupHandle,
    view: Arc<RwLock<MetaView>>,
    changed: watch::Receiver<u64>,
    /// Serializes read-modify-write changes on the leader.
    write_lock: tokio::sync::Mutex<()>,
    /// Channels to the other nodes.
    conns: Arc<Connections>,
    /// This node's binary's cluster versions and the active one.
    versions: Arc<Versions>,
}

impl std::fmt::Debug for Meta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meta").field("node", &self.node).finish()
    }
}

impl Meta {
    /// Opens node `node`'s member of the metadata group under `dir` and starts it.
    pub async fn open(
        node: NodeId,
        dir: &Path,
        opts: &GroupOptions,
        conns: Arc<Connections>,
        groups: &Groups,
        versions: Arc<Versions>,
    ) -> Result<Arc<Meta>> {
        let start = |e: ebb_raft::StartError| NodeError::Cluster(format!("metadata group: {e}"));
        let (log, replica) = open_group(dir, opts).await.map_err(start)?;
        let loaded =
            MetaView::load(&replica.engine()).map_err(|e| NodeError::Cluster(e.to_string()))?;
        // A binary too old for the cluster this node was part of does not start (a rollback
        // after finalizing): its peers would refuse it anyway.
        if let Some(why) = versions.unfit(loaded.active_version()) {
            return Err(NodeError::Cluster(why));
        }
        versions.set_active(loaded.active_version());
        let view = Arc::new(RwLock::new(loaded));
        let (tx, changed) = watch::channel(0);
        let applier = MetaApplier { view: view.clone(), changed: tx, versions: versions.clone() };
        replica.set_applier(Arc::new(applier));
        let group = run_group(node, META_GROUP, log, replica, opts, conns.clone(), groups)
            .await
            .map_err(start)?;
        let write_lock = Default::default();
        Ok(Arc::new(Meta { node, group, view, changed, write_lock, conns, versions }))
    }

    /// This node's binary's cluster versions and the active one.
    pub fn versions(&self) -> &Arc<Versions> {
        &self.versions
    }

    /// Serializes a read-modify-write change of the metadata (on the leader).
    pub(super) async fn lock_changes(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.write_lock.lock().await
    }

    /// This node's connections to the others.
    pub fn conns(&self) -> &Arc<Connections> {
        &self.conns
    }

    /// The metadata as this node has applied it.
    pub fn view(&self) -> MetaView {
        self.view.read().clone()
    }

    /// `f` of the metadata view, read in place (no copy of it): for a check on a hot path.
    pub fn with_view<R>(&self, f: impl FnOnce(&MetaView) -> R) -> R {
        f(&self.view.read())
    }

    /// A receiver that changes whenever the metadata does.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.clone()
    }

    /// This node's id.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// The metadata group's Raft.
    pub fn raft(&self) -> &Raft<TypeConfig> {
        &self.group.raft
    }

    /// The group handle.
    pub fn group(&self) -> &GroupHandle {
        &self.group
    }

    /// True if this node leads the metadata group.
    pub fn is_leader(&self) -> bool {
        self.group.raft.metrics().borrow().state.is_leader()
    }

    /// The leader's id and gRPC address, if known.
    pub fn leader(&self) -> Option<(u64, String)> {
        let m = self.group.raft.metrics().borrow().clone();
        let id = m.current_leader?;
        let addr = m.membership_config.membership().get_node(&id)?.addr.clone();
        Some((id, addr))
    }

    /// Creates a new cluster with this node (`me`) as its only member.
    pub async fn bootstrap(
        &self,
        me: NodeInfo,
        settings: Settings,
        join_token: Option<&str>,
    ) -> Result<()> {
        self.bootstrap_with(me, settings, None, join_token).await
    }

    /// Creates a new cluster from a restored backup set (`plan`), with this node (`me`) as its
    /// only member and the replica of every shard.
    pub async fn bootstrap_restored(
        &self,
        me: NodeInfo,
        plan: &super::restore::RestorePlan,
        join_token: Option<&str>,
    ) -> Result<()> {
        self.bootstrap_with(me, plan.settings, Some(plan), join_token).await
    }

    async fn bootstrap_with(
        &self,
        me: NodeInfo,
        settings: Settings,
        plan: Option<&super::restore::RestorePlan>,
        join_token: Option<&str>,
    ) -> Result<()> {
        let members = BTreeMap::from([(me.id, BasicNode::new(me.grpc_addr.clone()))]);
        match self.group.raft.initialize(members).await {
            Ok(()) => {}
            Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {} // already created
            Err(e) => return Err(NodeError::Cluster(format!("creating the cluster: {e}"))),
        }
        self.group
            .raft
            .wait(Some(Duration::from_secs(30)))
            .state(openraft::ServerState::Leader, "bootstrap")
            .await
            .map_err(|e| NodeError::Cluster(format!("electing the first leader: {e}")))?;
        if self.view.read().settings.is_some() {
            return Ok(());
        }
        let mut b = WriteBatch::new();
        view::put_settings(&mut b, &settings);
        view::put_node(&mut b, &me, me.id + 1);
        // A new cluster runs at the newest version its first node's binary supports.
        let version = view::ClusterVersionRecord {
            active: self.versions.range().max,
            since_ms: ebb_query::now_ms(),
            by: "created".into(),
        };
        view::put_cluster_version(&mut b, &version);
        // The other nodes of a new cluster join with the token the first one was given.
        if let Some(t) = join_token {
            view::put_join_token(&mut b, &join_token::bootstrap(t, ebb_query::now_ms()));
        }
        match plan {
            None => {
                for s in 1..=settings.shards as u64 {
                    view::put_shard(&mut b, &ShardInfo::root(s, vec![me.id]));
                }
            }
            Some(plan) => {
                for s in &plan.shards {
                    let s = ShardInfo {
                        replicas: vec![me.id],
                        target: None,
                        split_from: None,
                        ..s.clone()
                    };
                    view::put_shard(&mut b, &s);
                }
                for (k, v) in &plan.records {
                    b.put(k.clone(), v.clone());
                }
            }
        }
        self.propose(b).await.map_err(|e| NodeError::Cluster(e.to_string()))
    }

    /// Proposes a metadata batch; returns once it is applied here.
    pub async fn propose(&self, batch: WriteBatch) -> std::result::Result<(), MetaError> {
        self.propose_at(batch).await.map(|_| ())
    }

    /// [`Meta::propose`], returning the log index the batch was applied at.
    pub async fn propose_at(&self, batch: WriteBatch) -> std::result::Result<u64, MetaError> {
        // A record that does not apply to the view is refused here, before every replica would
        // stop at it.
        if let Err(e) = self.view.read().clone().apply(&batch) {
            return Err(MetaError::Refused(format!("refused metadata change: {e}")));
        }
        let cmd = Command::Batch(batch.to_bytes());
        let write = self.group.raft.client_write(cmd);
        let written = tokio::time::timeout(COMMIT_TIMEOUT, write).await.map_err(|_| {
            MetaError::Failed(format!(
                "metadata change not committed within {COMMIT_TIMEOUT:?} (it may still commit)"
            ))
        })?;
        match written {
            Ok(r) => match r.data.error {
                None => Ok(r.log_id.index),
                Some(e) => Err(MetaError::Failed(e)),
            },
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_))) => {
                Err(MetaError::NotLeader(self.leader()))
            }
            Err(e) => Err(MetaError::Failed(e.to_string())),
        }
    }

    /// Waits until this node has applied the metadata log up to `index`.
    pub async fn wait_applied(
        &self,
        index: u64,
        timeout: Duration,
    ) -> std::result::Result<(), MetaError> {
        self.group
            .raft
            .wait(Some(timeout))
            .applied_index_at_least(Some(index), "access change")
            .await
            .map(|_| ())
            .map_err(|e| MetaError::Failed(e.to_string()))
    }

    /// Registers a node (on the leader): a new id, or the id of the node already registered at
    /// `grpc_addr`.
    pub async fn register(
        &self,
        grpc_addr: &str,
        http_addr: &str,
        pg_addr: &str,
        peer: &PeerVersion,
        token: Option<&str>,
        nonce: &str,
    ) -> std::result::Result<u64, MetaError> {
        if !self.is_leader() {
            return Err(MetaError::NotLeader(self.leader()));
        }
        let _g = self.write_lock.lock().await;
        let v = self.view();
        let active = v.active_version();
        if !peer.range.runs_at(active) {
            return Err(MetaError::Refused(format!(
                "the joining node runs {}, and this cluster runs at cluster version {active}: \
                 start it with a binary that supports cluster version {active}",
                peer.describe()
            )));
        }
        let (id, next) = (v.next_node_id, v.next_node_id + 1);
        let mut b = WriteBatch::new();
        if active >= Gate::JoinTokens.since() {
            let now = ebb_query::now_ms();
            match join_token::admit(&v.join_tokens, token, nonce, id, now) {
                Ok(Admission::Admit(spent)) => view::put_join_token(&mut b, &spent),
                Ok(Admission::Again(node)) => return Ok(node),
                Err(why) => {
                    tracing::warn!(grpc_addr, why, "refused a joining node");
                    return Err(MetaError::Refused(why));
                }
            }
        }
        // Nodes join only while their data directory holds no node id. One registered at the
        // same address has lost its data (or never stored its id): it gets a new id, and the
        // old one, whose replicas are gone, is drained like a decommissioned node.
        let stale =
            v.nodes.values().filter(|n| n.grpc_addr == grpc_addr && n.state == NodeState::Active);
        for old in stale {
            tracing::warn!(
                old = old.id,
                new = id,
                grpc_addr,
                "a node rejoined without its data: draining its old id"
            );
            let mut drained = old.clone();
            drained.state = NodeState::Draining;
            view::put_node(&mut b, &drained, next);
        }
        let node = NodeInfo {
            id,
            grpc_addr: grpc_addr.to_string(),
            http_addr: http_addr.to_string(),
            pg_addr: pg_addr.to_string(),
            state: NodeState::Active,
        };
        view::put_node(&mut b, &node, next);
        self.propose(b).await?;
        Ok(id)
    }

    /// Starts draining node `id` (on the leader): placement stops counting it, the rebalancer
    /// moves its replicas away, and once it holds none it leaves the cluster.
    pub async fn decommission(&self, id: u64) -> std::result::Result<(), MetaError> {
        if !self.is_leader() {
            return Err(MetaError::NotLeader(self.leader()));
        }
        let _g = self.write_lock.lock().await;
        let v = self.view();
        let Some(n) = v.nodes.get(&id) else {
            return Err(MetaError::Failed(format!("no node {id}")));
        };
        if n.state != NodeState::Active {
            return Ok(());
        }
        if v.active().count() <= 1 {
            return Err(MetaError::Failed("the last active node cannot be decommissioned".into()));
        }
        let mut b = WriteBatch::new();
        view::put_node(
            &mut b,
            &NodeInfo { state: NodeState::Draining, ..n.clone() },
            v.next_node_id,
        );
        self.propose(b).await
    }

    /// On the leader: marks drained nodes (draining, holding no replica) as removed.
    async fn retire_drained(&self) -> std::result::Result<bool, MetaError> {
        let _g = self.write_lock.lock().await;
        let v = self.view();
        let drained: Vec<NodeInfo> = v
            .nodes
            .values()
            .filter(|n| n.state == NodeState::Draining)
            .filter(|n| !v.shards.values().any(|s| s.involves(n.id)))
            .cloned()
            .collect();
        if drained.is_empty() {
            return Ok(false);
        }
        let mut b = WriteBatch::new();
        for n in drained {
            tracing::info!(node = n.id, "node drained; it leaves the cluster");
            view::put_node(&mut b, &NodeInfo { state: NodeState::Removed, ..n }, v.next_node_id);
        }
        self.propose(b).await?;
        Ok(true)
    }

    /// On the leader: makes every registered node a member of the metadata group, the first
    /// [`META_VOTERS`] active nodes voters and the rest learners. Returns true if it changed
    /// anything.
    pub async fn reconcile_members(&self) -> std::result::Result<bool, MetaError> {
        if !self.is_leader() {
            return Ok(false);
        }
        let v = self.view();
        let m = self.group.raft.metrics().borrow().clone();
        let membership = m.membership_config.membership().clone();
        let members: BTreeSet<u64> = membership.nodes().map(|(id, _)| *id).collect();
        let voters: BTreeSet<u64> = membership.voter_ids().collect();
        let want: BTreeSet<u64> = v.active().map(|n| n.id).take(META_VOTERS).collect();
        let mut changed = self.retire_drained().await?;
        let v = if changed { self.view() } else { v };
        for n in v.active() {
            if !members.contains(&n.id) {
                let blocking = want.contains(&n.id);
                let node = BasicNode::new(n.grpc_addr.clone());
                bounded("adding a learner", self.group.raft.add_learner(n.id, node, blocking))
                    .await?;
                changed = true;
            }
        }
        if !want.is_empty() && want != voters {
            let change = ChangeMembers::ReplaceAllVoters(want);
            bounded("a voter change", self.group.raft.change_membership(change, true)).await?;
            changed = true;
        }
        // Nodes that left stop following the metadata.
        let gone: BTreeSet<u64> = v
            .nodes
            .values()
            .filter(|n| n.state == NodeState::Removed && members.contains(&n.id))
            .map(|n| n.id)
            .collect();
        if !gone.is_empty()
            && gone.is_disjoint(
                &self
                    .group
                    .raft
                    .metrics()
                    .borrow()
                    .membership_config
                    .membership()
                    .voter_ids()
                    .collect(),
            )
        {
            let change = ChangeMembers::RemoveNodes(gone);
            bounded("removing members", self.group.raft.change_membership(change, false)).await?;
            changed = true;
        }
        Ok(changed)
    }
}

/// How long a forwarded metadata change may take to reach this node.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);

impl Meta {
    /// Proposes `batch` (records any node may change: see [`view::forwardable`]) on the
    /// metadata leader, through the `ChangeMeta` call when that is another node, then waits
    /// until this node has applied it.
    pub async fn change(&self, batch: WriteBatch) -> std::result::Result<(), MetaError> {
        let failed = |e: String| MetaError::Failed(format!("metadata group: {e}"));
        let index = match self.propose_at(batch.clone()).await {
            Ok(i) => i,
            Err(MetaError::NotLeader(Some((_, addr)))) => {
                let req = super::proto::ChangeMetaRequest { batch: batch.to_bytes() };
                let ch = self.conns.channel(&addr).map_err(|e| failed(e.to_string()))?;
                let mut c = super::proto::cluster_client::ClusterClient::new(ch);
                let call = tokio::time::timeout(FORWARD_TIMEOUT, c.change_meta(req));
                match call.await {
                    Ok(Ok(r)) => r.into_inner().index,
                    Ok(Err(s)) => return Err(failed(s.message().to_string())),
                    Err(_) => return Err(failed("the leader did not answer".into())),
                }
            }
            Err(MetaError::NotLeader(None)) => return Err(failed("no leader".into())),
            Err(MetaError::Failed(e) | MetaError::Refused(e)) => return Err(failed(e)),
        };
        self.wait_applied(index, FORWARD_TIMEOUT).await
    }
}

#[async_trait::async_trait]
impl ebb_query::access::AccessStore for Meta {
    fn access(&self) -> Arc<ebb_query::access::AccessState> {
        self.view.read().access.clone()
    }

    /// Proposes the records on the metadata leader, then waits until this node has applied
    /// them.
    async fn write_access(
        &self,
        ops: Vec<ebb_query::access::AccessOp>,
    ) -> std::result::Result<(), ebb_query::QueryError> {
        use ebb_query::QueryError;
        let mut batch = WriteBatch::new();
        view::put_access(&mut batch, &ops).map_err(|e| QueryError::Internal(e.to_string()))?;
        self.change(batch).await.map_err(|e| QueryError::Unavailable(e.to_string()))
    }
}
