//! TLS end to end: HTTPS and the real `psql` with `sslmode=verify-full` against certificates
//! `ebb cert` makes, plain-text clients refused, a renewed certificate served without a
//! restart; and the cluster port, where only a holder of a certificate the cluster CA signed
//! reaches Join, Vote or AppendEntries, and only with the cluster's id.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use ebb_node::cluster::proto::cluster_client::ClusterClient;
use ebb_node::cluster::proto::JoinRequest;
use ebb_node::config::{Config, Secret};
use ebb_node::server::Server;
use ebb_node::tls::issue::{issue, make_ca};
use ebb_node::tls::{CertFiles, ClusterFiles};
use ebb_raft::transport::proto::raft_client::RaftClient;
use ebb_raft::transport::proto::RaftRequest;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

use crate::common::{loopback, start_cluster, until};

const ADMIN_PW: &str = "tls test password";

fn files(dir: &Path, name: &str) -> CertFiles {
    CertFiles { cert: dir.join(format!("{name}.crt")), key: dir.join(format!("{name}.key")) }
}

/// An HTTPS client trusting only the CA in `ca`.
pub(crate) fn https(ca: &Path) -> ureq::Agent {
    let pem = std::fs::read(ca).expect("ca");
    let certs: Vec<_> = ureq::tls::parse_pem(&pem)
        .filter_map(|i| match i {
            Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
            _ => None,
        })
        .collect();
    let tls = ureq::tls::TlsConfig::builder()
        .root_certs(ureq::tls::RootCerts::Specific(Arc::new(certs)))
        .build();
    ureq::Agent::config_builder().http_status_as_error(false).tls_config(tls).build().into()
}

