//! Three `ebb server` processes started by `deploy/local-cluster.sh`: a node killed with
//! SIGKILL loses nothing acknowledged, the others go on serving writes and SQL, and the node
//! restarts from its data directory and catches up. Then a fourth node joins. The script runs
//! the cluster secured (HTTPS, mutual TLS between nodes, user `admin`), as a user gets it.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

pub(crate) struct LocalCluster {
    dir: tempfile::TempDir,
    base: u16,
}

/// The first base from `wanted` on (in steps of 10, up to 400 further) whose ports for four
/// nodes (`base + {0, 100, 200, 300} + i`) are all free now: another process's cluster may hold
/// the ports the wanted base gives.
fn free_base(wanted: u16) -> u16 {
    let free = |base: u16| {
        (1..=4u16).all(|i| {
            [0u16, 100, 200, 300]
                .iter()
                .all(|off| std::net::TcpListener::bind(("127.0.0.1", base + off + i)).is_ok())
        })
    };
    (0..40u16).map(|k| wanted + 10 * k).find(|b| free(*b)).unwrap_or(wanted)
}

impl LocalCluster {
    /// A cluster of `deploy/local-cluster.sh` in a new directory, on ports from `base`, not yet
    /// started.
    pub(crate) fn new(base: u16) -> LocalCluster {
        LocalCluster { dir: tempfile::tempdir().unwrap(), base: free_base(base) }
    }

    pub(crate) fn script(&self, args: &[&str]) -> String {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/local-cluster.sh");
        let out = Command::new("bash")
            .arg(script)
            .args(args)
            .env("EBB_BIN", env!("CARGO_BIN_EXE_ebb"))
            .env("EBB_CLUSTER_DIR", self.dir.path())
            .env("EBB_PORT_BASE", self.base.to_string())
            .env("EBB_LOG", "warn")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{args:?}: {text}{}", String::from_utf8_lossy(&out.stderr));
        text
    }

    pub(crate) fn url(&self, node: u16) -> String {
        format!("https://127.0.0.1:{}", self.base + node)
    }

    /// A POST to `url` as `admin`, trusting only the script's CA.
    pub(crate) fn post(&self, url: &str) -> ureq::RequestBuilder<ureq::typestate::WithBody> {
        use base64::Engine;
        let pw = std::fs::read_to_string(self.dir.path().join("admin.pw")).unwrap();
        let pair = base64::engine::general_purpose::STANDARD.encode(format!("admin:{}", pw.trim()));
        self.agent().post(url).header("Authorization", &format!("Basic {pair}"))
    }

    pub(crate) fn agent(&self) -> ureq::Agent {
        let pem = std::fs::read(self.dir.path().join("certs/ca.crt")).unwrap();
        let certs: Vec<_> = ureq::tls::parse_pem(&pem)
            .filter_map(|i| match i {
                Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
                _ => None,
            })
            .collect();
        let roots = ureq::tls::RootCerts::Specific(std::sync::Arc::new(certs));
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .tls_config(ureq::tls::TlsConfig::builder().root_certs(roots).build())
            .build()
            .into()
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.script(&["stop"])));
    }
}

fn write(c: &LocalCluster, node: u16, body: &str) {
    let url = format!("{}/write?db=demo&precision=s", c.url(node));
    let mut r = c.post(&url).send(body).unwrap();
    let status = r.status().as_u16();
    let text = r.body_mut().read_to_string().unwrap_or_default();
    assert_eq!(status, 204, "write through node {node}: {text}");
}

/// `SELECT count(*) FROM cpu` through `node`, retried while the cluster settles.
fn count(c: &LocalCluster, node: u16, want: u64) {
    until(c, node, "SELECT count(*) AS n FROM cpu", want);
}

/// Waits until every shard has three replicas and none is moving.
pub(crate) fn settled(c: &LocalCluster, node: u16) {
    let q = "SELECT count(*) AS n FROM system.shards \
             WHERE NOT moving AND length(replicas) - length(replace(replicas, ',', '')) = 2";
    until(c, node, q, 4);
}

/// Runs `sql` (one number) through `node` until it answers `want`.
fn until(c: &LocalCluster, node: u16, sql: &str, want: u64) {
    let url = format!("{}/v1/sql?db=demo", c.url(node));
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = String::new();
    while Instant::now() < deadline {
        if let Ok(mut r) = c.post(&url).header("Accept", "text/csv").send(sql) {
            last = r.body_mut().read_to_string().unwrap_or_default();
            if last.lines().nth(1).map(str::trim) == Some(&want.to_string()) {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("node {node}: {sql}: expected {want}, last answer {last:?}");
}

fn lines(from: u32, to: u32) -> String {
    (from..to).map(|i| format!("cpu,host=h{} v={i} {}\n", i % 40, 1_000_000 + i)).collect()
}

#[test]
fn a_sigkilled_node_loses_nothing_and_a_new_node_joins() {
    // Ports 20000-24299: apart from the other process tests and below the kernel's ephemeral
    // ports (32768 and up), which connections and listeners on port 0 take.
    let base = 20_000 + (std::process::id() % 400) as u16 * 10;
    let c = LocalCluster::new(base);
    let started = c.script(&["3"]);
    assert!(started.contains("3 nodes running with TLS"), "{started}");
    // Nothing is answered without credentials.
    let anonymous = c.agent().post(&format!("{}/v1/sql?db=demo", c.url(2))).send("SELECT 1");
    assert_eq!(anonymous.unwrap().status().as_u16(), 401);
    write(&c, 1, &lines(0, 400));
    count(&c, 3, 400);
    // Every shard replicated on all three before a node is lost.
    settled(&c, 2);

    // SIGKILL node 1 (it created the cluster and leads at first): writes and reads go on.
    assert!(c.script(&["kill", "1"]).contains("node 1 killed"));
    write(&c, 2, &lines(400, 800));
    count(&c, 3, 800);
    // It restarts from disk with its stored id and catches up.
    let restarted = c.script(&["start", "1"]);
    assert!(restarted.contains("node 1: HTTP"), "node 1 did not start again: {restarted}");
    count(&c, 1, 800);

    // A fourth node joins; shards rebalance onto it while the data stays whole.
    c.script(&["add"]);
    write(&c, 4, &lines(800, 1000));
    count(&c, 4, 1000);
    let q = "SELECT replicas AS n FROM system.nodes WHERE id = 4";
    let url = format!("{}/v1/sql?db=demo", c.url(1));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        // The rebalancer gives the new node a share: 12 replicas over 4 nodes.
        let body = c
            .post(&url)
            .header("Accept", "text/csv")
            .send(q)
            .unwrap()
            .body_mut()
            .read_to_string()
            .unwrap();
        if body.lines().nth(1).map(str::trim) == Some("3") {
            break;
        }
        assert!(Instant::now() < deadline, "node 4 got no fair share: {body}");
        std::thread::sleep(Duration::from_millis(200));
    }
    settled(&c, 3);
    count(&c, 2, 1000);
}
