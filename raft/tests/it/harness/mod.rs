//! A cluster of nodes in one process, each with its own gRPC server on a loopback port and its
//! own data directory, all sending through one set of fault rules. Nodes can be killed (as by
//! a crash: nothing flushed) and restarted from disk on the same port.

#![allow(dead_code, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ebb_raft::transport::{Connections, Faults, GroupHandle, Groups, RaftService};
use ebb_raft::{start_group, Command, GroupOptions, NodeId, Response};
use ebb_storage::{Engine, WriteBatch};
use openraft::error::{ClientWriteError, RaftError};
use openraft::BasicNode;

/// The group every test here replicates.
pub const GROUP: u64 = 7;

/// One running node.
pub struct Node {
    pub id: NodeId,
    pub addr: String,
    pub group: GroupHandle,
    groups: Arc<Groups>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: tokio::task::JoinHandle<()>,
}

/// A test cluster.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub faults: Arc<Faults>,
    pub opts: GroupOptions,
    pub nodes: BTreeMap<NodeId, Node>,
    /// Addresses of every node ever started (kept across kills, for restarts).
    pub addrs: BTreeMap<NodeId, String>,
    /// Records fsyncs for [`Cluster::power_cut`] (only if asked for: it rereads every synced
    /// file).
    power: Option<ebb_storage::durable::PowerCut>,
}

pub fn engine_opts() -> ebb_storage::Options {
    ebb_storage::Options {
        write_buffer_size: 256 << 10,
        memtable_max_age: None,
        ..Default::default()
    }
}

impl Cluster {
    /// A cluster with no nodes yet; groups snapshot every `snapshot_every` entries.
    pub fn new(snapshot_every: u64) -> Cluster {
        let opts =
            GroupOptions::new(Duration::from_millis(50), snapshot_every, engine_opts()).unwrap();
        Cluster {
            dir: tempfile::tempdir().unwrap(),
            faults: Arc::new(Faults::new()),
            opts,
            nodes: BTreeMap::new(),
            addrs: BTreeMap::new(),
            power: None,
        }
    }

    /// Starts recording fsyncs so that [`Cluster::power_cut`] can cut the power.
    pub fn watch_power(&mut self) {
        self.power = Some(ebb_storage::durable::PowerCut::watch(self.dir.path()).unwrap());
    }

    /// Cuts the power of every node (all must be killed first): each loses what it had not
    /// fsynced.
    pub fn power_cut(&self, loss: ebb_storage::durable::Loss) {
        assert!(self.nodes.is_empty(), "kill every node first");
        self.power.as_ref().expect("watch_power first").cut(loss).unwrap();
    }

    fn node_dir(&self, id: NodeId) -> PathBuf {
        self.dir.path().join(format!("node-{id}"))
    }

    /// Starts (or restarts, from its data directory and on its old port) node `id`.
    pub async fn start(&mut self, id: NodeId) {
        let listener = match self.addrs.get(&id) {
            Some(a) => bind_retry(a).await,
            None => tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        };
        let addr = listener.local_addr().unwrap().to_string();
        self.addrs.insert(id, addr.clone());
        let groups = Groups::new();
        let conns = Connections::new(id, self.faults.clone());
        let group = start_group(
            id,
            GROUP,
            &self.node_dir(id).join(format!("group-{GROUP}")),
            &self.opts,
            conns,
            &groups,
        )
        .await
        .unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let svc = RaftService::new(id, groups.clone());
        let server = tokio::spawn(async move {
            let _ = svc.serve(listener, async { drop(stopped.await) }).await;
        });
        self.nodes.insert(id, Node { id, addr, group, groups, stop: Some(stop), server });
    }

    /// Starts group `group` on running node `id` from its directory among the node's shard
    /// directories (where a split forks its child).
    pub async fn start_child(&self, id: NodeId, group: u64) -> GroupHandle {
        let n = &self.nodes[&id];
        let dir = self.node_dir(id).join(ebb_raft::sm::group_dir_name(group));
        // A replica of the group closed a moment ago may still be shutting down (its background
        // work lets go of the engine last; on a loaded machine that takes seconds).
        for _ in 0..600 {
            let conns = Connections::new(id, self.faults.clone());
            match start_group(id, group, &dir, &self.opts, conns, &n.groups).await {
                Ok(g) => return g,
                Err(e) if e.to_string().contains("locked") => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                Err(e) => panic!("starting group {group} on node {id}: {e}"),
            }
        }
        panic!("group {group} on node {id} stayed locked")
    }

    /// Stops node `id` abruptly: its server, its Raft, its engine (nothing flushed).
    pub async fn kill(&mut self, id: NodeId) {
        let mut n = self.nodes.remove(&id).unwrap();
        let _ = n.id;
        let _ = n.group.raft.shutdown().await;
        if let Some(s) = n.stop.take() {
            let _ = s.send(());
        }
        let Node { server, groups, group, .. } = n;
        server.abort();
        let _ = server.await;
        for g in groups.ids() {
            if let Some(h) = groups.remove(g) {
                let _ = h.raft.shutdown().await;
            }
        }
        drop(group);
        // The replaced-engine retirement thread may briefly hold an engine; give it a moment.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    pub fn member(&self, id: NodeId) -> BasicNode {
        BasicNode::new(self.addrs[&id].clone())
    }

    /// Initializes the group on the first node with `ids` as voters.
    pub async fn initialize(&self, ids: &[NodeId]) {
        let members: BTreeMap<NodeId, BasicNode> =
            ids.iter().map(|&i| (i, self.member(i))).collect();
        let first = &self.nodes[&ids[0]];
        first.group.raft.initialize(members).await.unwrap();
        self.wait_leader(Duration::from_secs(10)).await;
    }

