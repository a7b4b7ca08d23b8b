//! The fault campaign with real processes: three `ebb server`s of `deploy/local-cluster.sh`
//! (TLS, mutual TLS between nodes), clients writing, deleting and reading a few keys over HTTP
//! through random nodes while a nemesis kills random nodes with SIGKILL and starts them again.
//! Afterwards every key is read through every node, and each key's history of acknowledged
//! operations must be linearizable ([`crate::linearizable`]): nothing acknowledged is lost and
//! no deleted value is read again.
//!
//! The campaign is bounded by its number of faults (5; `EBB_NEMESIS_FAULTS`), with time only
//! as an upper limit (`EBB_NEMESIS_SECS`, 300 s); it prints its seed, and `EBB_NEMESIS_SEED`
//! replays the random choices.

#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::linearizable::{
    assert_not_vacuous, campaign, linearizable, not_vacuous, Action, Op, Rng, Run,
};
use crate::local_cluster::{settled, LocalCluster};

const KEYS: usize = 4;
const CLIENTS: usize = 3;
const NODES: u16 = 3;

/// What an HTTP request came back with: its status and body, or `None` if it got no answer.
fn post(c: &LocalCluster, node: u16, path: &str, body: &str) -> Option<(u16, String)> {
    let url = format!("{}{path}", c.url(node));
    let mut r = c.post(&url).header("Accept", "text/csv").send(body).ok()?;
    let status = r.status().as_u16();
    Some((status, r.body_mut().read_to_string().ok()?))
}

/// Reads key `k` through `node`: `Some(value or None)`, or `None` if the read failed.
fn read(c: &LocalCluster, node: u16, k: usize) -> Option<Option<i64>> {
    let sql = format!("SELECT v FROM reg WHERE host = 'h{k}'");
    match post(c, node, "/v1/sql?db=demo", &sql)? {
        (200, csv) => {
            let rows: Vec<i64> =
                csv.lines().skip(1).filter_map(|l| l.trim().parse().ok()).collect();
            if rows.len() > 1 {
                let all = post(c, node, "/v1/sql?db=demo", "SELECT host, v, time FROM reg");
                let plan = post(c, node, "/v1/sql?db=demo", &format!("EXPLAIN {sql}"));
                panic!("one row per key: {csv}; the table through node {node}: {all:?}; {plan:?}");
            }
            Some(rows.first().copied())
        }
        // No write reached any shard yet: the table does not exist.
        (404, body) if body.contains("table") && body.contains("does not exist") => Some(None),
        _ => None,
    }
}

fn client(c: Arc<LocalCluster>, run: Arc<Run>, rng: Arc<Mutex<Rng>>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        let (k, node, choice) = {
            let mut r = rng.lock();
            (r.below(KEYS as u64) as usize, 1 + r.below(NODES as u64) as u16, r.below(10))
        };
        let call = run.now();
        match choice {
            0..=3 => {
                let v = run.next_value.fetch_add(1, Ordering::Relaxed);
                let line = format!("reg,host=h{k} v={v}i 1\n");
                match post(&c, node, "/write?db=demo&precision=s", &line) {
                    Some((204, _)) => run.record(k, call, Some(run.now()), Action::Write(Some(v))),
                    Some((400, body)) => panic!("a valid write was refused: {body}"),
                    _ => run.record(k, call, None, Action::Write(Some(v))),
                }
            }
            4..=5 => {
                let sql = format!("DELETE FROM reg WHERE host = 'h{k}'");
                match post(&c, node, "/v1/sql?db=demo", &sql) {
                    Some((200, _)) => run.record(k, call, Some(run.now()), Action::Write(None)),
                    // Before the table exists: nothing to delete, nothing done.
                    Some((400, body)) => assert!(
                        ["does not exist", "not found", "no shard has that table"]
                            .iter()
                            .any(|m| body.contains(m)),
                        "a delete was refused: {body}"
                    ),
                    _ => run.record(k, call, None, Action::Write(None)),
                }
            }
            _ => {
                if let Some(v) = read(&c, node, k) {
                    run.record(k, call, Some(run.now()), Action::Read(v));
                }
            }
        }
    }
}

#[test]
fn histories_across_sigkills_of_real_processes_are_linearizable() {
    let campaign = campaign(5);
    let seed = campaign.seed;
    eprintln!(
        "nemesis (processes): {} SIGKILLs within {:?}, EBB_NEMESIS_SEED={seed}",
        campaign.faults, campaign.limit
    );
    // Ports 24000-32299: below the kernel's ephemeral ports (32768 and up), which connections
    // and listeners on port 0 take.
    let base = 24_000 + (std::process::id() % 800) as u16 * 10;
    let c = Arc::new(LocalCluster::new(base));
    let started = c.script(&["3"]);
    assert!(started.contains("3 nodes running"), "{started}");
    settled(&c, 1);
    let run = Arc::new(Run::new());
    let rng = Arc::new(Mutex::new(Rng(seed)));
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (c, run, rng, stop) = (c.clone(), run.clone(), rng.clone(), stop.clone());
            std::thread::spawn(move || client(c, run, rng, stop))
        })
        .collect();
    let until = Instant::now() + campaign.limit;
    let mut kills = 0;
    while kills < campaign.faults && Instant::now() < until {
        let (victim, down) = {
            let mut r = rng.lock();
            (1 + r.below(NODES as u64) as u16, Duration::from_millis(500 + r.below(3000)))
        };
        assert!(c.script(&["kill", &victim.to_string()]).contains("killed"));
        kills += 1;
        std::thread::sleep(down);
        let back = c.script(&["start", &victim.to_string()]);
        assert!(back.contains(&format!("node {victim}: HTTP")), "{back}");
        std::thread::sleep(Duration::from_millis(1000 + rng.lock().below(2000)));
    }
    assert_eq!(kills, campaign.faults, "the campaign ran out of time after {kills} SIGKILLs");
    // Every node back: the clients go on until the history holds what the check needs.
    let enough = Instant::now() + Duration::from_secs(120);
    while !not_vacuous(&run.history.lock()) && Instant::now() < enough {
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::Relaxed);
    for t in clients {
        t.join().unwrap();
    }
    // Every key through every node once the cluster has settled (deletes still running finish
    // first: a read waits for nothing, so give them their time).
    settled(&c, 1);
    std::thread::sleep(Duration::from_secs(2));
    for k in 0..KEYS {
        for node in 1..=NODES {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let call = run.now();
                if let Some(v) = read(&c, node, k) {
                    run.record(k, call, Some(run.now()), Action::Read(v));
                    break;
                }
                assert!(Instant::now() < deadline, "key {k} unreadable through node {node}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
    let history = run.history.lock().clone();
    let all: Vec<&Op> = history.values().flatten().collect();
    let unknown = all.iter().filter(|o| o.ret.is_none()).count();
    let deletes = all.iter().filter(|o| o.action == Action::Write(None)).count();
    eprintln!(
        "nemesis (processes): {kills} SIGKILLs, {} operations on {} keys: {deletes} deletes, \
         {unknown} with unknown outcome",
        all.len(),
        history.len()
    );
    assert_not_vacuous(&history);
    for (k, ops) in &history {
        assert!(linearizable(ops), "key {k} (seed {seed}) is not linearizable: {ops:#?}");
    }
}
