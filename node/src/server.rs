//! `ebb server`: opens the database and serves HTTP, the PostgreSQL wire protocol and gRPC
//! until told to stop; then stops accepting, lets requests finish and flushes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ebb_query::front::{FrontDoor, Target};
use ebb_query::Database;
use ebb_storage::Options;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::error::{NodeError, Result};
use crate::http::{router, AppState, Serving};
use crate::metrics::Metrics;
use crate::tls::TlsSource;

/// A running server.
pub struct Server {
    /// Bound HTTP address.
    pub http_addr: SocketAddr,
    /// Bound PostgreSQL address.
    pub pg_addr: SocketAddr,
    /// Bound gRPC address.
    pub grpc_addr: SocketAddr,
    /// Bound Arrow Flight SQL address.
    pub flight_addr: SocketAddr,
    db: Option<Arc<Database>>,
    cluster: Option<crate::cluster::ClusterNode>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

async fn bind(what: &'static str, addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|source| NodeError::Listen { what, addr, source })
}

/// The cluster versions this node supports: its binary's, or, for tests of mixed-version
/// clusters (`deploy/k8s_sim.py` without a previous release's binary), an older range
/// `EBB_TEST_CLUSTER_VERSIONS=1-1` pins it to, so that it runs as that release would.
fn pinned_versions() -> Result<crate::cluster::version::VersionRange> {
    use crate::cluster::version::VersionRange;
    let Ok(text) = std::env::var("EBB_TEST_CLUSTER_VERSIONS") else {
        return Ok(VersionRange::BUILD);
    };
    let parsed = text.split_once('-').and_then(|(a, b)| {
        let r = VersionRange { min: a.trim().parse().ok()?, max: b.trim().parse().ok()? };
        let build = VersionRange::BUILD;
        (r.min <= r.max && r.min >= build.min && r.max <= build.max).then_some(r)
    });
    let r = parsed.ok_or_else(|| {
        NodeError::Config(format!(
            "EBB_TEST_CLUSTER_VERSIONS={text:?}: a range such as 1-1 within this binary's {}",
            VersionRange::BUILD
        ))
    })?;
    tracing::warn!(versions = %r, "running pinned to older cluster versions (a test setting)");
    Ok(r)
}

/// `addr` as other nodes and clients reach it: on the advertised gRPC host when it listens on
/// every interface (as in a container).
fn reachable(addr: SocketAddr, advertise_grpc: &str) -> String {
    if !addr.ip().is_unspecified() {
        return addr.to_string();
    }
    match advertise_grpc.rsplit_once(':') {
        Some((host, _)) => format!("{host}:{}", addr.port()),
        None => addr.to_string(),
    }
}

/// Runs `f` until `stop` turns true.
async fn until_stopped(f: impl std::future::Future<Output = ()>, stop: watch::Receiver<bool>) {
    tokio::select! {
        () = f => {}
        () = stopped(stop) => {}
    }
}

/// Resolves when `stop` turns true.
async fn stopped(mut rx: watch::Receiver<bool>) {
    while !*rx.borrow() {
        if rx.changed().await.is_err() {
            return;
        }
    }
}

impl Server {
    /// Opens the data directory and starts serving (ports 0 pick free ones).
    pub async fn start(config: &Config) -> Result<Server> {
        if config.cluster_mode() {
            return Self::start_cluster(config).await;
        }
        let opts = Options {
            delete_deadline: config.delete_deadline,
            sync: config.sync,
            ..Options::default()
        };
        let dir = config.data_dir.clone();
        private_dir(&dir).map_err(|source| NodeError::DataDir { dir: dir.clone(), source })?;
        let db = tokio::task::spawn_blocking(move || Database::open(&dir, opts))
            .await?
            .map_err(|source| NodeError::Open { dir: config.data_dir.clone(), source })?;
        db.set_default_retention(config.default_retention);
        db.set_write_limits(config.write_limits);
        let reserve = config.disk_reserve.for_dir(&config.data_dir);
        db.set_disk_reserve(reserve.clone());
        let db = Arc::new(db);
        let backups = Arc::new(crate::backup::BackupService::new(
            Arc::new(crate::backup::local::LocalParts::new(db.clone())),
            Arc::new(crate::backup::registry::LocalRegistry::new(&config.data_dir.join("backup"))),
            &config.data_dir,
            config.scaling.backup_rate,
        ));
        let shards =
            ebb_query::sql::shard::LocalShards::new(db.clone()).with_backups(backups.clone());
        let target = Target { shards: Arc::new(shards), access: db.clone() };
        let door = FrontDoor::with_limits(target, config.limits)
            .map_err(|e| NodeError::Config(format!("query runtime: {e}")))?;
        crate::security::bootstrap(&door, config).await?;
        let tls = Tls::load(config)?;
        let clients = Listeners::bind(config).await?;
        let grpc = bind("gRPC", config.grpc_addr).await?;
        let (http_addr, pg_addr, flight_addr) = clients.addrs()?;
        let grpc_addr = grpc.local_addr()?;
        let (stop, rx) = watch::channel(false);
        let metrics = Arc::new(Metrics::default());
        let health = Arc::new(crate::health::Health::default());
        let checked = db.clone();
        let check = move || {
            let mut r = crate::health::Readiness::ready();
            let engine = checked.engine();
            crate::health::check_storage([("data".to_string(), &*engine)], &reserve, &mut r);
            std::future::ready(r)
        };
        health.set(check().await);
        let mut tasks = serve_clients(
            clients,
            &door,
            Serving::Node(db.clone()),
            backups,
            health.clone(),
            &metrics,
            config,
            &tls,
            &rx,
        )?;
        tasks.push(tokio::spawn(crate::health::run(health, check, stopped(rx.clone()))));
        let grpc = crate::tls::conn::incoming(grpc, tls.cluster.clone(), config.max_connections)?;
        let shutdown = stopped(rx.clone());
        tasks.push(tokio::spawn(async move {
            if let Err(e) = crate::grpc::serve(grpc, shutdown).await {
                tracing::error!(error = %e, "gRPC server failed");
            }
        }));
        tasks.push(tokio::spawn(crate::tls::watch(tls.sources(), || {}, stopped(rx.clone()))));
        let single = db.clone();
        tasks.push(tokio::spawn(purge_loop(
            move || vec![single.clone()],
            metrics,
            config.retention_check_interval,
            stopped(rx),
        )));
        tracing::info!(%http_addr, %pg_addr, %grpc_addr, %flight_addr, data_dir = %config.data_dir.display(), "EbbDB serving");
        Ok(Server {
            http_addr,
            pg_addr,
            grpc_addr,
            flight_addr,
            db: Some(db),
            cluster: None,
            stop,
            tasks,
        })
    }

