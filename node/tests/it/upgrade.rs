//! Mixed-version clusters: nodes pinned to cluster version 1 run as the previous release
//! (0.1.0) would, in a cluster with nodes of this build. A rolling upgrade keeps the cluster at
//! the oldest member's version, a node can be rolled back until the upgrade is finalized,
//! finalizing waits for every node, and afterwards a binary too old for the cluster is refused
//! (at start, at join, and on the wire).

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use ebb_node::cluster::version::VersionRange;

use crate::cluster::{sql, wait_settled};
use crate::cluster_harness::Harness;

/// Runs `q` on node `i`: its rows as a table, or the error.
async fn try_sql(h: &Harness, i: usize, q: &str) -> Result<String, String> {
    h.watchdog.step(format!("node {i}: {q}"));
    let s = ebb_query::SqlSession::on(h.nodes[&i].router.clone(), h.nodes[&i].meta.clone(), "db");
    let b = s.query(q).await.map_err(|e| e.to_string())?;
    Ok(datafusion::arrow::util::pretty::pretty_format_batches(&b).unwrap().to_string())
}

/// Waits until `q` on node `i` answers with text containing `want`.
async fn wait_sql(h: &Harness, i: usize, q: &str, want: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = try_sql(h, i, q).await;
        if got.as_deref().is_ok_and(|t| t.contains(want)) {
            return got.unwrap();
        }
        assert!(Instant::now() < deadline, "{q} on node {i}: waited for {want:?}, got {got:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn lines(from: u32, to: u32) -> String {
    let mut s = String::new();
    for t in from..to {
        for h in 0..12 {
            s.push_str(&format!("cpu,host=h{h} v={t} {}\n", 1_000 + t));
        }
    }
    s
}

async fn write(h: &Harness, i: usize, from: u32, to: u32) {
    let p = ebb_query::lp::Precision::Seconds;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match h.nodes[&i].router.write_lines("db", &lines(from, to), p, 0).await {
            Ok(s) => {
                assert_eq!(s.rows, 12 * (to - from) as usize);
                return;
            }
            Err(e) if Instant::now() < deadline => {
                tracing::info!(%e, "write not taken yet");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("write through node {i}: {e}"),
        }
    }
}

const COUNT: &str = "SELECT count(*) AS n FROM cpu";
const VERSIONS: &str = "SELECT id, version, cluster_versions FROM system.nodes ORDER BY id";
const CLUSTER: &str = "SELECT active_version, finalizable_to, upgrade FROM system.cluster";

/// Restarts node `i` (same data directory) pinned to `pin`, or on this build's versions.
async fn restart(h: &mut Harness, i: usize, pin: Option<VersionRange>) -> Result<(), String> {
    if h.nodes.contains_key(&i) {
        h.stop(i).await;
    }
    match pin {
        Some(p) => h.pins.insert(i, p),
        None => h.pins.remove(&i),
    };
    h.try_start(i, &[]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_upgrade_runs_mixed_rolls_back_and_finalizes_once_every_node_can() {
    let mut h = Harness::new();
    // The cluster starts on the previous release: every node at cluster versions 1-1.
    for i in 0..3 {
        h.pins.insert(i, VersionRange::LEGACY);
    }
    h.start(0, &[]).await;
    h.start(1, &[0]).await;
    h.start(2, &[0]).await;
    wait_settled(&h, 3).await;
    let created = sql(&h, 0, CLUSTER).await;
    assert!(created.contains("| 1              |"), "{created}");
    write(&h, 0, 0, 10).await;

    // Nodes move to this build one at a time; the cluster stays at version 1 and serves.
    for i in [2, 1] {
        restart(&mut h, i, None).await.unwrap();
        wait_settled(&h, 3).await;
        wait_sql(&h, i, COUNT, "| 120 |").await;
    }
    let mixed = wait_sql(&h, 1, VERSIONS, "| 1-1 ").await;
    let this = format!("| {} ", ebb_node::VERSION);
    assert!(mixed.contains("| 1-2 ") && mixed.contains(&this), "{mixed}");
    let status = sql(&h, 2, CLUSTER).await;
    assert!(status.contains("waiting: node 1 runs ebb"), "{status}");
    assert!(status.contains("(cluster versions 1-1): upgrade it before finalizing"), "{status}");
    let refused = try_sql(&h, 2, "ALTER CLUSTER FINALIZE UPGRADE").await.unwrap_err();
    assert!(refused.contains("nothing to finalize at cluster version 1: node 1 runs"), "{refused}");
    // Writes and deletes work in the mixed cluster.
    write(&h, 2, 10, 20).await;
    sql(&h, 1, "DELETE FROM cpu WHERE host = 'h0'").await;
    wait_sql(&h, 0, COUNT, "| 220 |").await;

    // The last node moves: the upgrade is pending, nothing changed yet.
    restart(&mut h, 0, None).await.unwrap();
    wait_settled(&h, 3).await;
    sql(&h, 0, "ALTER CLUSTER SET AUTO FINALIZE NEVER").await;
    let pending = wait_sql(&h, 1, CLUSTER, "pending: every node supports cluster version 2").await;
    assert!(pending.contains("| 1              | 2 "), "{pending}");
    assert!(pending.contains("rolling a node back is possible"), "{pending}");

    // A rollback before finalizing: node 1 goes back to the previous release, and forward.
    restart(&mut h, 1, Some(VersionRange::LEGACY)).await.unwrap();
    wait_settled(&h, 3).await;
    wait_sql(&h, 1, COUNT, "| 220 |").await;
    write(&h, 1, 20, 25).await;
    restart(&mut h, 1, None).await.unwrap();
    wait_settled(&h, 3).await;
    wait_sql(&h, 0, COUNT, "| 280 |").await;

    // Finalized: every node moves to version 2 and enables what it gates.
    let done = wait_sql(&h, 2, "ALTER CLUSTER FINALIZE UPGRADE", "finalized").await;
    assert!(
        done.contains(
            "| 2              | finalized: the cluster runs at cluster version 2 (it ran at 1)"
        ),
        "{done}"
    );
    h.wait("every node runs at cluster version 2", |n| n.meta.versions().active() == 2).await;
    let after =
        sql(&h, 0, "SELECT active_version, activated_by, upgrade FROM system.cluster").await;
    assert!(after.contains("| 2              |"), "{after}");
    assert!(after.contains("finalized: every node runs at cluster version 2"), "{after}");
    let again = try_sql(&h, 1, "ALTER CLUSTER FINALIZE UPGRADE").await.unwrap_err();
    assert!(again.contains("nothing to finalize at cluster version 2"), "{again}");

    // After finalizing, the previous release is refused: a node rolled back does not start...
    let back = restart(&mut h, 2, Some(VersionRange::LEGACY)).await.unwrap_err();
    assert!(
        back.contains("cluster versions 1-1), and its cluster runs at cluster version 2"),
        "{back}"
    );
    // ...nor does a new node of it join...
    h.pins.insert(3, VersionRange::LEGACY);
    let started = Instant::now();
    let join = h.try_start(3, &[0]).await.unwrap_err();
    assert!(join.contains("the joining node runs ebb"), "{join}");
    assert!(join.contains("this cluster runs at cluster version 2"), "{join}");
    assert!(started.elapsed() < Duration::from_secs(30), "a refused join is final");
    // ...and a request from the previous release (no version header) is not answered.
    let id = h.nodes[&0].conns.cluster_id().unwrap();
    let ch = tonic::transport::Endpoint::from_shared(format!("http://{}", h.addrs[&0]))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let stamp = move |mut req: tonic::Request<()>| {
        req.metadata_mut().insert("x-ebb-cluster-id", id.parse().unwrap());
        Ok(req)
    };
    use ebb_node::cluster::proto::cluster_client::ClusterClient;
    let mut legacy = ClusterClient::with_interceptor(ch, stamp);
    let status = legacy.leaders(ebb_node::cluster::proto::LeadersRequest {}).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    assert!(status.message().contains("ebb 0.1.0 or older (cluster versions 1-1)"), "{status:?}");
    // ...and the cluster serves on, and takes node 2 back on this build with its data.
    restart(&mut h, 2, None).await.unwrap();
    wait_settled(&h, 3).await;
    wait_sql(&h, 2, COUNT, "| 280 |").await;
    for i in h.nodes.keys().copied().collect::<Vec<_>>() {
        h.stop(i).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_upgrade_finalizes_by_itself_after_the_clusters_delay() {
    let mut h = Harness::new();
    // Created by the previous release (a cluster this build creates runs at version 2).
    h.pins.insert(0, VersionRange::LEGACY);
    h.pins.insert(2, VersionRange::LEGACY);
    h.start(0, &[]).await;
    h.start(1, &[0]).await;
    h.start(2, &[0]).await;
    wait_settled(&h, 3).await;
    restart(&mut h, 0, None).await.unwrap();
    wait_settled(&h, 3).await;
    let status = sql(&h, 0, CLUSTER).await;
    assert!(status.contains("| 1              |"), "{status}");
    sql(&h, 0, "ALTER CLUSTER SET AUTO FINALIZE AFTER '1s'").await;
    let held = wait_sql(&h, 1, "SELECT auto_finalize_after FROM system.cluster", "| 1s ").await;
    assert!(held.contains("| 1s "), "{held}");
    restart(&mut h, 2, None).await.unwrap();
    h.watchdog.step("waiting for the upgrade to finalize by itself".to_string());
    let deadline = Instant::now() + Duration::from_secs(60);
    while h.nodes.values().any(|n| n.meta.versions().active() != 2) {
        assert!(Instant::now() < deadline, "the upgrade did not finalize by itself");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let after = sql(&h, 2, "SELECT active_version, activated_by FROM system.cluster").await;
    assert!(after.contains("| 2              | auto "), "{after}");
    for i in h.nodes.keys().copied().collect::<Vec<_>>() {
        h.stop(i).await;
    }
}

/// Writes `token` to a file node `i` reads its join token from.
fn give_token(h: &mut Harness, i: usize, token: &str) {
    let path = h.dir.path().join(format!("join-token-{i}"));
    std::fs::write(&path, token).unwrap();
    h.join_tokens.insert(i, Some(path));
}

/// The token `CREATE JOIN TOKEN ...` on node `i` answers with.
async fn mint(h: &Harness, i: usize, q: &str) -> String {
    let s = ebb_query::SqlSession::on(h.nodes[&i].router.clone(), h.nodes[&i].meta.clone(), "db");
    let b = s.query(q).await.unwrap();
    let col = b[0].column_by_name("token").unwrap();
    let col = col.as_any().downcast_ref::<datafusion::arrow::array::StringArray>().unwrap();
    col.value(0).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn joining_needs_a_token_the_cluster_knows_within_its_lifetime_and_uses() {
    let mut h = Harness::new();
    h.settings.replication = 1;
    // The first node registers the token it was given (the chart's Secret) for the others.
    let bootstrap = "Y2hhcnQtc2VjcmV0LWZvci1ldmVyeS1wb2QtMDEyMzQ1Njc4OWFiY2Rl";
    give_token(&mut h, 0, bootstrap);
    h.start(0, &[]).await;
    give_token(&mut h, 1, bootstrap);
    h.start(1, &[0]).await;
    // Without a token, a node is refused at once, and told why.
    h.join_tokens.insert(2, None);
    let started = Instant::now();
    let none = h.try_start(2, &[0]).await.unwrap_err();
    assert!(none.contains("joining this cluster needs a join token"), "{none}");
    assert!(started.elapsed() < Duration::from_secs(30), "a refused join is final");
    // A minted one-use token admits one node; a second is refused.
    let once = mint(&h, 1, "CREATE JOIN TOKEN VALID FOR '1h' USES 1").await;
    assert!(once.starts_with("ebbj_"), "{once}");
    give_token(&mut h, 2, &once);
    h.start(2, &[0]).await;
    give_token(&mut h, 3, &once);
    let used = h.try_start(3, &[1]).await.unwrap_err();
    assert!(used.contains("is used up"), "{used}");
    // The list holds no secret.
    let list =
        sql(&h, 0, "SELECT id, token, uses_left, used_by FROM system.join_tokens ORDER BY id")
            .await;
    assert!(!list.contains(&once[18..]) && !list.contains(bootstrap), "{list}");
    assert!(list.contains("| bootstrap    |       |           | 2 "), "{list}");
    assert!(list.contains("| 0         | 3 "), "{list}");
    // An expired token is refused, naming when it expired.
    let brief = mint(&h, 0, "CREATE JOIN TOKEN VALID FOR '1s'").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    give_token(&mut h, 3, &brief);
    let expired = h.try_start(3, &[0]).await.unwrap_err();
    assert!(expired.contains("expired at"), "{expired}");
    // A dropped token admits no one.
    sql(&h, 0, "DROP JOIN TOKEN 'bootstrap'").await;
    give_token(&mut h, 3, bootstrap);
    let dropped = h.try_start(3, &[0]).await.unwrap_err();
    assert!(dropped.contains("not one of this cluster's"), "{dropped}");
    // Reading the token file happens at start: a file too short is refused before any join.
    give_token(&mut h, 3, "short");
    let short = h.try_start(3, &[0]).await.unwrap_err();
    assert!(short.contains("at least 32 characters"), "{short}");
    let unlimited = mint(&h, 2, "CREATE JOIN TOKEN VALID FOR '1d' USES UNLIMITED").await;
    give_token(&mut h, 3, &unlimited);
    h.start(3, &[2]).await;
    h.wait("node 3 is a member", |n| n.meta.view().nodes.len() == 4).await;
    for i in h.nodes.keys().copied().collect::<Vec<_>>() {
        h.stop(i).await;
    }
}