/// `psql` with a full connection string: success, output, errors.
fn psql(conninfo: &str, sql: &str) -> (bool, String, String) {
    let out = Command::new("psql")
        .args([conninfo, "-At", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .env("PGPASSWORD", ADMIN_PW)
        .env("PGCONNECT_TIMEOUT", "10")
        .output()
        .expect("psql must be installed (postgresql-client)");
    let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_string();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn client_ports_require_tls_and_reload_a_renewed_certificate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca1, ca2) = (dir.path().join("ca1"), dir.path().join("ca2"));
    make_ca(&ca1, 30).expect("ca");
    make_ca(&ca2, 30).expect("ca");
    let hosts = ["127.0.0.1".to_string(), "localhost".to_string()];
    issue(&ca1, "server", &hosts, 30).expect("issue");
    issue(&ca2, "server", &hosts, 30).expect("issue");
    // The server reads its certificate from files of its own, replaced later.
    let live = dir.path().join("live");
    std::fs::create_dir_all(&live).expect("dir");
    let served = files(&live, "tls");
    std::fs::copy(files(&ca1, "server").cert, &served.cert).expect("copy");
    std::fs::copy(files(&ca1, "server").key, &served.key).expect("copy");
    let config = Config {
        admin_password: Some(Secret(ADMIN_PW.into())),
        tls: Some(served.clone()),
        ..loopback(&dir.path().join("data"))
    };
    let server = Server::start(&config).await.expect("start");
    let (http, pg) = (server.http_addr, server.pg_addr.port());
    let (c1, c2) = (ca1.join("ca.crt"), ca2.join("ca.crt"));
    tokio::task::spawn_blocking(move || {
        let url = format!("https://127.0.0.1:{}/v1/sql?db=public", http.port());
        let sql = |agent: &ureq::Agent| {
            agent
                .post(&url)
                .header("Authorization", &format!("Bearer {}", "not-a-token"))
                .send("SELECT 1")
                .map(|r| r.status().as_u16())
        };
        assert_eq!(sql(&https(&c1)).expect("https"), 401, "TLS works; the token does not");
        let basic = ureq::Agent::config_builder().http_status_as_error(false).build();
        let plain: ureq::Agent = basic.into();
        let r = plain.get(&format!("http://127.0.0.1:{}/health", http.port())).call();
        assert!(r.is_err(), "plain HTTP to a TLS port gets no answer: {r:?}");
        assert!(sql(&https(&c2)).is_err(), "a certificate of another CA is not trusted");

        let full = |ca: &Path| {
            format!(
                "host=127.0.0.1 port={pg} user=admin dbname=public sslmode=verify-full \
                 sslrootcert={}",
                ca.display()
            )
        };
        let (ok, out, err) = psql(&full(&c1), "SELECT 40 + 2");
        assert!(ok, "psql verify-full: {err}");
        assert_eq!(out, "42");
        let plain_pg = format!("host=127.0.0.1 port={pg} user=admin dbname=public sslmode=disable");
        let (ok, _, err) = psql(&plain_pg, "SELECT 1");
        assert!(!ok && err.contains("requires TLS"), "plain PostgreSQL is refused: {err}");

        // Renewal: the files change in place (as a mounted Secret does); new connections get
        // the new certificate without a restart, and nothing breaks in between.
        std::fs::copy(files(&ca2, "server").key, &served.key).expect("copy");
        std::fs::copy(files(&ca2, "server").cert, &served.cert).expect("copy");
        until(20, "the renewed certificate is served", || sql(&https(&c2)).is_ok());
        assert!(sql(&https(&c1)).is_err(), "the old CA no longer verifies the server");
        let (ok, out, err) = psql(&full(&c2), "SELECT 7");
        assert!(ok && out == "7", "psql after renewal: {err}");
        // A broken file keeps the current certificate.
        std::fs::write(&served.cert, "not a certificate").expect("write");
        std::thread::sleep(Duration::from_secs(7));
        assert_eq!(sql(&https(&c2)).expect("still served"), 401);
    })
    .await
    .expect("client");
    server.shutdown().await.expect("shutdown");
}

/// A gRPC channel to `addr`: TLS trusting `ca` with `identity` when given, else plain.
async fn channel(
    addr: &str,
    ca: Option<&Path>,
    identity: Option<&CertFiles>,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    let Some(ca) = ca else {
        return Endpoint::from_shared(format!("http://{addr}"))?
            .connect_timeout(Duration::from_secs(3))
            .connect()
            .await;
    };
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(std::fs::read(ca).expect("ca")))
        .domain_name(ebb_node::tls::NODE_NAME);
    if let Some(id) = identity {
        let (c, k) = (std::fs::read(&id.cert).expect("cert"), std::fs::read(&id.key).expect("key"));
        tls = tls.identity(Identity::from_pem(c, k));
    }
    Endpoint::from_shared(format!("https://{addr}"))?
        .connect_timeout(Duration::from_secs(3))
        .tls_config(tls)?
        .connect()
        .await
}

fn raft_request(id: Option<&str>) -> tonic::Request<RaftRequest> {
    let mut req =
        tonic::Request::new(RaftRequest { group: 0, target: 1, payload: vec![1, 2, 3].into() });
    if let Some(id) = id {
        req.metadata_mut().insert(ebb_raft::transport::CLUSTER_ID_HEADER, id.parse().expect("id"));
    }
    // Sent as a node of this build does (see `versions_are_refused_below_the_clusters`).
    let version =
        format!("{};{}", ebb_node::VERSION, ebb_node::cluster::version::VersionRange::BUILD);
    req.metadata_mut().insert(ebb_raft::transport::VERSION_HEADER, version.parse().expect("v"));
    req
}

/// What a Vote (with the cluster id `id` when given) gets from the node at `addr`.
async fn vote(ch: tonic::transport::Channel, id: Option<&str>) -> Result<(), tonic::Status> {
    RaftClient::new(ch).vote(raft_request(id)).await.map(|_| ())
}