    /// Starts a cluster node: creates a cluster, joins one, or rejoins with its stored id.
    /// HTTP and the PostgreSQL wire protocol serve writes and SQL over the whole cluster;
    /// gRPC carries Raft and cluster traffic.
    async fn start_cluster(config: &Config) -> Result<Server> {
        use crate::cluster::view::Settings;
        use crate::cluster::{ClusterConfig, ClusterNode};
        let dir = config.data_dir.clone();
        private_dir(&dir).map_err(|source| NodeError::DataDir { dir: dir.clone(), source })?;
        let tls = Tls::load(config)?;
        let clients = Listeners::bind(config).await?;
        let grpc = bind("gRPC", config.grpc_addr).await?;
        let (http_addr, pg_addr, flight_addr) = clients.addrs()?;
        let grpc_addr = grpc.local_addr()?;
        let advertise = match &config.advertise_grpc {
            Some(a) => a.clone(),
            None if config.grpc_addr.port() == 0 => grpc_addr.to_string(),
            None => config.advertised_grpc()?,
        };
        let engine = Options {
            delete_deadline: config.delete_deadline,
            write_budget: config
                .scaling
                .memtable_budget
                .map(|b| ebb_storage::WriteBudget::new(usize::try_from(b).unwrap_or(usize::MAX))),
            ..Options::default()
        };
        let groups =
            ebb_raft::GroupOptions::new(config.raft_heartbeat, config.raft_snapshot_every, engine)
                .map_err(|e| NodeError::Cluster(e.to_string()))?;
        let cc = ClusterConfig {
            data_dir: dir,
            advertise_grpc: advertise.clone(),
            http_addr: reachable(http_addr, &advertise),
            pg_addr: reachable(pg_addr, &advertise),
            join: config.join.clone(),
            init_here: config.is_init_node(),
            force_init: config.init_cluster,
            default_retention: config.default_retention,
            write_limits: config.write_limits,
            disk_reserve: config.disk_reserve,
            settings: Settings { shards: config.shards, replication: config.replication },
            groups,
            tls: tls.cluster_client.clone(),
            server_tls: tls.cluster.clone(),
            max_connections: config.max_connections,
            intent_patience: crate::cluster::router::DEFAULT_INTENT_PATIENCE,
            scaling: config.scaling,
            versions: pinned_versions()?,
            join_token_file: config.join_token_file.clone(),
        };
        let node =
            ClusterNode::start(&cc, grpc, Arc::new(ebb_raft::transport::Faults::new())).await?;
        let backups = Arc::new(crate::backup::BackupService::new(
            Arc::new(crate::cluster::backup::ClusterParts::new(&node.router)),
            Arc::new(crate::cluster::backup_registry::MetaRegistry::new(&node.router)),
            &config.data_dir,
            config.scaling.backup_rate,
        ));
        node.router.set_backups(backups.clone());
        let target = Target { shards: node.router.clone(), access: node.meta.clone() };
        let door = match FrontDoor::with_limits(target, config.limits) {
            Ok(d) => d,
            Err(e) => {
                node.stop().await;
                return Err(NodeError::Config(format!("query runtime: {e}")));
            }
        };
        if let Err(e) = crate::security::bootstrap(&door, config).await {
            node.stop().await;
            return Err(e);
        }
        let (stop, rx) = watch::channel(false);
        let metrics = Arc::new(Metrics::default());
        let mut tasks = match serve_clients(
            clients,
            &door,
            Serving::Cluster(node.router.clone()),
            backups,
            node.router.health().clone(),
            &metrics,
            config,
            &tls,
            &rx,
        ) {
            Ok(t) => t,
            Err(e) => {
                node.stop().await;
                return Err(e);
            }
        };
        let (conns, files) = (node.conns.clone(), config.cluster_tls.clone());
        let renew = move || {
            // Outgoing connections present the renewed certificate from now on.
            if let Some(f) = &files {
                match crate::tls::cluster::client_config(f) {
                    Ok(c) => conns.set_tls(Some(c)),
                    Err(e) => tracing::error!(error = %e, "reloading the cluster certificate"),
                }
            }
        };
        tasks.push(tokio::spawn(crate::tls::watch(tls.sources(), renew, stopped(rx.clone()))));
        let shards = node.shards.clone();
        let led = move || {
            shards.all().into_iter().filter(|s| s.is_leader()).map(|s| s.db).collect::<Vec<_>>()
        };
        tasks.push(tokio::spawn(purge_loop(
            led,
            metrics,
            config.retention_check_interval,
            stopped(rx),
        )));
        tracing::info!(node = node.id, %http_addr, %pg_addr, %grpc_addr, %flight_addr, data_dir = %config.data_dir.display(), "EbbDB cluster node serving");
        Ok(Server {
            http_addr,
            pg_addr,
            grpc_addr,
            flight_addr,
            db: None,
            cluster: Some(node),
            stop,
            tasks,
        })
    }

