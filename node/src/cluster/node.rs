//! A cluster node's runtime: its id (assigned by the cluster on first start and kept in the
//! data directory), its member of the metadata group, the gRPC server for Raft and cluster
//! services, and the background loop that keeps the metadata group's membership in step with
//! the registered nodes.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ebb_raft::transport::{Connections, Credentials, Faults, Groups, RaftService};
use ebb_raft::GroupOptions;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::ClientTlsConfig;

use super::autosplit::AutoSplit;
use super::meta::Meta;
use super::placement::SplitLimits;
use super::proto::JoinRequest;
use super::router::Router;
use super::service::{join, ClusterService};
use super::shards::{self, ShardEnv, Shards};
use super::version::{VersionRange, Versions};
use super::view::{NodeInfo, NodeState, Settings};
use crate::error::{NodeError, Result};
use crate::tls::cluster::RequireClusterId;
use crate::tls::TlsSource;

/// Name of the file holding the node id in the data directory.
pub const NODE_ID_FILE: &str = "node_id";

/// Name of the file holding the cluster id (absent in a data directory of a cluster created
/// before cluster ids; such a cluster neither sends nor checks one).
pub const CLUSTER_ID_FILE: &str = "cluster_id";

/// How long a new node tries to join before it gives up (and, in Kubernetes, is restarted).
pub const JOIN_TIMEOUT: Duration = Duration::from_secs(300);

/// How a cluster node starts.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// Data directory.
    pub data_dir: PathBuf,
    /// The gRPC address other nodes reach this one at.
    pub advertise_grpc: String,
    /// HTTP and PostgreSQL addresses, for `system.nodes`.
    pub http_addr: String,
    /// PostgreSQL address.
    pub pg_addr: String,
    /// gRPC addresses of nodes of an existing cluster to join; empty to create a new cluster
    /// (on first start; later starts use the stored node id).
    pub join: Vec<String>,
    /// Whether this node creates the cluster when its data directory is new and no node of
    /// `join` answers (the first pod of a StatefulSet, whose seeds include itself).
    pub init_here: bool,
    /// Create a new cluster on this node if its data directory holds none, without asking the
    /// seeds (`--init-cluster`: for recovering from the loss of a whole cluster; other nodes
    /// still holding the old cluster's data will not join it).
    pub force_init: bool,
    /// Retention of tables created without one.
    pub default_retention: Option<Duration>,
    /// What one write request may add.
    pub write_limits: ebb_query::WriteLimits,
    /// Free space kept for deletes and compactions.
    pub disk_reserve: crate::config::durability::DiskReserve,
    /// Settings of a new cluster.
    pub settings: Settings,
    /// How the node's Raft groups run.
    pub groups: GroupOptions,
    /// TLS towards the other nodes (their certificates verified against the cluster CA).
    pub tls: Option<ClientTlsConfig>,
    /// Mutual TLS on this node's gRPC port.
    pub server_tls: Option<Arc<TlsSource>>,
    /// Open connections the gRPC port accepts.
    pub max_connections: usize,
    /// How long a `DELETE`, `ERASE` or DDL statement waits for every shard to apply it before
    /// answering that it is recorded and still running (the metadata leader finishes it).
    pub intent_patience: Duration,
    /// When shards split by themselves and how fast replicas move.
    pub scaling: crate::config::scaling::Scaling,
    /// The cluster versions this node supports: its binary's ([`VersionRange::BUILD`]), or an
    /// older range a test pins it to, to run it as the previous release would.
    pub versions: VersionRange,
    /// The file holding the join token this node shows when it joins; the node that creates the
    /// cluster registers it for the others ([`super::join_token`]).
    pub join_token_file: Option<PathBuf>,
}

/// A running cluster node.
pub struct ClusterNode {
    /// This node's id.
    pub id: u64,
    /// Its member of the metadata group.
    pub meta: Arc<Meta>,
    /// Its Raft groups.
    pub groups: Arc<Groups>,
    /// Its connections to other nodes.
    pub conns: Arc<Connections>,
    /// Its shard replicas.
    pub shards: Arc<Shards>,
    /// Routes writes to shard leaders.
    pub router: Arc<Router>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for ClusterNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterNode").field("id", &self.id).finish()
    }
}

