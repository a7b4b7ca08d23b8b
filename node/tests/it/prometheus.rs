//! The real Prometheus server (Debian's `prometheus`) against EbbDB, on one node and on a
//! three-node cluster: one Prometheus scrapes EbbDB's own `/metrics` and a target serving a
//! fixed exposition, and remote-writes to EbbDB; the samples are checked through SQL. A second
//! Prometheus, with no scrapes and no data of its own, answers PromQL through remote read from
//! EbbDB. When the fixed target goes away, the first writes staleness markers, and the second
//! then finds the series ended, as Prometheus' own storage would answer.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::common::{loopback, start_cluster, until, Http};
use ebb_node::config::{Config, Secret};
use ebb_node::prom::encode;
use ebb_node::prom::proto::{
    Label, LabelMatcher, Query, ReadRequest, Sample, TimeSeries, WriteRequest,
};
use ebb_node::server::Server;

/// What the fixed target serves: two series of a gauge (one label value with a space, one
/// series without the label), and a NaN EbbDB does not store.
const EXPOSITION: &str = "# TYPE ebb_test_temperature gauge\n\
    ebb_test_temperature{room=\"kitchen\",building=\"a b\"} 21.5\n\
    ebb_test_temperature{room=\"hall\"} -3.25\n\
    # TYPE ebb_test_nan gauge\n\
    ebb_test_nan NaN\n";

/// An HTTP target serving [`EXPOSITION`] until stopped.
struct Target {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Target {
    fn start() -> Target {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("addr");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                let Ok((mut conn, _)) = listener.accept() else {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    continue;
                };
                let _ = conn.set_nonblocking(false);
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf);
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{EXPOSITION}",
                    EXPOSITION.len()
                );
            }
        });
        Target { addr, stop, thread: Some(thread) }
    }

    /// Stops serving: the port refuses connections from then on.
    fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A running `prometheus` process, killed when dropped.