    /// The database, on a single node.
    pub fn database(&self) -> Option<&Arc<Database>> {
        self.db.as_ref()
    }

    /// The cluster node, in cluster mode.
    pub fn cluster(&self) -> Option<&crate::cluster::ClusterNode> {
        self.cluster.as_ref()
    }

    /// Stops accepting, waits for the front ends to finish, and flushes.
    pub async fn shutdown(self) -> Result<()> {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
        if let Some(node) = self.cluster {
            node.stop().await;
            tracing::info!("EbbDB cluster node stopped");
            return Ok(());
        }
        if let Some(db) = self.db {
            tokio::task::spawn_blocking(move || db.flush()).await?.map_err(NodeError::Flush)?;
        }
        tracing::info!("EbbDB stopped; memtables flushed");
        Ok(())
    }
}

/// The TLS configuration of the ports, loaded from the configured files.
struct Tls {
    /// HTTPS.
    http: Option<Arc<TlsSource>>,
    /// PostgreSQL.
    pg: Option<Arc<TlsSource>>,
    /// Arrow Flight SQL.
    flight: Option<Arc<TlsSource>>,
    /// The cluster port (mutual TLS).
    cluster: Option<Arc<TlsSource>>,
    /// How this node connects to the others' cluster port.
    cluster_client: Option<tonic::transport::ClientTlsConfig>,
}

impl Tls {
    fn load(config: &Config) -> Result<Tls> {
        let tls = |e: crate::tls::TlsError| NodeError::Config(format!("TLS: {e}"));
        let (mut http, mut pg, mut flight) = (None, None, None);
        let (mut cluster, mut cluster_client) = (None, None);
        if let Some(files) = &config.tls {
            http = Some(TlsSource::clients("HTTP", files, &[b"http/1.1"]).map_err(tls)?);
            pg = Some(TlsSource::clients("PostgreSQL", files, &[b"postgresql"]).map_err(tls)?);
            flight = Some(TlsSource::clients("Flight SQL", files, &[b"h2"]).map_err(tls)?);
        }
        if let Some(files) = &config.cluster_tls {
            cluster = Some(TlsSource::cluster(files).map_err(tls)?);
            cluster_client = Some(crate::tls::cluster::client_config(files).map_err(tls)?);
        }
        Ok(Tls { http, pg, flight, cluster, cluster_client })
    }