fn read_node_id(dir: &Path) -> Result<Option<u64>> {
    let path = dir.join(NODE_ID_FILE);
    match std::fs::read_to_string(&path) {
        Ok(s) => {
            s.trim().parse::<u64>().map(Some).map_err(|_| {
                NodeError::Cluster(format!("{} does not hold a node id", path.display()))
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn write_node_id(dir: &Path, id: u64) -> Result<()> {
    ebb_raft::sm::snapshot::write_atomic(&dir.join(NODE_ID_FILE), id.to_string().as_bytes())
        .map_err(|e| NodeError::Cluster(format!("persisting the node id: {e}")))
}

fn read_cluster_id(dir: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(dir.join(CLUSTER_ID_FILE)) {
        Ok(s) => Ok(Some(s.trim().to_string()).filter(|s| !s.is_empty())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn write_cluster_id(dir: &Path, id: &str) -> Result<()> {
    ebb_raft::sm::snapshot::write_atomic(&dir.join(CLUSTER_ID_FILE), id.as_bytes())
        .map_err(|e| NodeError::Cluster(format!("persisting the cluster id: {e}")))
}

/// A new cluster id: 128 random bits, hex.
fn new_cluster_id() -> String {
    use rand::RngCore;
    let mut b = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

async fn stopped(mut rx: watch::Receiver<bool>) {
    while !*rx.borrow() {
        if rx.changed().await.is_err() {
            return;
        }
    }
}

impl ClusterNode {
    /// Starts the node, serving gRPC on `listener`. Messages it sends go through `faults`.
    pub async fn start(
        cfg: &ClusterConfig,
        listener: TcpListener,
        faults: Arc<Faults>,
    ) -> Result<ClusterNode> {
        ebb_storage::durable::create_dir_all(&cfg.data_dir)
            .map_err(|source| NodeError::DataDir { dir: cfg.data_dir.clone(), source })?;
        let stored = read_node_id(&cfg.data_dir)?;
        // A node is never its own seed.
        let seeds: Vec<String> =
            cfg.join.iter().filter(|s| **s != cfg.advertise_grpc).cloned().collect();
        let versions = Arc::new(Versions::new(cfg.versions));
        let join_token = match &cfg.join_token_file {
            Some(path) => Some(super::join_token::read_file(path).map_err(NodeError::Config)?),
            None => None,
        };
        let req = JoinRequest {
            grpc_addr: cfg.advertise_grpc.clone(),
            http_addr: cfg.http_addr.clone(),
            pg_addr: cfg.pg_addr.clone(),
            binary_version: crate::VERSION.to_string(),
            min_cluster_version: cfg.versions.min,
            max_cluster_version: cfg.versions.max,
            join_token: join_token.clone().unwrap_or_default(),
            nonce: super::join_token::nonce(),
        };
        let restoring = super::restore::read_plan(&cfg.data_dir)?;
        // A restored set on the initial node (pod 0 of the Helm chart, as its restore
        // procedure places it) creates the new cluster without asking the seeds: asking is
        // joining, and a restored node must never join a cluster (its set would be dropped).
        let restored_init = restoring.is_some() && cfg.init_here;
        let mut bootstrap =
            stored.is_none() && (seeds.is_empty() || cfg.force_init || restored_init);
        if restoring.is_some() && stored.is_none() && !bootstrap {
            return Err(NodeError::Config(format!(
                "{} holds a restored backup set: start it as the first node of a new cluster \
                 (without --join, or as --init-node), then join the other nodes to it",
                cfg.data_dir.display()
            )));
        }
        let tls = cfg.tls.clone();
        let failed = |e: super::service::JoinFailed| NodeError::Cluster(e.to_string());
        // Until it belongs to a cluster, the node tells the others so (see `bootstrap`).
        let (listener, unjoined) = if stored.is_none() && !bootstrap {
            let (l, u) = super::bootstrap::Unjoined::serve(
                listener,
                cfg.server_tls.clone(),
                cfg.max_connections,
            )
            .await?;
            (l, Some(u))
        } else {
            (listener, None)
        };
        let joined = match stored {
            Some(id) => (id, read_cluster_id(&cfg.data_dir)?),
            None if bootstrap => {
                if cfg.force_init {
                    tracing::warn!(
                        "--init-cluster: creating a new cluster without asking the seeds"
                    );
                }
                (1, Some(new_cluster_id()))
            }
            // The initial node creates the cluster only once every seed has said it belongs to
            // none; a seed that is a member serves a cluster already (perhaps without a quorum
            // just now), which this node, with an empty volume, joins.
            None if cfg.init_here => match super::bootstrap::decide(&seeds, tls.clone()).await {
                super::bootstrap::Decision::Create => {
                    bootstrap = true;
                    (1, Some(new_cluster_id()))
                }
                _ => {
                    let r = join(&seeds, req, JOIN_TIMEOUT, tls).await.map_err(failed)?;
                    (r.node_id, Some(r.cluster_id))
                }
            },
            None => {
                let r = join(&seeds, req, JOIN_TIMEOUT, tls).await.map_err(failed)?;
                (r.node_id, Some(r.cluster_id))
            }
        };
        if let Some(u) = unjoined {
            u.close().await;
        }
        let (id, cluster_id) = (joined.0, joined.1.filter(|c| !c.is_empty()));
        if stored.is_none() {
            // The cluster id first: a node id without it reads as a cluster without ids.
            if let Some(c) = &cluster_id {
                write_cluster_id(&cfg.data_dir, c)?;
            }
            write_node_id(&cfg.data_dir, id)?;
        }
        if cluster_id.is_none() {
            tracing::warn!(
                "this cluster was created without a cluster id: requests between \
                nodes are not checked for one"
            );
        }
        tracing::info!(
            node = id,
            bootstrap,
            cluster = cluster_id.as_deref().unwrap_or(""),
            "starting cluster node"
        );
        let groups = Groups::new();
        let conns = Connections::new(id, faults);
        conns.snapshot_pacer().set_rate(cfg.scaling.move_rate);
        let version = Some(versions.header());
        conns.set_credentials(Credentials { tls: cfg.tls.clone(), cluster_id, version });
        let meta_dir = cfg.data_dir.join("meta");
        let meta = Meta::open(id, &meta_dir, &cfg.groups, conns.clone(), &groups, versions.clone())
            .await?;
        let (stop, rx) = watch::channel(false);
        let mut tasks = Vec::new();
        let raft_svc = RaftService::new(id, groups.clone()).into_server();
        let shards = Arc::new(Shards::default());
        let router = Arc::new(
            Router::new(meta.clone(), shards.clone(), conns.clone(), groups.clone())
                .with_intent_patience(cfg.intent_patience),
        );
        let cluster_svc =
            ClusterService::new(meta.clone(), shards.clone(), router.clone()).into_server();
        let shutdown = stopped(rx.clone());
        let (health_reporter, health) = tonic_health::server::health_reporter();
        health_reporter.set_service_status("", tonic_health::ServingStatus::Serving).await;
        let member = super::bootstrap::MEMBER_SERVICE;
        health_reporter.set_service_status(member, tonic_health::ServingStatus::Serving).await;
        let incoming =
            crate::tls::conn::incoming(listener, cfg.server_tls.clone(), cfg.max_connections)?;
        let check = RequireClusterId::new(conns.clone(), versions.clone());
        tasks.push(tokio::spawn(async move {
            let res = crate::grpc::builder()
                .layer(check)
                .add_service(health)
                .add_service(raft_svc)
                .add_service(cluster_svc)
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await;
            if let Err(e) = res {
                tracing::error!(%e, "gRPC server failed");
            }
        }));
        let me = NodeInfo {
            id,
            grpc_addr: cfg.advertise_grpc.clone(),
            http_addr: cfg.http_addr.clone(),
            pg_addr: cfg.pg_addr.clone(),
            state: NodeState::Active,
        };
        if let Some(plan) = &restoring {
            // A restored set's cluster (a start cut short before it was created resumes here).
            super::restore::seed_shards(
                &cfg.data_dir,
                plan,
                &cfg.groups.engine,
                id,
                &cfg.advertise_grpc,
            )?;
            meta.bootstrap_restored(me, plan, join_token.as_deref()).await?;
            std::fs::remove_file(cfg.data_dir.join(super::restore::PLAN_FILE))?;
            tracing::info!(set = %plan.set, shards = plan.shards.len(), "created the cluster from a backup set");
        } else if bootstrap {
            meta.bootstrap(me, cfg.settings, join_token.as_deref()).await?;
        }
        let reserve = cfg.disk_reserve.for_dir(&cfg.data_dir);
        let env = ShardEnv {
            node: id,
            dir: cfg.data_dir.clone(),
            opts: cfg.groups.clone(),
            conns: conns.clone(),
            groups: groups.clone(),
            default_retention: cfg.default_retention,
            write_limits: cfg.write_limits,
            reserve: reserve.clone(),
        };
        shards::sync(&env, &meta.view(), &shards).await?;
        tasks.push(tokio::spawn(shard_loop(env, meta.clone(), shards.clone(), rx.clone())));
        let interval = super::deletions::purge_interval(cfg.groups.engine.delete_deadline);
        tasks.push(tokio::spawn(super::deletions::purge_loop(
            shards.clone(),
            interval,
            rx.clone(),
        )));
        let (r, health) = (router.clone(), router.health().clone());
        tasks.push(tokio::spawn(crate::health::run(
            health,
            move || {
                let (r, reserve) = (r.clone(), reserve.clone());
                async move { super::readiness::check(&r, &reserve).await }
            },
            stopped(rx.clone()),
        )));
        tasks.push(tokio::spawn(super::intents::intent_loop(router.clone(), rx.clone())));
        let limits = SplitLimits {
            bytes: cfg.scaling.split_bytes,
            rows_per_sec: cfg.scaling.split_rows_per_sec,
        };
        tasks.push(tokio::spawn(reconcile_loop(meta.clone(), AutoSplit::new(limits), rx)));
        // A joining node serves once it holds the metadata (the leader adds it as a learner).
        let mut changes = meta.subscribe();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        while meta.view().settings.is_none() {
            if tokio::time::timeout_at(deadline, changes.changed()).await.is_err() {
                return Err(NodeError::Cluster(
                    "joined, but the cluster metadata did not arrive within 120 s".into(),
                ));
            }
        }
        Ok(ClusterNode { id, meta, groups, conns, shards, router, stop, tasks })
    }

    /// Stops serving and shuts every group down (without flushing engines: their logs hold
    /// everything acknowledged).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for t in &self.tasks {
            t.abort();
        }
        for id in self.groups.ids() {
            if let Some(g) = self.groups.remove(id) {
                // A group's core stuck in a step must not hold the node's exit.
                if tokio::time::timeout(SHUTDOWN_TIMEOUT, g.raft.shutdown()).await.is_err() {
                    tracing::warn!(
                        group = id,
                        "a Raft group did not stop within {SHUTDOWN_TIMEOUT:?}"
                    );
                }
                // Shard engines keep no WAL: flushed now, a restart need not replay the log.
                let engine = g.replica.engine();
                match tokio::task::spawn_blocking(move || engine.flush()).await {
                    Ok(Err(e)) => tracing::warn!(group = id, error = %e, "flushing a shard"),
                    Err(e) => tracing::warn!(group = id, error = %e, "flushing a shard"),
                    Ok(Ok(())) => {}
                }
            }
        }
        for t in self.tasks {
            t.abort();
            let _ = t.await;
        }
    }
}

/// How long stopping a node waits for each Raft group's core to stop.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// Opens and closes this node's shard replicas as the metadata changes.
async fn shard_loop(
    env: ShardEnv,
    meta: Arc<Meta>,
    shards: Arc<Shards>,
    stop: watch::Receiver<bool>,
) {
    let mut changes = meta.subscribe();
    loop {
        if *stop.borrow() {
            return;
        }
        if let Err(e) = shards::sync(&env, &meta.view(), &shards).await {
            tracing::warn!(%e, "opening or closing shard replicas");
        }
        tokio::select! {
            _ = changes.changed() => {}
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
}

/// How often the metadata leader checks that shard leaders are spread evenly.
const LEADER_CHECK: Duration = Duration::from_secs(2);

/// On the metadata leader: keeps the group's members in step with the registered nodes, and
/// moves shard replicas where the placement wants them.
async fn reconcile_loop(meta: Arc<Meta>, mut auto: AutoSplit, stop: watch::Receiver<bool>) {
    let mut changes = meta.subscribe();
    let mut leaders_checked = Instant::now();
    let mut splits = super::split::SplitClock::default();
    let mut leader_tries = super::rebalance::LeaderTries::default();
    let mut upgrade = super::upgrade::AutoFinalize::default();
    loop {
        if *stop.borrow() {
            return;
        }
        if let Err(e) = meta.reconcile_members().await {
            tracing::warn!(%e, "reconciling metadata group members");
        }
        if super::split::step(&meta, &mut splits).await {
            continue;
        }
        if super::rebalance::step(&meta).await {
            continue;
        }
        if auto.step(&meta).await {
            continue;
        }
        upgrade.step(&meta).await;
        // Leaders are looked up on every node: not on every pass.
        if leaders_checked.elapsed() >= LEADER_CHECK {
            leaders_checked = Instant::now();
            super::rebalance::balance_leaders(&meta, &mut leader_tries).await;
        }
        tokio::select! {
            _ = changes.changed() => {}
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
}
