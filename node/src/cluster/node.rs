//! A cluster node's runtime: its id (assigned by the cluster on first start and kept in the
//! data directory), its member of the metadata group, the gRPC server for Raft and cluster
//! services, and the background loop that keeps the metadata group's membership in step with
//! the registered nodes.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ebb_raft::transport::{Connections, Faults, Groups, RaftService};
use ebb_raft::GroupOptions;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::meta::Meta;
use super::proto::JoinRequest;
use super::router::Router;
use super::service::{join, ClusterService};
use super::shards::{self, ShardEnv, Shards};
use super::view::{NodeInfo, NodeState, Settings};
use crate::error::{NodeError, Result};

/// Name of the file holding the node id in the data directory.
pub const NODE_ID_FILE: &str = "node_id";

/// How long the initial node tries its seeds before it creates the cluster itself.
pub const INIT_PROBE: Duration = Duration::from_secs(10);

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
    /// Retention of tables created without one.
    pub default_retention: Option<Duration>,
    /// Settings of a new cluster.
    pub settings: Settings,
    /// How the node's Raft groups run.
    pub groups: GroupOptions,
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
        std::fs::create_dir_all(&cfg.data_dir)
            .map_err(|source| NodeError::DataDir { dir: cfg.data_dir.clone(), source })?;
        let stored = read_node_id(&cfg.data_dir)?;
        // A node is never its own seed.
        let seeds: Vec<String> =
            cfg.join.iter().filter(|s| **s != cfg.advertise_grpc).cloned().collect();
        let req = JoinRequest {
            grpc_addr: cfg.advertise_grpc.clone(),
            http_addr: cfg.http_addr.clone(),
            pg_addr: cfg.pg_addr.clone(),
        };
        let mut bootstrap = stored.is_none() && seeds.is_empty();
        let id = match stored {
            Some(id) => id,
            None if bootstrap => 1,
            None if cfg.init_here => match join(&seeds, req, INIT_PROBE).await {
                Ok(id) => id,
                Err(e) => {
                    tracing::info!(%e, "no seed answers as a cluster member: creating the cluster");
                    bootstrap = true;
                    1
                }
            },
            None => join(&seeds, req, JOIN_TIMEOUT).await?,
        };
        if stored.is_none() {
            write_node_id(&cfg.data_dir, id)?;
        }
        tracing::info!(node = id, bootstrap, "starting cluster node");
        let groups = Groups::new();
        let conns = Connections::new(id, faults);
        let meta =
            Meta::open(id, &cfg.data_dir.join("meta"), &cfg.groups, conns.clone(), &groups).await?;
        let (stop, rx) = watch::channel(false);
        let mut tasks = Vec::new();
        let raft_svc = RaftService::new(id, groups.clone()).into_server();
        let shards = Arc::new(Shards::default());
        let router =
            Arc::new(Router::new(meta.clone(), shards.clone(), conns.clone(), groups.clone()));
        let cluster_svc =
            ClusterService::new(meta.clone(), shards.clone(), router.clone()).into_server();
        let shutdown = stopped(rx.clone());
        let (health_reporter, health) = tonic_health::server::health_reporter();
        health_reporter.set_service_status("", tonic_health::ServingStatus::Serving).await;
        tasks.push(tokio::spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            let res = tonic::transport::Server::builder()
                .add_service(health)
                .add_service(raft_svc)
                .add_service(cluster_svc)
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await;
            if let Err(e) = res {
                tracing::error!(%e, "gRPC server failed");
            }
        }));
        if bootstrap {
            let me = NodeInfo {
                id,
                grpc_addr: cfg.advertise_grpc.clone(),
                http_addr: cfg.http_addr.clone(),
                pg_addr: cfg.pg_addr.clone(),
                state: NodeState::Active,
            };
            meta.bootstrap(me, cfg.settings).await?;
        }
        let env = ShardEnv {
            node: id,
            dir: cfg.data_dir.clone(),
            opts: cfg.groups.clone(),
            conns: conns.clone(),
            groups: groups.clone(),
            default_retention: cfg.default_retention,
        };
        shards::sync(&env, &meta.view(), &shards).await?;
        tasks.push(tokio::spawn(shard_loop(env, meta.clone(), shards.clone(), rx.clone())));
        let interval = super::deletions::purge_interval(cfg.groups.engine.delete_deadline);
        tasks.push(tokio::spawn(super::deletions::purge_loop(
            shards.clone(),
            interval,
            rx.clone(),
        )));
        tasks.push(tokio::spawn(reconcile_loop(meta.clone(), rx)));
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
                let _ = g.raft.shutdown().await;
            }
        }
        for t in self.tasks {
            t.abort();
            let _ = t.await;
        }
    }
}

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

/// On the metadata leader: keeps the group's members in step with the registered nodes, and
/// moves shard replicas where the placement wants them.
async fn reconcile_loop(meta: Arc<Meta>, stop: watch::Receiver<bool>) {
    let mut changes = meta.subscribe();
    loop {
        if *stop.borrow() {
            return;
        }
        if let Err(e) = meta.reconcile_members().await {
            tracing::warn!(%e, "reconciling metadata group members");
        }
        if super::rebalance::step(&meta).await {
            continue;
        }
        tokio::select! {
            _ = changes.changed() => {}
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
}
