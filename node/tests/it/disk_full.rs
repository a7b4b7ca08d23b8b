//! A full data volume: `ebb server` on a 48 MiB tmpfs (mounted in a user and mount namespace
//! of its own) with a 16 MiB reserve is written to until it refuses with 507 and says why;
//! reads, and a `DELETE`, still work below the reserve; once the delete has freed the space
//! (its rows leave with the next flush), writes resume without a restart; nothing
//! acknowledged is lost.

#![allow(clippy::unwrap_used)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Server {
    child: Child,
    url: String,
    agent: ureq::Agent,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Server {
    fn start() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let vol = dir.path().join("vol");
        std::fs::create_dir(&vol).unwrap();
        let http = port();
        let child = Command::new("unshare")
            .args([
                "-Urm",
                "sh",
                "-c",
                "mount -t tmpfs -o size=48m tmpfs \"$1\" && shift && exec \"$@\"",
                "sh",
            ])
            .arg(&vol)
            .arg(env!("CARGO_BIN_EXE_ebb"))
            .args(["server", "--data-dir"])
            .arg(vol.join("data"))
            .args(["--http-addr", &format!("127.0.0.1:{http}")])
            .args(["--pg-addr", &format!("127.0.0.1:{}", port())])
            .args(["--flight-addr", &format!("127.0.0.1:{}", port())])
            .args(["--grpc-addr", &format!("127.0.0.1:{}", port())])
            .args(["--disk-reserve", "16MiB", "--delete-deadline", "5s"])
            .env("EBB_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("unshare (util-linux) must be installed to run this test");
        let agent: ureq::Agent =
            ureq::Agent::config_builder().http_status_as_error(false).build().into();
        let s = Server { child, url: format!("http://127.0.0.1:{http}"), agent, _dir: dir };
        let start = Instant::now();
        while s.get_status("/ready") != Some(200) {
            assert!(start.elapsed() < Duration::from_secs(30), "the server did not come up");
            std::thread::sleep(Duration::from_millis(100));
        }
        s
    }

    fn get_status(&self, path: &str) -> Option<u16> {
        self.agent.get(&format!("{}{path}", self.url)).call().ok().map(|r| r.status().as_u16())
    }

    fn post(&self, path: &str, body: &str) -> (u16, String) {
        let mut r = self.agent.post(&format!("{}{path}", self.url)).send(body).unwrap();
        (r.status().as_u16(), r.body_mut().read_to_string().unwrap_or_default())
    }

    fn count(&self) -> u64 {
        let (status, body) = self.post("/v1/sql?db=public", "SELECT count(*) AS n FROM cpu");
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v[0]["n"].as_u64().unwrap()
    }
}

/// 1000 rows of series `host` at minutes `from..from + 1000` of 2023-11-14, with a padded field.
fn batch(host: u32, from: u64) -> String {
    let pad = "p".repeat(60);
    (from..from + 1000)
        .map(|m| {
            let t = (1_699_920_000 + m * 60) * 1_000_000_000;
            format!("cpu,host=h{host} usage={}.5,note=\"{pad}\" {t}\n", m % 100)
        })
        .collect()
}

#[test]
fn below_the_reserve_writes_are_refused_until_a_delete_frees_space() {
    let s = Server::start();
    let mut acked = 0u64;
    let mut refusal = None;
    for i in 0..2000u64 {
        let (status, body) = s.post("/write?db=public", &batch((i % 50) as u32, (i / 50) * 1000));
        match status {
            204 => acked += 1000,
            507 => {
                refusal = Some(body);
                break;
            }
            other => panic!("write {i}: {other} {body}"),
        }
    }
    let refusal = refusal.expect("the volume never reached the reserve");
    assert!(refusal.contains("disk full") && refusal.contains("reserve"), "{refusal}");
    // The node says it is not ready, and why.
    let start = Instant::now();
    loop {
        let mut r = s.agent.get(&format!("{}/ready", s.url)).call().unwrap();
        let body = r.body_mut().read_to_string().unwrap_or_default();
        if r.status().as_u16() == 503 {
            assert!(body.contains("not ready: disk full"), "{body}");
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "/ready stayed ready: {body}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Below the reserve: reads work, writes are still refused, and nothing acknowledged is lost.
    assert_eq!(s.count(), acked);
    assert_eq!(s.post("/write?db=public", &batch(999, 0)).0, 507);
    // A delete runs below the reserve.
    let (status, body) = s.post("/v1/sql?db=public", "DELETE FROM cpu WHERE host <> 'h0'");
    assert_eq!(status, 200, "{body}");
    let kept = s.count();
    assert!(kept < acked / 10, "{kept} of {acked} rows left");
    // Its rows leave the disk within the deadline; then writes are accepted again.
    let start = Instant::now();
    loop {
        let (status, body) = s.post("/write?db=public", &batch(1000, 0));
        if status == 204 {
            break;
        }
        assert_eq!(status, 507, "{body}");
        assert!(start.elapsed() < Duration::from_secs(60), "space never came back: {body}");
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(s.count(), kept + 1000);
    let start = Instant::now();
    while s.get_status("/ready") != Some(200) {
        assert!(start.elapsed() < Duration::from_secs(5), "not ready again with space back");
        std::thread::sleep(Duration::from_millis(200));
    }
}