struct Prometheus {
    child: Child,
    api: Http,
    _dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

impl Prometheus {
    fn start(config: &str) -> Prometheus {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("prometheus.yml");
        std::fs::write(&file, config).expect("config");
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("log")).expect("log");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", file.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("the prometheus binary must be installed (Debian package prometheus)");
        let api = Http::new(SocketAddr::from(([127, 0, 0, 1], port)));
        let p = Prometheus { child, api, _dir: dir };
        until(60, "prometheus ready", || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
                && p.api.get("/-/ready").0 == 200
        });
        p
    }

    /// An instant PromQL query's result vector.
    fn query(&self, promql: &str) -> Vec<serde_json::Value> {
        let q: String = url_encode(promql);
        let (status, body) = self.api.get(&format!("/api/v1/query?query={q}"));
        assert_eq!(status, 200, "{promql}: {body}\n{}", self.log());
        let v: serde_json::Value = serde_json::from_str(&body).expect("json");
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("log")).unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Runs the scenario with remote write to `writer` and remote read from `reader`.
fn scenario(writer: SocketAddr, reader: SocketAddr) {
    let mut target = Target::start();
    let scraper = Prometheus::start(&format!(
        "global: {{scrape_interval: 1s}}\n\
         scrape_configs:\n\
         - job_name: ebb\n  static_configs: [{{targets: ['{writer}']}}]\n\
         - job_name: static\n  static_configs: [{{targets: ['{}']}}]\n\
         remote_write:\n\
         - url: http://{writer}/api/v1/write?db=prom\n  \
           queue_config: {{batch_send_deadline: 500ms, min_backoff: 100ms, max_backoff: 1s}}\n",
        target.addr
    ));
    let reader_prom = Prometheus::start(&format!(
        "global: {{scrape_interval: 1m}}\n\
         remote_read:\n\
         - url: http://{reader}/api/v1/read?db=prom\n  read_recent: true\n"
    ));
    let ebb = Http::new(reader);
    let rows = |sql: &str| -> Vec<serde_json::Value> {
        let (status, body) = ebb.post("/v1/sql?db=prom", sql);
        if status != 200 {
            return Vec::new();
        }
        serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
    };

    // The fixed target's samples, exactly, through SQL.
    until(60, "samples of the fixed target in EbbDB", || {
        rows("SELECT DISTINCT room FROM ebb_test_temperature WHERE value IS NOT NULL").len() == 2
    });
    let latest = rows(
        "SELECT room, building, job, value FROM ebb_test_temperature \
         WHERE value IS NOT NULL ORDER BY time DESC, room LIMIT 2",
    );
    let by_room = |room: &str| {
        latest.iter().find(|r| r["room"] == room).cloned().unwrap_or_else(|| panic!("{latest:?}"))
    };
    assert_eq!(by_room("kitchen")["value"], 21.5);
    assert_eq!(by_room("kitchen")["building"], "a b");
    assert_eq!(by_room("kitchen")["job"], "static");
    assert_eq!(by_room("hall")["value"], -3.25);
    assert!(by_room("hall").get("building").is_none_or(|b| b.is_null()), "{latest:?}");
    // EbbDB's own metrics, scraped and written back into it.
    until(30, "EbbDB's own metrics in EbbDB", || {
        !rows("SELECT value FROM ebb_write_requests_total WHERE job = 'ebb' AND value > 0")
            .is_empty()
    });
    // The NaN gauge is not stored, and is counted.
    assert!(rows("SELECT count(*) AS c FROM ebb_test_nan WHERE value IS NOT NULL")
        .first()
        .is_none_or(|r| r["c"] == 0));
    until(30, "skipped NaN samples counted", || {
        Http::new(writer).metric("ebb_prometheus_samples_skipped_total") > 0.0
    });

    // PromQL through remote read, from a Prometheus with no data of its own.
    until(30, "PromQL over remote read", || reader_prom.query("ebb_test_temperature").len() == 2);
    let kitchen = reader_prom.query("ebb_test_temperature{room=\"kitchen\"}");
    assert_eq!(kitchen.len(), 1, "{kitchen:?}");
    assert_eq!(kitchen[0]["value"][1], "21.5");
    assert_eq!(kitchen[0]["metric"]["building"], "a b");
    assert_eq!(kitchen[0]["metric"]["job"], "static");
    let hall = reader_prom.query("ebb_test_temperature{room=~\"h.*\", building=\"\"}");
    assert_eq!(hall.len(), 1, "{hall:?}");
    assert_eq!(hall[0]["value"][1], "-3.25");
    assert!(reader_prom.query("ebb_test_temperature{room=~\"h\"}").is_empty(), "anchored");
    let up = reader_prom.query("sum by (job) (up{job=~\"ebb|static\"})");
    assert_eq!(up.len(), 2, "{up:?}");
    // A rate needs two samples in its window: one scrape a second.
    until(30, "a rate over remote read", || {
        reader_prom.query("rate(ebb_write_requests_total{job=\"ebb\"}[10s]) > 0").len() == 1
    });

    // The fixed target goes away: its series get staleness markers, stored as `stale`, and
    // PromQL over remote read sees the series end (without the markers it would go on
    // returning the last value for five minutes).
    target.stop();
    until(60, "staleness markers in EbbDB", || {
        rows("SELECT DISTINCT room FROM ebb_test_temperature WHERE stale").len() == 2
    });
    let marker = rows("SELECT value, stale FROM ebb_test_temperature WHERE stale LIMIT 1");
    assert!(marker[0].get("value").is_none_or(|v| v.is_null()), "{marker:?}");
    until(30, "the series ended in PromQL", || {
        reader_prom.query("ebb_test_temperature").is_empty()
    });
    until(30, "the target down in PromQL", || {
        reader_prom.query("up{job=\"static\"} == 0").len() == 1
    });
    drop(scraper);
}

