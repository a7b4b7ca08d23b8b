//! A randomized fault campaign on a cluster in one process. Clients write, delete and read a
//! small set of keys through random nodes while a nemesis isolates nodes (also while a fourth
//! node joins and shards move to it), drops and delays messages, restarts nodes and jumps the
//! engines' clock forward. Afterwards every replica flushes and compacts, snapshots are taken,
//! and every node restarts in turn (leader changes; a node that was behind installs a
//! snapshot); then every key is read again. Each key's history of acknowledged operations
//! (operations whose outcome is unknown may or may not have happened) must be linearizable
//! ([`crate::linearizable`]); in particular no deleted value is ever read again.
//!
//! The campaign is bounded by its number of faults (12; `EBB_NEMESIS_FAULTS`), with time only
//! as an upper limit (`EBB_NEMESIS_SECS`, 300 s); it prints its seed, and `EBB_NEMESIS_SEED`
//! replays the random choices. At the end every replica of a shard must hold the same series
//! under the same ids.

#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{Array, Int64Array};
use ebb_node::cluster::view::Settings;
use ebb_query::lp::Precision;
use ebb_query::QueryError;
use ebb_query::SqlSession;
use parking_lot::Mutex;
use tokio::sync::Mutex as AsyncMutex;

use crate::cluster_harness::Harness;
use crate::linearizable::{
    assert_not_vacuous, campaign, linearizable, not_vacuous, Action, Op, Rng, Run,
};

const KEYS: usize = 5;
const CLIENTS: usize = 3;
/// How long one client operation may take before its outcome counts as unknown.
const OP_TIMEOUT: Duration = Duration::from_secs(15);

type NodeRef = (Arc<ebb_node::cluster::Router>, Arc<ebb_node::cluster::Meta>);

/// The running nodes the clients pick from. Kept apart from the harness, whose lock the
/// nemesis holds while a node stops or starts: the clients keep running meanwhile.
#[derive(Default)]
struct Live(Mutex<Vec<NodeRef>>);

impl Live {
    /// Takes the running nodes from `h`.
    fn update(&self, h: &Harness) {
        *self.0.lock() = h.nodes.values().map(|n| (n.router.clone(), n.meta.clone())).collect();
    }

    /// A running node, picked at random.
    fn pick(&self, rng: &Mutex<Rng>) -> Option<NodeRef> {
        let running = self.0.lock();
        if running.is_empty() {
            return None;
        }
        Some(running[rng.lock().below(running.len() as u64) as usize].clone())
    }
}

/// What the clients tried and what failed (the history records only what may have happened).
#[derive(Default)]
struct Tally {
    tried: AtomicU64,
    failed_reads: AtomicU64,
    refused_deletes: AtomicU64,
}

impl Tally {
    fn count(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        write!(
            f,
            "clients tried {} operations: {} reads failed, {} deletes were refused",
            get(&self.tried),
            get(&self.failed_reads),
            get(&self.refused_deletes)
        )
    }
}

/// Reads key `k` through `node`: its value, `None` if absent; `Err` if the read failed.
async fn read(
    node: &(Arc<ebb_node::cluster::Router>, Arc<ebb_node::cluster::Meta>),
    k: usize,
) -> Result<Option<i64>, String> {
    let sql = SqlSession::on(node.0.clone(), node.1.clone(), "db");
    let q = format!("SELECT v FROM reg WHERE host = 'h{k}'");
    match tokio::time::timeout(OP_TIMEOUT, sql.query(&q)).await {
        Err(_) => Err("timed out".into()),
        Ok(Err(QueryError::UnknownTable(_))) => Ok(None),
        Ok(Err(e)) => Err(e.to_string()),
        Ok(Ok(batches)) => {
            let mut vals = Vec::new();
            for b in &batches {
                let c = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                vals.extend((0..c.len()).filter(|i| c.is_valid(*i)).map(|i| c.value(i)));
            }
            assert!(vals.len() <= 1, "one row per key: {vals:?}");
            Ok(vals.first().copied())
        }
    }
}