/// What an AppendEntries gets.
async fn append(ch: tonic::transport::Channel, id: Option<&str>) -> Result<(), tonic::Status> {
    RaftClient::new(ch).append_entries(raft_request(id)).await.map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_port_answers_only_members_of_this_cluster() {
    let certs = tempfile::tempdir().expect("tempdir");
    let (ca, other) = (certs.path().join("ca"), certs.path().join("other"));
    make_ca(&ca, 30).expect("ca");
    make_ca(&other, 30).expect("ca");
    for n in ["n1", "n2", "intruder"] {
        issue(&ca, n, &["127.0.0.1".into()], 30).expect("issue");
    }
    issue(&other, "stranger", &["127.0.0.1".into()], 30).expect("issue");
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().expect("tempdir")).collect();
    let names: Vec<(std::path::PathBuf, &str)> =
        dirs.iter().map(|d| d.path().to_path_buf()).zip(["n1", "n2"]).collect();
    let ca_dir = ca.clone();
    let servers = start_cluster(&dirs, |d| {
        let name = names.iter().find(|(p, _)| p == d).map(|(_, n)| *n).expect("dir");
        Config {
            replication: 2,
            shards: 2,
            cluster_tls: Some(ClusterFiles {
                ca: ca_dir.join("ca.crt"),
                node: files(&ca_dir, name),
            }),
            ..loopback(d)
        }
    })
    .await;
    // The nodes found each other over mutual TLS and serve SQL together.
    let http = servers[1].http_addr;
    tokio::task::spawn_blocking(move || {
        let h = crate::common::Http::new(http);
        until(60, "both nodes are active", || {
            h.sql("SELECT count(*) AS c FROM system.nodes WHERE state = 'active'").1.contains("2")
        });
        let (deadline, mut last) = (std::time::Instant::now() + Duration::from_secs(60), None);
        while last.as_ref().is_none_or(|(s, _)| *s != 204) {
            assert!(std::time::Instant::now() < deadline, "no write taken: {last:?}");
            last = Some(h.post("/write?db=public", "m,host=a v=1 1700000000000000000\n"));
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(h.count("SELECT count(*) AS c FROM m"), 1);
    })
    .await
    .expect("cluster works");

    let addr = servers[0].grpc_addr.to_string();
    let ca_crt = ca.join("ca.crt");
    let id = std::fs::read_to_string(dirs[0].path().join("cluster_id")).expect("cluster id");
    assert_eq!(id.len(), 32, "{id}");
    // Without TLS, or without a client certificate, or with one another CA signed: no answer.
    let join = JoinRequest { grpc_addr: "127.0.0.1:1".into(), ..Default::default() };
    if let Ok(ch) = channel(&addr, None, None).await {
        assert!(ClusterClient::new(ch.clone()).join(join.clone()).await.is_err());
        assert!(vote(ch.clone(), Some(&id)).await.is_err());
        assert!(append(ch, Some(&id)).await.is_err());
    }
    for identity in [None, Some(files(&other, "stranger"))] {
        match channel(&addr, Some(&ca_crt), identity.as_ref()).await {
            Err(_) => {}
            Ok(ch) => {
                let j = ClusterClient::new(ch.clone()).join(join.clone()).await;
                assert!(j.is_err(), "Join without a member certificate: {j:?}");
                assert!(vote(ch.clone(), Some(&id)).await.is_err(), "Vote without a certificate");
                assert!(append(ch, Some(&id)).await.is_err(), "Append without a certificate");
            }
        }
    }
    // A member certificate without the cluster id is refused too.
    let ch = channel(&addr, Some(&ca_crt), Some(&files(&ca, "intruder"))).await.expect("mTLS");
    let refused = vote(ch.clone(), None).await.expect_err("no cluster id");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    let refused = vote(ch.clone(), Some("0123")).await.expect_err("another cluster's id");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    let refused = append(ch.clone(), None).await.expect_err("no cluster id");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    // With the id but without a version (release 0.1.0) in a cluster this build created (at
    // cluster version 2): refused, saying why.
    let mut legacy = raft_request(Some(&id));
    legacy.metadata_mut().remove(ebb_raft::transport::VERSION_HEADER);
    let refused = RaftClient::new(ch.clone()).vote(legacy).await.expect_err("no version");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    assert!(refused.message().contains("cluster versions 1-1"), "{refused:?}");
    // With both, the request reaches Raft (which rejects this garbage message for itself).
    if let Err(s) = vote(ch, Some(&id)).await {
        assert_ne!(s.code(), tonic::Code::PermissionDenied, "{s:?}");
    }
    for s in servers {
        s.shutdown().await.expect("shutdown");
    }
}
