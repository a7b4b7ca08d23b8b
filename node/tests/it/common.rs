//! Helpers the server tests share: loopback configurations, starting a cluster of servers in one
//! process, an HTTP client that returns every status, `psql`, and polling.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use ebb_node::config::Config;
use ebb_node::server::Server;

/// 2023-11-14T22:13:20Z in nanoseconds: the first timestamp of the tests' data.
pub const BASE: i64 = 1_700_000_000_000_000_000;

/// A server keeping its data in `dir`, listening on ephemeral loopback ports.
pub fn loopback(dir: &Path) -> Config {
    Config {
        data_dir: dir.to_path_buf(),
        http_addr: "127.0.0.1:0".parse().expect("addr"),
        pg_addr: "127.0.0.1:0".parse().expect("addr"),
        grpc_addr: "127.0.0.1:0".parse().expect("addr"),
        flight_addr: "127.0.0.1:0".parse().expect("addr"),
        join_token_file: Some(join_token_file()),
        ..Config::default()
    }
}

/// The join token every test cluster's nodes are given (the first registers it, the others
/// join with it), as the chart gives every pod the one in its Secret.
pub fn join_token_file() -> std::path::PathBuf {
    static FILE: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let dir = FILE.get_or_init(|| {
        let d = tempfile::tempdir().expect("tempdir");
        std::fs::write(d.path().join("token"), "dGVzdC1jbHVzdGVycy1qb2luLXRva2VuLTAxMjM0NTY3ODk")
            .expect("write the join token");
        d
    });
    dir.path().join("token")
}

/// Sends the nodes' logs to stderr when `EBB_TEST_LOG` holds a filter (`info,openraft=warn`,
/// say): for a run that went wrong. Once per test binary; later calls do nothing.
pub fn logs() {
    if let Ok(filter) = std::env::var("EBB_TEST_LOG") {
        let filter = tracing_subscriber::EnvFilter::new(filter);
        let _ = tracing_subscriber::fmt().with_env_filter(filter).try_init();
    }
}

/// Starts one server per directory in cluster mode: the first creates the cluster, the others
/// join it through the first. `config` gives each one's configuration.
pub async fn start_cluster(
    dirs: &[tempfile::TempDir],
    config: impl Fn(&Path) -> Config,
) -> Vec<Server> {
    logs();
    let (first, rest) = dirs.split_first().expect("at least one node");
    let first = Server::start(&Config { cluster: true, ..config(first.path()) })
        .await
        .expect("start node 1");
    let seed = first.grpc_addr.to_string();
    let mut servers = vec![first];
    for d in rest {
        let cfg = Config { join: vec![seed.clone()], ..config(d.path()) };
        servers.push(Server::start(&cfg).await.expect("join"));
    }
    servers
}

/// [`start_cluster`], then waits (up to 120 s each) until every node answers `/ready`; fails
/// with what a node still waits for.
pub async fn ready_cluster(
    dirs: &[tempfile::TempDir],
    config: impl Fn(&Path) -> Config,
) -> Vec<Server> {
    let servers = start_cluster(dirs, config).await;
    let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.http_addr).collect();
    tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        for a in addrs {
            // The last answer names what the node still waits for, should it never be ready.
            let mut last = (0, String::new());
            until_or(120, || {
                last = Http::new(a).get("/ready");
                last.0 == 200
            })
            .unwrap_or_else(|()| {
                panic!(
                    "node {a} not ready after {:?}: {} {}",
                    start.elapsed(),
                    last.0,
                    last.1.trim()
                )
            });
        }
    })
    .await
    .expect("ready");
    servers
}

/// A blocking HTTP client for one server that returns every status instead of failing on 4xx.
pub struct Http {
    /// `http://host:port`.
    pub base: String,
    agent: ureq::Agent,
}

impl Http {
    /// A client for the server at `addr`.
    pub fn new(addr: SocketAddr) -> Http {
        let agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
        Http { base: format!("http://{addr}"), agent }
    }

    /// POSTs `body` to `path` with extra headers: the status and the body.
    pub fn post_with(&self, path: &str, body: &[u8], headers: &[(&str, &str)]) -> (u16, String) {
        let mut req = self.agent.post(&format!("{}{path}", self.base));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let mut resp = req.send(body).expect("request");
        let status = resp.status().as_u16();
        (status, resp.body_mut().read_to_string().unwrap_or_default())
    }

    /// POSTs `body` to `path`: the status and the body.
    pub fn post(&self, path: &str, body: &str) -> (u16, String) {
        self.post_with(path, body.as_bytes(), &[])
    }

    /// GETs `path`: the status and the body.
    pub fn get(&self, path: &str) -> (u16, String) {
        let mut resp = self.agent.get(&format!("{}{path}", self.base)).call().expect("request");
        let status = resp.status().as_u16();
        (status, resp.body_mut().read_to_string().unwrap_or_default())
    }

