//! Arrow Flight SQL with the real Python ADBC driver (`adbc-driver-flightsql` from PyPI, in the
//! venv `.ci/run` prepares): queries, parameters, a large result streamed in batches, catalog
//! metadata, a `DELETE`, and access control, on one node and on a three-node cluster. The checks
//! are in `tests/flight_client.py`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{loopback, ready_cluster, Http};
use ebb_node::config::{Config, Secret};
use ebb_node::server::Server;

const ADMIN_PW: &str = "flight admin password";
/// Rows of `cpu`: large enough that the answer streams in several batches.
const ROWS: usize = 300_000;

/// The venv's Python, with the ADBC driver.
fn python() -> PathBuf {
    let venv = std::env::var_os("EBB_CI_VENV").map(PathBuf::from).unwrap_or_else(|| {
        Path::new(&std::env::var_os("HOME").unwrap_or_default()).join(".cache/ebb-ci-venv")
    });
    let py = venv.join("bin/python");
    assert!(
        py.exists(),
        "{} is missing: run .ci/run once, or create the venv and pip install adbc-driver-flightsql pyarrow",
        py.display()
    );
    py
}

fn admin(http: SocketAddr) -> impl Fn(&str) -> (u16, String) {
    move |sql: &str| {
        let auth = format!(
            "Basic {}",
            base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                format!("admin:{ADMIN_PW}")
            )
        );
        Http::new(http).post_with("/v1/sql?db=public", sql.as_bytes(), &[("Authorization", &auth)])
    }
}

/// Writes `cpu` (public) and `mem` (other), and the reader user, through `http`.
fn prepare(http: SocketAddr) {
    let sql = admin(http);
    for s in
        ["CREATE USER reader WITH PASSWORD 'r-pass'", "GRANT READ ON DATABASE public TO reader"]
    {
        let (status, body) = sql(s);
        assert_eq!(status, 200, "{s}: {body}");
    }
    let auth = format!(
        "Basic {}",
        base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            format!("admin:{ADMIN_PW}")
        )
    );
    let h = Http::new(http);
    let base = 1_700_000_000_000_000_000i64;
    for chunk in 0..ROWS / 50_000 {
        let body: String = (0..50_000)
            .map(|i| {
                let n = chunk * 50_000 + i;
                format!(
                    "cpu,host=h{} usage={} {}\n",
                    n % 10,
                    (n * 7) % 100,
                    base + n as i64 * 1_000_000
                )
            })
            .collect();
        let (status, text) =
            h.post_with("/write?db=public", body.as_bytes(), &[("Authorization", &auth)]);
        assert_eq!(status, 204, "{text}");
    }
    let (status, text) = h.post_with(
        "/write?db=other",
        b"mem,host=a used=1 1\nmem,host=b used=2 1\nmem,host=c used=3 1\n",
        &[("Authorization", &auth)],
    );
    assert_eq!(status, 204, "{text}");
}

/// Runs the client script against `flight`; it prints each check.
fn client(flight: SocketAddr) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/flight_client.py");
    let out = Command::new(python())
        .arg(&script)
        .arg(format!("grpc://{flight}"))
        .arg(ROWS.to_string())
        .env("ADMIN_PW", ADMIN_PW)
        .output()
        .expect("run python");
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "ADBC client failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("all checks passed"), "{stdout}");
}

/// The Flight SQL JDBC driver (installed beside the venv by `.ci/run`) against `flight`.
fn jdbc(flight: SocketAddr) {
    let venv = std::env::var_os("EBB_CI_VENV").map(std::path::PathBuf::from).unwrap_or_else(|| {
        Path::new(&std::env::var_os("HOME").unwrap_or_default()).join(".cache/ebb-ci-venv")
    });
    let jar = venv.join("jars/flight-sql-jdbc-driver-18.3.0.jar");
    assert!(jar.exists(), "{} is missing: run .ci/run once", jar.display());
    let program = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/FlightJdbcCheck.java");
    let out = Command::new("java")
        // Arrow's memory needs this on Java 17.
        .arg("--add-opens=java.base/java.nio=ALL-UNNAMED")
        .arg("-cp")
        .arg(&jar)
        .arg(&program)
        .args([&flight.port().to_string(), "admin", ADMIN_PW, "cpu", "host", "h1", "usage"])
        .output()
        .expect("run java");
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success() && stdout.contains("FLIGHT JDBC CHECKS PASSED"),
        "Flight SQL JDBC client failed:\n{stdout}\n{stderr}"
    );
}

fn secured(dir: &Path) -> Config {
    Config { admin_password: Some(Secret(ADMIN_PW.into())), ..loopback(dir) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn adbc_flight_sql_on_one_node() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&secured(dir.path())).await.expect("start");
    let (http, flight) = (server.http_addr, server.flight_addr);
    tokio::task::spawn_blocking(move || {
        prepare(http);
        client(flight);
        jdbc(flight);
    })
    .await
    .expect("client");
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn adbc_flight_sql_on_a_cluster() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("tempdir")).collect();
    let servers =
        ready_cluster(&dirs, |d| Config { shards: 4, replication: 2, ..secured(d) }).await;
    let (http, flight) = (servers[0].http_addr, servers[2].flight_addr);
    tokio::task::spawn_blocking(move || {
        prepare(http);
        client(flight);
        jdbc(flight);
    })
    .await
    .expect("client");
    for s in servers {
        s.shutdown().await.expect("shutdown");
    }
}

/// With `tls` set, Flight SQL is served over TLS only: the ADBC client trusting the CA reads,
/// a plain-text one is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn adbc_flight_sql_over_tls() {
    use ebb_node::tls::issue::{issue, make_ca};
    use ebb_node::tls::CertFiles;
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = dir.path().join("certs");
    make_ca(&certs, 30).expect("ca");
    issue(&certs, "server", &["127.0.0.1".to_string()], 30).expect("issue");
    let tls = CertFiles { cert: certs.join("server.crt"), key: certs.join("server.key") };
    let cfg = Config { tls: Some(tls), ..loopback(&dir.path().join("data")) };
    let server = Server::start(&cfg).await.expect("start");
    let (http, flight) = (server.http_addr, server.flight_addr);
    let ca = certs.join("ca.crt");
    tokio::task::spawn_blocking(move || {
        // The rows go in through HTTPS, with the same certificate.
        let r = crate::tls::https(&ca)
            .post(&format!("https://{http}/write?db=public"))
            .send("cpu,host=a usage=1 1\ncpu,host=b usage=2 1\n")
            .expect("write");
        assert_eq!(r.status().as_u16(), 204);
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/flight_tls_client.py");
        let out = Command::new(python())
            .arg(&script)
            .arg(format!("grpc+tls://{flight}"))
            .arg(&ca)
            .output()
            .expect("run python");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && stdout.contains("all checks passed"), "{stdout}\n{stderr}");
    })
    .await
    .expect("client");
    server.shutdown().await.expect("shutdown");
}
