//! A cluster in one process: nodes on loopback gRPC, each with its own data directory, all
//! sending through one set of fault rules; nodes can be stopped and started again.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ebb_node::cluster::version::VersionRange;
use ebb_node::cluster::view::Settings;
use ebb_node::cluster::{ClusterConfig, ClusterNode};
use ebb_raft::transport::Faults;
use ebb_raft::GroupOptions;

use crate::watchdog::Watchdog;

pub(crate) struct Harness {
    pub dir: tempfile::TempDir,
    pub faults: Arc<Faults>,
    /// Running nodes by their index in the test (not their id).
    pub nodes: BTreeMap<usize, ClusterNode>,
    pub addrs: BTreeMap<usize, String>,
    /// Settings of the cluster the first node creates.
    pub settings: Settings,
    /// How long statements run on every shard wait for all of them.
    pub intent_patience: Duration,
    /// Log entries between a shard's snapshots.
    pub snapshot_every: u64,
    /// The engines' clock, if not the system's.
    pub clock: Option<ebb_storage::ManualClock>,
    /// When shards split by themselves.
    pub scaling: ebb_node::config::scaling::Scaling,
    /// Fails the run if the test hangs; nodes started and stopped are its steps.
    pub watchdog: Watchdog,
    /// Nodes pinned to older cluster versions than their binary's (to run as an older
    /// release), by index.
    pub pins: BTreeMap<usize, VersionRange>,
    /// The join token file each node is given, by index (`None`: none); a node not named gets
    /// the one every test cluster shares.
    pub join_tokens: BTreeMap<usize, Option<std::path::PathBuf>>,
}

/// The longest a cluster test may run (the slowest takes a few minutes on a loaded machine).
const TEST_LIMIT: Duration = Duration::from_secs(900);

impl Harness {
    pub fn new() -> Harness {
        crate::common::logs();
        Harness {
            dir: tempfile::tempdir().unwrap(),
            faults: Arc::new(Faults::new()),
            nodes: BTreeMap::new(),
            addrs: BTreeMap::new(),
            settings: Settings { shards: 4, replication: 3 },
            intent_patience: Duration::from_secs(30),
            snapshot_every: 1000,
            clock: None,
            scaling: Default::default(),
            watchdog: Watchdog::arm(TEST_LIMIT),
            pins: BTreeMap::new(),
            join_tokens: BTreeMap::new(),
        }
    }

    /// Starts node `i`, joining through the nodes `join`. A node restarted while a client
    /// still holds a handle to its previous instance (an operation in flight) waits for that
    /// instance to let go of its data directory.
    pub async fn start(&mut self, i: usize, join: &[usize]) {
        if let Err(e) = self.try_start(i, join).await {
            panic!("starting node {i}: {e}");
        }
    }

    /// [`Harness::start`], returning why the node did not start.
    pub async fn try_start(&mut self, i: usize, join: &[usize]) -> Result<(), String> {
        self.watchdog.step(format!("starting node {i}"));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (cfg, listener) = self.prepare(i, join, false).await;
            match ClusterNode::start(&cfg, listener, self.faults.clone()).await {
                Ok(node) => {
                    self.nodes.insert(i, node);
                    return Ok(());
                }
                Err(e) if e.to_string().contains("locked") && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    /// The configuration and listener node `i` starts with (`init_here`: it is the initial
    /// node, which creates the cluster if no seed answers).
    pub async fn prepare(
        &mut self,
        i: usize,
        join: &[usize],
        init_here: bool,
    ) -> (ClusterConfig, tokio::net::TcpListener) {
        let listener = match self.addrs.get(&i) {
            Some(a) => loop {
                if let Ok(l) = tokio::net::TcpListener::bind(a).await {
                    break l;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            },
            None => tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        };
        let addr = listener.local_addr().unwrap().to_string();
        self.addrs.insert(i, addr.clone());
        let mut engine =
            ebb_storage::Options { write_buffer_size: 256 << 10, ..Default::default() };
        if let Some(c) = &self.clock {
            engine.clock = ebb_storage::Clock::manual(c);
        }
        let cfg = ClusterConfig {
            data_dir: self.dir.path().join(format!("n{i}")),
            advertise_grpc: addr,
            http_addr: format!("127.0.0.1:{}", 8000 + i),
            pg_addr: format!("127.0.0.1:{}", 9000 + i),
            join: join.iter().map(|j| self.addrs[j].clone()).collect(),
            init_here,
            force_init: false,
            default_retention: None,
            write_limits: ebb_query::WriteLimits::default(),
            disk_reserve: ebb_node::config::durability::DiskReserve::Bytes(0),
            settings: self.settings,
            groups: GroupOptions::new(Duration::from_millis(50), self.snapshot_every, engine)
                .unwrap(),
            tls: None,
            server_tls: None,
            max_connections: 256,
            intent_patience: self.intent_patience,
            scaling: self.scaling,
            versions: self.pins.get(&i).copied().unwrap_or(VersionRange::BUILD),
            join_token_file: match self.join_tokens.get(&i) {
                Some(given) => given.clone(),
                None => Some(crate::common::join_token_file()),
            },
        };
        (cfg, listener)
    }

    pub async fn stop(&mut self, i: usize) {
        self.watchdog.step(format!("stopping node {i}"));
        self.nodes.remove(&i).unwrap().stop().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    /// Waits until `check` holds on every running node's view of the metadata group.
    pub async fn wait(&self, what: &str, check: impl Fn(&ClusterNode) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.nodes.values().all(&check) {
            assert!(Instant::now() < deadline, "timed out waiting until {what}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