    /// Runs SQL in database `public`: the status and the body.
    pub fn sql(&self, sql: &str) -> (u16, String) {
        self.post("/v1/sql?db=public", sql)
    }

    /// Runs SQL that must succeed and returns its JSON rows.
    pub fn json(&self, sql: &str) -> serde_json::Value {
        let (status, body) = self.sql(sql);
        assert_eq!(status, 200, "{sql}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{sql}: {e}: {body}"))
    }

    /// The first row's column `c` of a query, as a number.
    pub fn count(&self, sql: &str) -> u64 {
        self.json(sql)[0]["c"].as_u64().unwrap_or_else(|| panic!("no count: {sql}"))
    }

    /// The value of an unlabelled metric on `/metrics`, -1 if it is missing.
    pub fn metric(&self, name: &str) -> f64 {
        let text = self.get("/metrics").1;
        let line = text.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or("");
        line.split(' ').nth(1).and_then(|v| v.parse().ok()).unwrap_or(-1.0)
    }
}

/// Runs the real `psql` binary against the PostgreSQL port `port`, database `public`, unaligned
/// tuples only: whether it succeeded, its output and its errors.
pub fn psql(port: u16, sql: &str) -> (bool, String, String) {
    psql_as(port, "ebb", "", sql)
}

/// [`psql`] as `user` with `password` (SCRAM-SHA-256 on a server with users), stopping at the
/// first error.
pub fn psql_as(port: u16, user: &str, password: &str, sql: &str) -> (bool, String, String) {
    let out = Command::new("psql")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", user])
        .args(["-d", "public", "-At", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .env("PGPASSWORD", password)
        .env("PGCONNECT_TIMEOUT", "10")
        .output()
        .expect("psql must be installed (postgresql-client)");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        String::from_utf8_lossy(&out.stderr).trim().to_string(),
    )
}

/// Polls until `f` holds, for up to `secs` seconds, then fails naming `what`.
pub fn until(secs: u64, what: &str, f: impl FnMut() -> bool) {
    until_or(secs, f).unwrap_or_else(|()| panic!("timed out: {what}"));
}

/// Polls until `f` holds, for up to `secs` seconds: `Err` if it never did.
pub fn until_or(secs: u64, mut f: impl FnMut() -> bool) -> Result<(), ()> {
    let start = Instant::now();
    while !f() {
        if start.elapsed() >= Duration::from_secs(secs) {
            return Err(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// The admin password of [`secured`] servers.
pub const ADMIN_PW: &str = "correct horse battery";

/// A server keeping its data in `dir` with user `admin` ([`ADMIN_PW`]).
pub fn secured(dir: &Path) -> Config {
    Config { admin_password: Some(ebb_node::config::Secret(ADMIN_PW.into())), ..loopback(dir) }
}

/// An `Authorization: Basic` header value.
pub fn basic(user: &str, password: &str) -> String {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

/// An HTTP client that sends `auth` as its `Authorization` header.
pub struct As<'a> {
    /// The client.
    pub http: &'a Http,
    /// The header's value.
    pub auth: String,
}

impl As<'_> {
    /// Runs SQL in database `public`: the status and the body.
    pub fn sql(&self, sql: &str) -> (u16, String) {
        self.http.post_with("/v1/sql?db=public", sql.as_bytes(), &[("Authorization", &self.auth)])
    }

    /// Runs SQL that must succeed: its body.
    pub fn ok(&self, sql: &str) -> String {
        let (s, b) = self.sql(sql);
        assert_eq!(s, 200, "{sql}: {b}");
        b
    }

    /// Writes line protocol to database `public`: the status and the body.
    pub fn write(&self, lines: &str) -> (u16, String) {
        self.http.post_with("/write?db=public", lines.as_bytes(), &[("Authorization", &self.auth)])
    }

    /// GETs `path`: the status and the body.
    pub fn get(&self, path: &str) -> (u16, String) {
        let url = format!("{}{path}", self.http.base);
        let mut resp =
            self.http.agent.get(&url).header("Authorization", &self.auth).call().expect("request");
        let status = resp.status().as_u16();
        (status, resp.body_mut().read_to_string().unwrap_or_default())
    }

    /// `ebb audit verify`'s report of request `id`.
    pub fn verify(&self, id: u64) -> ebb_node::audit::VerifyReport {
        let (s, b) = self.get(&format!("/v1/audit/verify?id={id}"));
        assert_eq!(s, 200, "{b}");
        serde_json::from_str(&b).expect("a verification")
    }
}

/// Memory in use by this process (servers of the tests run in it), in bytes.
pub fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb << 10)
}