    /// The leader, once a running node leads and every reachable voter of its membership
    /// agrees.
    pub async fn wait_leader(&self, timeout: Duration) -> NodeId {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(m) = self.leading() {
                let agree = m.membership_config.membership().voter_ids().all(|v| {
                    match self.nodes.get(&v) {
                        Some(n) if !self.isolated(v) => {
                            n.group.raft.metrics().borrow().current_leader == Some(m.id)
                        }
                        _ => true,
                    }
                });
                if agree {
                    return m.id;
                }
            }
            assert!(Instant::now() < deadline, "no leader agreed on");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The metrics of the reachable node that leads in the highest term, if any.
    fn leading(&self) -> Option<openraft::RaftMetrics<NodeId, openraft::BasicNode>> {
        self.nodes
            .values()
            .filter(|n| !self.isolated(n.id))
            .map(|n| n.group.raft.metrics().borrow().clone())
            .filter(|m| m.state.is_leader())
            .max_by_key(|m| m.current_term)
    }

    /// True if `id` is cut off from most other running nodes.
    fn isolated(&self, id: NodeId) -> bool {
        let others = self.nodes.keys().filter(|&&o| o != id).count();
        let cut = self.nodes.keys().filter(|&&o| o != id && self.faults.blocked(id, o)).count();
        others > 0 && cut * 2 > others
    }

    /// Proposes `batch` through whichever node leads, retrying through elections until
    /// `timeout`. `Ok` means committed and applied on the leader (acknowledged).
    pub async fn write(&self, batch: &WriteBatch, timeout: Duration) -> Result<Response, String> {
        let deadline = Instant::now() + timeout;
        let cmd = Command::Batch(batch.to_bytes());
        let mut last_err = String::new();
        while Instant::now() < deadline {
            let Some(l) = self.leading().map(|m| m.id) else {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            };
            let raft = self.nodes[&l].group.raft.clone();
            let left =
                deadline.saturating_duration_since(Instant::now()).min(Duration::from_secs(3));
            match tokio::time::timeout(left, raft.client_write(cmd.clone())).await {
                Ok(Ok(r)) => return Ok(r.data),
                Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_)))) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Ok(Err(e)) => {
                    last_err = e.to_string();
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(_) => last_err = "timed out".into(),
            }
        }
        Err(format!("write not acknowledged: {last_err}"))
    }

    /// Waits until every running node has applied the leader's last log index.
    pub async fn wait_converged(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let leader = self.wait_leader(timeout).await;
            let last = self.nodes[&leader].group.raft.metrics().borrow().last_log_index;
            let behind: Vec<(NodeId, Option<u64>)> = self
                .nodes
                .values()
                .map(|n| (n.id, n.group.raft.metrics().borrow().last_applied.map(|l| l.index)))
                .filter(|(_, a)| *a < last)
                .collect();
            if behind.is_empty() {
                return;
            }
            assert!(Instant::now() < deadline, "nodes behind index {last:?}: {behind:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Every node's engine contents (replication keys included), which must be identical.
    pub fn assert_replicas_identical(&self) -> Rows {
        let mut first: Option<(NodeId, Rows)> = None;
        for n in self.nodes.values() {
            let rows = contents(&n.group.replica.engine());
            match &first {
                None => first = Some((n.id, rows)),
                Some((id, want)) => {
                    assert_eq!(rows.len(), want.len(), "node {} vs node {id}: row count", n.id);
                    assert!(rows == *want, "node {} differs from node {id}", n.id);
                }
            }
        }
        first.map(|(_, r)| r).unwrap_or_default()
    }

    pub async fn shutdown(mut self) {
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for id in ids {
            self.kill(id).await;
        }
    }
}

async fn bind_retry(addr: &str) -> tokio::net::TcpListener {
    for _ in 0..100 {
        if let Ok(l) = tokio::net::TcpListener::bind(addr).await {
            return l;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("cannot bind {addr} again");
}

/// Keys and values.
pub type Rows = Vec<(Vec<u8>, Vec<u8>)>;

pub fn contents(e: &Engine) -> Rows {
    e.scan::<&[u8]>(.., None)
        .unwrap()
        .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())).unwrap())
        .collect()
}

/// The key of row `i` of writer `w`.
pub fn key(w: u32, i: u64) -> Vec<u8> {
    let mut k = 9u32.to_be_bytes().to_vec();
    k.extend_from_slice(&(w as u64).to_be_bytes());
    k.extend_from_slice(&i.to_be_bytes());
    k
}

/// What the cluster was told and acknowledged: rows that must be present and rows that must be
/// gone.
#[derive(Debug, Default)]
pub struct Oracle {
    pub present: BTreeMap<Vec<u8>, Vec<u8>>,
    pub deleted: BTreeSet<Vec<u8>>,
}

impl Oracle {
    /// Checks that every acknowledged row is there and no deleted row is visible in `rows`.
    pub fn check(&self, rows: &[(Vec<u8>, Vec<u8>)]) {
        let got: BTreeMap<&[u8], &[u8]> =
            rows.iter().map(|(k, v)| (k.as_slice(), v.as_slice())).collect();
        let lost: Vec<_> = self
            .present
            .iter()
            .filter(|(k, v)| got.get(k.as_slice()) != Some(&v.as_slice()))
            .collect();
        assert!(
            lost.is_empty(),
            "{} acknowledged writes lost, e.g. {:?}",
            lost.len(),
            lost.first()
        );
        let visible: Vec<_> =
            self.deleted.iter().filter(|k| got.contains_key(k.as_slice())).collect();
        assert!(visible.is_empty(), "{} deleted rows visible", visible.len());
    }
}
