//! A shard's replicated database on three nodes in one process (loopback gRPC): line-protocol
//! writes and SQL deletes on the leader reach every replica's catalog and rows; a follower
//! that missed the log catches up from a snapshot and answers SQL like the leader.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::util::pretty::pretty_format_batches;
use ebb_node::cluster::Shard;
use ebb_query::lp::Precision;
use ebb_query::SqlSession;
use ebb_raft::transport::{Connections, Faults, Groups, RaftService};
use ebb_raft::GroupOptions;
use openraft::BasicNode;

const SHARD: u64 = 1;

struct Node {
    shard: Shard,
    groups: Arc<Groups>,
    stop: tokio::sync::oneshot::Sender<()>,
}

struct Cluster {
    dir: tempfile::TempDir,
    opts: GroupOptions,
    faults: Arc<Faults>,
    addrs: BTreeMap<u64, String>,
    nodes: BTreeMap<u64, Node>,
}

impl Cluster {
    fn new(snapshot_every: u64) -> Cluster {
        let engine = ebb_storage::Options { write_buffer_size: 256 << 10, ..Default::default() };
        let mut opts =
            GroupOptions::new(Duration::from_millis(50), snapshot_every, engine).unwrap();
        // Purge the log right after each snapshot, so a node that was away needs the snapshot.
        let mut raft = (*opts.raft).clone();
        raft.max_in_snapshot_log_to_keep = 0;
        opts.raft = Arc::new(raft);
        Cluster {
            dir: tempfile::tempdir().unwrap(),
            opts,
            faults: Arc::new(Faults::new()),
            addrs: BTreeMap::new(),
            nodes: BTreeMap::new(),
        }
    }

    /// Three nodes, started and initialized as one group.
    async fn three(snapshot_every: u64) -> Cluster {
        let mut c = Cluster::new(snapshot_every);
        for id in 1..=3 {
            c.start(id).await;
        }
        let members: BTreeMap<u64, BasicNode> =
            c.addrs.iter().map(|(id, a)| (*id, BasicNode::new(a.clone()))).collect();
        c.nodes[&1].shard.group.raft.initialize(members).await.unwrap();
        c
    }