/// One client: random operations on random keys through random nodes until `stop`.
async fn client(
    live: Arc<Live>,
    run: Arc<Run>,
    tally: Arc<Tally>,
    rng: Arc<Mutex<Rng>>,
    stop: Arc<AtomicBool>,
) {
    while !stop.load(Ordering::Relaxed) {
        let Some(node) = live.pick(&rng) else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        Tally::count(&tally.tried);
        let (k, choice) = {
            let mut r = rng.lock();
            (r.below(KEYS as u64) as usize, r.below(10))
        };
        let call = run.now();
        match choice {
            0..=3 => {
                let v = run.next_value.fetch_add(1, Ordering::Relaxed);
                let line = format!("reg,host=h{k} v={v}i 1\n");
                let w = node.0.write_lines("db", &line, Precision::Seconds, 0);
                match tokio::time::timeout(OP_TIMEOUT, w).await {
                    Ok(Ok(_)) => run.record(k, call, Some(run.now()), Action::Write(Some(v))),
                    Ok(Err(ebb_node::cluster::RouteError::Rejected(e))) => {
                        panic!("a valid write was refused: {e}")
                    }
                    _ => run.record(k, call, None, Action::Write(Some(v))),
                }
            }
            4..=5 => {
                let sql = SqlSession::on(node.0.clone(), node.1.clone(), "db");
                let q = format!("DELETE FROM reg WHERE host = 'h{k}'");
                match tokio::time::timeout(OP_TIMEOUT, sql.query(&q)).await {
                    Ok(Ok(_)) => run.record(k, call, Some(run.now()), Action::Write(None)),
                    // Before the table exists: nothing to delete, nothing done.
                    Ok(Err(e)) if e.is_client_error() => {
                        let m = e.to_string();
                        assert!(
                            ["does not exist", "not found", "no shard has that table"]
                                .iter()
                                .any(|s| m.contains(s)),
                            "a delete was refused: {m}"
                        );
                        Tally::count(&tally.refused_deletes)
                    }
                    _ => run.record(k, call, None, Action::Write(None)),
                }
            }
            _ => match read(&node, k).await {
                Ok(v) => run.record(k, call, Some(run.now()), Action::Read(v)),
                Err(_) => Tally::count(&tally.failed_reads),
            },
        }
    }
}