/// Remote write and read bodies that are not what they claim are refused with 400, and the
/// server goes on.
fn bad_bodies(addr: SocketAddr) {
    let http = Http::new(addr);
    for path in ["/api/v1/write?db=prom", "/api/v1/read?db=prom"] {
        let (status, body) = http.post_with(path, b"definitely not snappy", &[]);
        assert_eq!(status, 400, "{path}: {body}");
        // A snappy header claiming 4 GiB, refused before anything is allocated.
        let (status, body) = http.post_with(path, &[0xff, 0xff, 0xff, 0xff, 0x0f, 0x00], &[]);
        assert_eq!(status, 400, "{path}: {body}");
    }
    let (status, body) = http.post_with("/api/v1/write", b"", &[]);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("?db="), "{body}");
    // Requests within the size limit that would cost far more than they weigh.
    let queries = (0..65).map(|_| Query::default()).collect();
    let many = encode(&ReadRequest { queries, accepted_response_types: vec![] }).expect("encode");
    let (status, body) = http.post_with("/api/v1/read?db=prom", &many, &[]);
    assert_eq!(status, 400, "65 queries: {body}");
    let odd = LabelMatcher { r#type: 9, name: "job".into(), value: "x".into() };
    let q = Query { matchers: vec![odd], ..Query::default() };
    let odd =
        encode(&ReadRequest { queries: vec![q], accepted_response_types: vec![] }).expect("encode");
    let (status, body) = http.post_with("/api/v1/read?db=prom", &odd, &[]);
    assert_eq!(status, 400, "unknown matcher type: {body}");
    // One series of 1 KiB of labels and 300,000 samples: 600 KB of protobuf, 300 MB of rows.
    let long = TimeSeries {
        labels: vec![
            Label { name: "__name__".into(), value: "m".into() },
            Label { name: "l".into(), value: "x".repeat(1024) },
        ],
        samples: vec![Sample::default(); 300_000],
    };
    let long = encode(&WriteRequest { timeseries: vec![long], metadata: vec![] }).expect("encode");
    let (status, body) = http.post_with("/api/v1/write?db=prom", &long, &[]);
    assert_eq!(status, 413, "{body}");
    assert_eq!(http.get("/health").0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prometheus_remote_write_and_read_on_one_node() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(&loopback(dir.path())).await.expect("start");
    let addr = server.http_addr;
    tokio::task::spawn_blocking(move || {
        bad_bodies(addr);
        scenario(addr, addr);
    })
    .await
    .expect("scenario");
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prometheus_remote_write_and_read_on_a_cluster() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("tempdir")).collect();
    let config = |d: &Path| Config { shards: 4, replication: 2, ..loopback(d) };
    let servers = start_cluster(&dirs, config).await;
    let (writer, reader) = (servers[0].http_addr, servers[2].http_addr);
    tokio::task::spawn_blocking(move || {
        for a in [writer, reader] {
            until(60, "the cluster ready", || Http::new(a).get("/ready").0 == 200);
        }
        scenario(writer, reader)
    })
    .await
    .expect("scenario");
    for s in servers {
        s.shutdown().await.expect("shutdown");
    }
}

/// With users, remote write needs WRITE on the database, checked before the body is decoded,
/// and remote read needs READ.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prometheus_endpoints_go_through_access_control() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = Config { admin_password: Some(Secret("prom admin".into())), ..loopback(dir.path()) };
    let server = Server::start(&cfg).await.expect("start");
    let addr = server.http_addr;
    tokio::task::spawn_blocking(move || {
        let http = Http::new(addr);
        let basic = |user: &str, pw: &str| {
            let b64 = base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                format!("{user}:{pw}"),
            );
            format!("Basic {b64}")
        };
        let admin = basic("admin", "prom admin");
        for sql in ["CREATE USER reader WITH PASSWORD 'r'", "GRANT READ ON DATABASE prom TO reader"]
        {
            let (status, body) =
                http.post_with("/v1/sql?db=prom", sql.as_bytes(), &[("Authorization", &admin)]);
            assert_eq!(status, 200, "{sql}: {body}");
        }
        let reader = basic("reader", "r");
        let series = TimeSeries {
            labels: vec![Label { name: "__name__".into(), value: "up".into() }],
            samples: vec![Sample { value: 1.0, timestamp: 1_700_000_000_000 }],
        };
        let write =
            encode(&WriteRequest { timeseries: vec![series], metadata: vec![] }).expect("encode");
        // No credentials: 401. A reader, even with a body that is not snappy: 403.
        assert_eq!(http.post_with("/api/v1/write?db=prom", &write, &[]).0, 401);
        let garbage =
            http.post_with("/api/v1/write?db=prom", b"garbage", &[("Authorization", &reader)]);
        assert_eq!(garbage.0, 403, "{}", garbage.1);
        let (status, body) =
            http.post_with("/api/v1/write?db=prom", &write, &[("Authorization", &admin)]);
        assert_eq!(status, 204, "{body}");
        let read = encode(&ReadRequest {
            queries: vec![Query {
                start_timestamp_ms: 1_699_999_000_000,
                end_timestamp_ms: 1_700_001_000_000,
                matchers: vec![LabelMatcher {
                    r#type: 0,
                    name: "__name__".into(),
                    value: "up".into(),
                }],
                hints: None,
            }],
            accepted_response_types: vec![],
        })
        .expect("encode");
        assert_eq!(http.post_with("/api/v1/read?db=prom", &read, &[]).0, 401);
        let (status, _) =
            http.post_with("/api/v1/read?db=prom", &read, &[("Authorization", &reader)]);
        assert_eq!(status, 200);
    })
    .await
    .expect("checks");
    server.shutdown().await.expect("shutdown");
}