    async fn start(&mut self, id: u64) {
        let listener = match self.addrs.get(&id) {
            Some(a) => {
                let mut tries = 0;
                loop {
                    match tokio::net::TcpListener::bind(a).await {
                        Ok(l) => break l,
                        Err(e) if tries < 100 => {
                            tries += 1;
                            let _ = e;
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            }
            None => tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        };
        self.addrs.insert(id, listener.local_addr().unwrap().to_string());
        let groups = Groups::new();
        let conns = Connections::new(id, self.faults.clone());
        let dir = self.dir.path().join(format!("node-{id}/shard-{SHARD}"));
        let shard = Shard::open(id, SHARD, &dir, &self.opts, conns, &groups).await.unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let svc = RaftService::new(id, groups.clone());
        tokio::spawn(async move {
            let _ = svc.serve(listener, async { drop(stopped.await) }).await;
        });
        self.nodes.insert(id, Node { shard, groups, stop });
    }

    async fn kill(&mut self, id: u64) {
        let n = self.nodes.remove(&id).unwrap();
        let _ = n.shard.group.raft.shutdown().await;
        let _ = n.stop.send(());
        n.groups.remove(SHARD);
        drop(n.shard);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    /// The leader of the highest term (a restarted old leader may briefly believe it still
    /// leads an older one).
    async fn leader(&self) -> Shard {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let best = self
                .nodes
                .values()
                .filter(|n| n.shard.is_leader())
                .max_by_key(|n| n.shard.group.raft.metrics().borrow().current_term);
            if let Some(n) = best {
                return n.shard.clone();
            }
            assert!(Instant::now() < deadline, "no leader");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until every node follows one leader and has applied its whole log.
    async fn converge(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let l = self.leader().await;
            let (id, last) = {
                let m = l.group.raft.metrics().borrow().clone();
                (m.id, m.last_log_index)
            };
            let done = self.nodes.values().all(|n| {
                let m = n.shard.group.raft.metrics().borrow().clone();
                m.current_leader == Some(id) && m.last_applied.map(|x| x.index) >= last
            });
            if done {
                return;
            }
            assert!(Instant::now() < deadline, "replicas did not converge");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The same query on every replica: all answers equal; returns the answer.
    async fn same_everywhere(&self, sql: &str) -> String {
        let mut answers = BTreeMap::new();
        for (id, n) in &self.nodes {
            let s = SqlSession::new(n.shard.db.clone(), "telemetry");
            let out = pretty_format_batches(&s.query(sql).await.unwrap()).unwrap().to_string();
            answers.insert(*id, out);
        }
        let first = answers.values().next().unwrap().clone();
        for (id, a) in &answers {
            if a != &first {
                let state: Vec<String> = self
                    .nodes
                    .iter()
                    .map(|(id, n)| {
                        let m = n.shard.group.raft.metrics().borrow().clone();
                        let rows = n.shard.db.engine().scan::<&[u8]>(.., None).unwrap().count();
                        format!(
                            "node {id}: {:?} applied {:?} snapshot {:?} keys {rows}",
                            m.state, m.last_applied, m.snapshot
                        )
                    })
                    .collect();
                panic!("node {id} answers {a} to {sql}, not {first}; {state:#?}");
            }
        }
        first
    }
}

async fn write(shard: &Shard, body: String) {
    let db = shard.db.clone();
    tokio::task::spawn_blocking(move || {
        db.write_lines("telemetry", &body, Precision::Seconds, 0).unwrap();
    })
    .await
    .unwrap();
}

fn lines(hosts: u32, from: u32, to: u32) -> String {
    let mut s = String::new();
    for t in from..to {
        for h in 0..hosts {
            s.push_str(&format!("cpu,host=h{h} usage={}.5,idle={}i {}\n", t % 100, t, 1_000 + t));
        }
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_answer_sql_alike_after_writes_deletes_failover_and_snapshots() {
    let mut c = Cluster::three(40).await;

    // Shard handles are taken for one step at a time: a node's engine closes (and can be
    // reopened) only once nobody holds it.
    write(&c.leader().await, lines(5, 0, 100)).await;
    c.converge().await;
    let counts =
        c.same_everywhere("SELECT host, count(*) AS n FROM cpu GROUP BY host ORDER BY host").await;
    assert!(counts.contains("| h4   | 100 |"), "{counts}");

    // A SQL delete on the leader: gone on every replica, with the same ledger entry.
    SqlSession::new(c.leader().await.db.clone(), "telemetry")
        .query("DELETE FROM cpu WHERE host = 'h1' AND time < '1970-01-01T00:17:30Z'")
        .await
        .unwrap();
    c.converge().await;
    let h1 = c.same_everywhere("SELECT count(*) AS n FROM cpu WHERE host = 'h1'").await;
    assert!(h1.contains("| 50 |"), "{h1}");
    let ledgers: Vec<Vec<(u64, u64)>> = c
        .nodes
        .values()
        .map(|n| n.shard.db.engine().deletions().iter().map(|d| (d.id, d.issued_at_ms)).collect())
        .collect();
    assert_eq!(ledgers[0].len(), 1);
    assert!(ledgers.iter().all(|l| *l == ledgers[0]), "ledgers differ: {ledgers:?}");

    // A follower misses many writes (the leader snapshots and purges its log), then returns
    // and catches up from a snapshot: its catalog is reloaded with the engine.
    let lagging = *c.nodes.keys().find(|&&id| !c.nodes[&id].shard.is_leader()).unwrap();
    let had = c.nodes[&lagging].shard.group.raft.metrics().borrow().last_log_index.unwrap_or(0);
    c.kill(lagging).await;
    {
        let leader = c.leader().await;
        for chunk in 0..60 {
            write(&leader, lines(5, 100 + chunk * 10, 110 + chunk * 10)).await;
        }
        // New table and new field, created while the follower is away.
        let mem = "mem,host=h0 used=1i 2000\nmem,host=h9 used=2i,free=3i 2001\n";
        write(&leader, mem.into()).await;
        // Snapshots are built and the log purged in the background: the follower can only
        // catch up from a snapshot once the leader's log no longer holds what follows its own.
        leader
            .group
            .raft
            .wait(Some(Duration::from_secs(120)))
            .metrics(|m| m.purged.is_some_and(|p| p.index > had), "log purged past the follower")
            .await
            .unwrap();
    }
    c.start(lagging).await;
    c.converge().await;
    let snap = c.nodes[&lagging].shard.group.raft.metrics().borrow().snapshot;
    assert!(snap.is_some(), "the returning follower should have installed a snapshot");
    let counts =
        c.same_everywhere("SELECT host, count(*) AS n FROM cpu GROUP BY host ORDER BY host").await;
    assert!(counts.contains("| h0   | 700 |") && counts.contains("| h1   | 650 |"), "{counts}");
    let mem = c.same_everywhere("SELECT host, used, free FROM mem ORDER BY host").await;
    assert!(mem.contains("| h9   | 2    | 3    |"), "{mem}");

    // Kill the leader; a new one accepts writes and everyone agrees.
    let old = c.leader().await.group.raft.metrics().borrow().id;
    c.kill(old).await;
    write(&c.leader().await, lines(2, 5000, 5010)).await;
    c.start(old).await;
    c.converge().await;
    let n = c.same_everywhere("SELECT count(*) AS n FROM cpu").await;
    assert!(n.contains("| 3470 |"), "{n}");
    for id in [1, 2, 3] {
        c.kill(id).await;
    }
}

/// Writers on the leader overlap: many proposals are in flight at once, and each writes one
/// field of the same points (stored ones and new ones), so every point's row must merge the
/// fields of all of them, on every replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writes_of_the_same_points_merge_on_every_replica() {
    const WRITERS: usize = 6;
    const HOSTS: u32 = 4;
    let mut c = Cluster::three(10_000).await;
    // The series and every field exist first, so the racing writes change no catalog record.
    let fields: Vec<String> = (0..WRITERS).map(|k| format!("f{k}=0i")).collect();
    let mut first = String::new();
    for h in 0..HOSTS {
        for t in 0..40 {
            first.push_str(&format!("cpu,host=h{h} {} {}\n", fields.join(","), 1_000 + t));
        }
    }
    write(&c.leader().await, first).await;

    let leader = c.leader().await;
    let mut tasks = Vec::new();
    for k in 0..WRITERS {
        let db = leader.db.clone();
        tasks.push(tokio::task::spawn_blocking(move || {
            // Points 0..40 are stored; 40..60 are new, written by whichever writer comes first.
            for chunk in 0..12 {
                let mut body = String::new();
                for t in chunk * 5..chunk * 5 + 5 {
                    for h in 0..HOSTS {
                        body.push_str(&format!("cpu,host=h{h} f{k}={}i {}\n", k + 1, 1_000 + t));
                    }
                }
                db.write_lines("telemetry", &body, Precision::Seconds, 0).unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    drop(leader);
    c.converge().await;
    let all: Vec<String> = (0..WRITERS).map(|k| format!("f{k} = {}", k + 1)).collect();
    let sql = format!(
        "SELECT count(*) AS n, count(*) FILTER (WHERE {}) AS merged FROM cpu",
        all.join(" AND ")
    );
    let counts = c.same_everywhere(&sql).await;
    let want = HOSTS * 60;
    assert!(counts.contains(&format!("| {want} | {want}    |")), "{counts}");
    for id in [1, 2, 3] {
        c.kill(id).await;
    }
}