/// The nemesis: `faults` faults, one at a time, each healed before the next (stopping early
/// only at `until`, a limit for a campaign that hangs). Returns how many it injected.
async fn nemesis(
    h: Arc<AsyncMutex<Harness>>,
    live: Arc<Live>,
    rng: Arc<Mutex<Rng>>,
    faults_to_inject: u64,
    until: Instant,
) -> u64 {
    let mut joined = false;
    let mut injected = 0;
    while injected < faults_to_inject && Instant::now() < until {
        injected += 1;
        let (fault, pause) = {
            let mut r = rng.lock();
            (r.below(6), Duration::from_millis(500 + r.below(2000)))
        };
        let (faults, ids, idx) = {
            let g = h.lock().await;
            let ids: Vec<(usize, u64)> = g.nodes.iter().map(|(i, n)| (*i, n.id)).collect();
            (g.faults.clone(), ids, g.nodes.keys().copied().collect::<Vec<_>>())
        };
        let victim = ids[rng.lock().below(ids.len() as u64) as usize];
        let others: Vec<u64> = ids.iter().map(|(_, id)| *id).filter(|id| *id != victim.1).collect();
        match fault {
            0 => {
                faults.isolate(victim.1, &others);
                if !joined && idx.len() == 3 {
                    // A node joins while another is cut off: shards move to it meanwhile.
                    joined = true;
                    let mut g = h.lock().await;
                    let seeds: Vec<usize> =
                        idx.iter().copied().filter(|i| *i != victim.0).collect();
                    let started = Instant::now();
                    g.start(3, &seeds).await;
                    live.update(&g);
                    eprintln!("nemesis: node 3 joined in {:?}", started.elapsed());
                }
                tokio::time::sleep(pause).await;
                faults.heal();
            }
            1 => {
                faults.set_drop(0.2);
                tokio::time::sleep(pause).await;
                faults.heal();
            }
            2 => {
                faults.set_delay(Duration::from_millis(30));
                tokio::time::sleep(pause).await;
                faults.heal();
            }
            3 => {
                let mut g = h.lock().await;
                let started = Instant::now();
                g.stop(victim.0).await;
                live.update(&g);
                drop(g);
                let stopped = started.elapsed();
                tokio::time::sleep(pause).await;
                let mut g = h.lock().await;
                let started = Instant::now();
                g.start(victim.0, &[]).await;
                live.update(&g);
                let slow = stopped.max(started.elapsed());
                if slow > Duration::from_secs(2) {
                    let restarted = started.elapsed();
                    eprintln!(
                        "nemesis: node {} stopped in {stopped:?}, restarted in {restarted:?}",
                        victim.0
                    );
                }
            }
            4 => {
                if let Some(c) = &h.lock().await.clock {
                    c.advance(3_600_000); // an hour forward
                }
            }
            _ => tokio::time::sleep(pause).await,
        }
        h.lock().await.watchdog.step(format!("fault {injected} ({fault}) healed"));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    injected
}

/// Reads every key through every node and records the reads.
async fn read_all(h: &AsyncMutex<Harness>, run: &Run) {
    let nodes: Vec<_> = {
        let g = h.lock().await;
        g.nodes.values().map(|n| (n.router.clone(), n.meta.clone())).collect()
    };
    for k in 0..KEYS {
        for node in &nodes {
            // Retried: right after a restart a shard may still be electing its leader.
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let call = run.now();
                match read(node, k).await {
                    Ok(v) => {
                        run.record(k, call, Some(run.now()), Action::Read(v));
                        break;
                    }
                    Err(e) if Instant::now() > deadline => panic!("reading key {k}: {e}"),
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        }
    }
}

/// Every table and series of a replica's catalog: (database, table, table id, series id, tags).
type SeriesSet = std::collections::BTreeSet<(String, String, u32, u64, Vec<(usize, String)>)>;

fn series_of(db: &ebb_query::Database) -> SeriesSet {
    let catalog = db.catalog();
    let mut out = SeriesSet::new();
    for def in catalog.tables() {
        catalog.with_series(def.id, |idx| {
            for (id, tags) in idx.iter() {
                let tags = tags.iter().map(|(i, v)| (i, v.to_string())).collect();
                out.insert((def.database.clone(), def.name.clone(), def.id, id, tags));
            }
        });
    }
    out
}

/// Every replica of a shard holds the same series under the same ids (a replica that gave a
/// key a second id, or an id to another key, would read or delete the wrong rows). Followers
/// may still be applying the last entries: asked again for up to a minute.
async fn replicas_agree_on_series(h: &AsyncMutex<Harness>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut by_shard: std::collections::BTreeMap<u64, Vec<(usize, SeriesSet)>> =
            Default::default();
        for (node, n) in &h.lock().await.nodes {
            for s in n.shards.all() {
                by_shard.entry(s.id).or_default().push((*node, series_of(&s.db)));
            }
        }
        let differ = by_shard.iter().find(|(_, r)| r.iter().any(|(_, set)| *set != r[0].1));
        let Some((shard, replicas)) = differ else {
            let series: usize = by_shard.values().map(|r| r[0].1.len()).sum();
            eprintln!(
                "nemesis: the replicas of {} shards hold the same {series} series",
                by_shard.len()
            );
            assert!(by_shard.values().all(|r| r.len() >= 2), "a shard with one replica");
            return;
        };
        if Instant::now() > deadline {
            let sets: Vec<_> = replicas.iter().map(|(n, s)| format!("node {n}: {s:?}")).collect();
            panic!("the replicas of shard {shard} hold different series:\n{}", sets.join("\n"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn histories_under_partitions_restarts_and_lost_messages_are_linearizable() {
    let c = campaign(12);
    let seed = c.seed;
    eprintln!("nemesis: {} faults within {:?}, EBB_NEMESIS_SEED={seed}", c.faults, c.limit);
    let mut h = Harness::new();
    h.settings = Settings { shards: 2, replication: 3 };
    h.intent_patience = Duration::from_secs(5);
    h.snapshot_every = 20;
    h.clock = Some(ebb_storage::ManualClock::new(1_700_000_000_000));
    h.start(0, &[]).await;
    h.start(1, &[0]).await;
    h.start(2, &[0]).await;
    // The campaign is against a replicated cluster: it starts once every shard has its three
    // replicas (a shard still growing from one replica has no quorum while one is cut off).
    h.wait("every shard has three replicas", |n| {
        let view = n.meta.view();
        view.shards.len() == 2
            && view.shards.values().all(|s| s.replicas.len() == 3 && s.target.is_none())
    })
    .await;
    let live = Arc::new(Live::default());
    live.update(&h);
    let h = Arc::new(AsyncMutex::new(h));
    let (run, tally) = (Arc::new(Run::new()), Arc::new(Tally::default()));
    let rng = Arc::new(Mutex::new(Rng(seed)));
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (l, r, t) = (live.clone(), run.clone(), tally.clone());
            tokio::spawn(client(l, r, t, rng.clone(), stop.clone()))
        })
        .collect();
    let until = Instant::now() + c.limit;
    let injected = nemesis(h.clone(), live, rng.clone(), c.faults, until).await;
    assert_eq!(injected, c.faults, "the campaign ran out of time after {injected} faults");
    // Healed: the clients go on until the history holds what the check needs (a slow machine
    // may not have acknowledged a delete and read it back during the faults).
    let enough = Instant::now() + Duration::from_secs(120);
    while !not_vacuous(&run.history.lock()) && Instant::now() < enough {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    eprintln!("nemesis: {tally}");

    // Healed, every node up: wait for the open intents (deletes still running) to finish.
    {
        let mut g = h.lock().await;
        g.faults.heal();
        for i in 0..4 {
            if !g.nodes.contains_key(&i) && g.addrs.contains_key(&i) {
                g.start(i, &[]).await;
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let open = h.lock().await.nodes.values().next().unwrap().meta.view().intents.len();
        if open == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{open} intents still open");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    read_all(&h, &run).await;

    // Flush, compact and snapshot every replica; restart every node in turn (leader changes,
    // snapshot installs); nothing deleted comes back.
    {
        let g = h.lock().await;
        for n in g.nodes.values() {
            for s in n.shards.all() {
                let e = s.db.engine();
                tokio::task::spawn_blocking(move || {
                    e.flush().unwrap();
                    e.compact_range(None, None).unwrap();
                })
                .await
                .unwrap();
                let _ = s.group.raft.trigger().snapshot().await;
            }
        }
    }
    let idx: Vec<usize> = h.lock().await.nodes.keys().copied().collect();
    for i in idx {
        let mut g = h.lock().await;
        g.stop(i).await;
        g.start(i, &[]).await;
    }
    read_all(&h, &run).await;
    replicas_agree_on_series(&h).await;

    let history = run.history.lock().clone();
    let total: usize = history.values().map(Vec::len).sum();
    let all: Vec<&Op> = history.values().flatten().collect();
    let unknown = all.iter().filter(|o| o.ret.is_none()).count();
    let deletes = all.iter().filter(|o| o.action == Action::Write(None)).count();
    let absent = all.iter().filter(|o| o.action == Action::Read(None)).count();
    eprintln!(
        "nemesis: {total} operations checked on {} keys: {deletes} deletes, {absent} reads of a \
         deleted or unwritten key, {unknown} with unknown outcome",
        history.len()
    );
    assert_not_vacuous(&history);
    for (k, ops) in &history {
        assert!(linearizable(ops), "key {k} (seed {seed}) is not linearizable: {ops:#?}");
    }
    let mut g = h.lock().await;
    for i in g.nodes.keys().copied().collect::<Vec<_>>() {
        g.stop(i).await;
    }
}