    fn sources(&self) -> Vec<Arc<TlsSource>> {
        [&self.http, &self.pg, &self.flight, &self.cluster].into_iter().flatten().cloned().collect()
    }
}

/// Serves HTTP and the PostgreSQL wire protocol through `door` until `rx` turns true, and
/// warns while the server runs insecure.
/// The listeners clients connect to.
struct Listeners {
    http: TcpListener,
    pg: TcpListener,
    flight: TcpListener,
}

impl Listeners {
    async fn bind(config: &Config) -> Result<Listeners> {
        Ok(Listeners {
            http: bind("HTTP", config.http_addr).await?,
            pg: bind("PostgreSQL", config.pg_addr).await?,
            flight: bind("Flight SQL", config.flight_addr).await?,
        })
    }

    /// The HTTP, PostgreSQL and Flight SQL addresses bound.
    fn addrs(&self) -> Result<(SocketAddr, SocketAddr, SocketAddr)> {
        Ok((self.http.local_addr()?, self.pg.local_addr()?, self.flight.local_addr()?))
    }
}

#[allow(clippy::too_many_arguments)]
fn serve_clients(
    clients: Listeners,
    door: &Arc<FrontDoor>,
    serving: Serving,
    backups: Arc<crate::backup::BackupService>,
    health: Arc<crate::health::Health>,
    metrics: &Arc<Metrics>,
    config: &Config,
    tls: &Tls,
    rx: &watch::Receiver<bool>,
) -> Result<Vec<JoinHandle<()>>> {
    let app = router(AppState {
        door: door.clone(),
        serving,
        metrics: metrics.clone(),
        max_body_bytes: config.max_body_bytes,
        health,
        backups,
    });
    let Listeners { http, pg, flight } = clients;
    let mut tasks = Vec::new();
    let http = crate::tls::conn::incoming(http, tls.http.clone(), config.max_connections)?;
    tasks.push(tokio::spawn(crate::http::serve::serve(http, app, stopped(rx.clone()))));
    let shutdown = stopped(rx.clone());
    let pg_tls = tls.pg.clone();
    let (pg_metrics, pg_door, limit) = (metrics.clone(), door.clone(), config.max_connections);
    let pg_limits = crate::pg::ConnLimits { connections: limit, message: config.max_body_bytes };
    tasks.push(tokio::spawn(async move {
        if let Err(e) = crate::pg::serve(pg, pg_door, pg_metrics, pg_tls, pg_limits, shutdown).await
        {
            tracing::error!(error = %e, "PostgreSQL server failed");
        }
    }));
    let flight = crate::tls::conn::incoming(flight, tls.flight.clone(), config.max_connections)?;
    let (flight_door, shutdown) = (door.clone(), stopped(rx.clone()));
    tasks.push(tokio::spawn(async move {
        if let Err(e) = crate::flight::serve(flight, flight_door, shutdown).await {
            tracing::error!(error = %e, "Flight SQL server failed");
        }
    }));
    tasks.push(tokio::spawn(until_stopped(
        crate::security::warn_while_insecure(door.clone(), config.clone()),
        rx.clone(),
    )));
    Ok(tasks)
}

/// How often rollups are brought up to date with their sources.
const ROLLUP_INTERVAL: Duration = Duration::from_secs(1);

/// Until stopped, on each database `dbs` lists at the time (the single database, or the shards
/// this node leads): writes retention purges every `every`, and recomputes dirty rollup
/// buckets every [`ROLLUP_INTERVAL`].
async fn purge_loop(
    dbs: impl Fn() -> Vec<Arc<Database>>,
    metrics: Arc<Metrics>,
    every: Duration,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    let mut purge = tokio::time::interval(every);
    purge.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut rollups = tokio::time::interval(ROLLUP_INTERVAL);
    rollups.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let purging = tokio::select! {
            _ = &mut stop => return,
            _ = purge.tick() => true,
            _ = rollups.tick() => false,
        };
        for db in dbs() {
            let m = metrics.clone();
            let done = tokio::task::spawn_blocking(move || match purging {
                true => db.purge_expired().map(|n| m.retention_purges.add(n)),
                false => db.maintain_rollups().map(|r| m.rollup_buckets.add(r.buckets)),
            });
            let what = if purging { "retention purge" } else { "rollup maintenance" };
            match done.await {
                Ok(Ok(())) => {}
                // A shard whose leadership moved meanwhile: the new leader carries on.
                Ok(Err(ebb_query::QueryError::NotLeader(_))) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "{what} failed"),
                Err(e) => tracing::warn!(error = %e, "{what} task failed"),
            }
        }
    }
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn termination() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

/// Creates the data directory `dir` if needed and makes it its owner's alone (mode 0700, also
/// for one an older version made readable by all): no other local user can read its files.
fn private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    ebb_storage::durable::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}
