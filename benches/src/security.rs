//! `ebb-bench security`: what TLS and authentication cost. Two `ebb server`s on loopback, run
//! one after the other on the same data: one plain (no users, HTTP), one secured as the README
//! tells users to run it (an admin, a `WRITE`+`READ` token sent as `Authorization: Bearer`,
//! HTTPS with a certificate from `ebb cert`). Measured: line-protocol ingest over
//! keep-alive connections (rows/s) and a small query's latency (one host, one hour, by
//! minute; median of sequential runs), with a new TLS connection per query as a second figure.
//! `RESULT` lines name the secured server `ebb` and the plain one `plain`, so a ratio below 1
//! is the cost.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::peers::{ebb_binary, free_port};
use crate::report::{Better, Comparison};
use crate::tsbs::{generate, Dataset, START_S};

/// A running `ebb server`; killed when dropped.
struct Server {
    url: String,
    agent: ureq::Agent,
    /// Builds an agent of its own (a new connection pool).
    fresh: Box<dyn Fn() -> ureq::Agent + Send + Sync>,
    auth: Option<String>,
    child: std::process::Child,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run(bin: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new(bin).args(args).output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("ebb {args:?}: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn agent_for(ca: Option<&Path>) -> Result<ureq::Agent, String> {
    let mut cfg = ureq::Agent::config_builder().http_status_as_error(false);
    if let Some(ca) = ca {
        let pem = std::fs::read(ca).map_err(|e| e.to_string())?;
        let certs: Vec<_> = ureq::tls::parse_pem(&pem)
            .filter_map(|i| match i {
                Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
                _ => None,
            })
            .collect();
        let roots = ureq::tls::RootCerts::Specific(Arc::new(certs));
        cfg = cfg.tls_config(ureq::tls::TlsConfig::builder().root_certs(roots).build());
    }
    Ok(cfg.build().into())
}

impl Server {
    fn start(dir: &Path, secured: bool) -> Result<Server, String> {
        let bin = ebb_binary()?;
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let port = free_port()?;
        let mut cmd = Command::new(&bin);
        cmd.args(["server", "--data-dir"])
            .arg(dir.join("data"))
            .args(["--http-addr", &format!("127.0.0.1:{port}")])
            .args(["--pg-addr", &format!("127.0.0.1:{}", free_port()?)])
            .args(["--grpc-addr", &format!("127.0.0.1:{}", free_port()?)])
            .env("EBB_LOG", "warn");
        let mut ca = None;
        if secured {
            let certs = dir.join("certs");
            let c = certs.to_string_lossy().into_owned();
            run(&bin, &["cert", "ca", "--dir", &c])?;
            run(&bin, &["cert", "issue", "node", "--dir", &c, "--host", "127.0.0.1"])?;
            let pw = dir.join("admin.pw");
            std::fs::write(&pw, "bench admin password").map_err(|e| e.to_string())?;
            cmd.arg("--admin-password-file")
                .arg(&pw)
                .arg("--tls-cert")
                .arg(certs.join("node.crt"))
                .arg("--tls-key")
                .arg(certs.join("node.key"));
            ca = Some(certs.join("ca.crt"));
        }
        let log = std::fs::File::create(dir.join("server.log")).map_err(|e| e.to_string())?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        let child = cmd
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2))
            .spawn()
            .map_err(|e| e.to_string())?;
        let scheme = if secured { "https" } else { "http" };
        let ca2: Option<PathBuf> = ca.clone();
        let mut s = Server {
            url: format!("{scheme}://127.0.0.1:{port}"),
            agent: agent_for(ca.as_deref())?,
            fresh: Box::new(move || {
                agent_for(ca2.as_deref()).unwrap_or_else(|_| ureq::Agent::new_with_defaults())
            }),
            auth: None,
            child,
        };
        let start = Instant::now();
        while s.agent.get(&format!("{}/ready", s.url)).call().map(|r| r.status().as_u16()).ok()
            != Some(200)
        {
            if start.elapsed() > Duration::from_secs(60) {
                return Err(format!("{} did not come up", s.url));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if secured {
            // An application's token, as the README recommends.
            s.auth = Some("Basic YWRtaW46YmVuY2ggYWRtaW4gcGFzc3dvcmQ=".into());
            s.sql("CREATE USER app")?;
            s.sql("GRANT READ, WRITE ON DATABASE bench TO app")?;
            let out = s.sql("CREATE TOKEN FOR app")?;
            let token = out
                .split('"')
                .find(|t| t.starts_with("ebb_"))
                .ok_or_else(|| format!("no token in {out}"))?
                .to_string();
            s.auth = Some(format!("Bearer {token}"));
        }
        Ok(s)
    }

    fn post(&self, agent: &ureq::Agent, path: &str, body: &[u8]) -> Result<String, String> {
        let mut req = agent.post(&format!("{}{path}", self.url));
        if let Some(a) = &self.auth {
            req = req.header("Authorization", a);
        }
        let mut resp = req.send(body).map_err(|e| e.to_string())?;
        let text = resp.body_mut().read_to_string().map_err(|e| e.to_string())?;
        if !resp.status().is_success() {
            return Err(format!("{path}: {} {text}", resp.status()));
        }
        Ok(text)
    }

    fn sql(&self, q: &str) -> Result<String, String> {
        self.post(&self.agent, "/v1/sql?db=bench", q.as_bytes())
    }

    /// Sends every batch with `clients` connections; rows/s.
    fn ingest(&self, batches: &[String], rows: usize, clients: usize) -> Result<f64, String> {
        let next = AtomicUsize::new(0);
        let start = Instant::now();
        let res: Vec<Result<(), String>> = std::thread::scope(|sc| {
            let handles: Vec<_> = (0..clients)
                .map(|_| {
                    sc.spawn(|| {
                        let agent = (self.fresh)();
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(b) = batches.get(i) else { return Ok(()) };
                            self.post(&agent, "/write?db=bench", b.as_bytes())?;
                        }
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or(Err("panicked".into()))).collect()
        });
        res.into_iter().collect::<Result<Vec<()>, _>>()?;
        Ok(rows as f64 / start.elapsed().as_secs_f64())
    }

    /// Median milliseconds of `reps` runs of `q`, on kept-alive connections or (`fresh`) a
    /// new connection each.
    fn latency(&self, q: &str, reps: usize, fresh: bool) -> Result<f64, String> {
        self.sql(q)?;
        let mut times = Vec::with_capacity(reps);
        for _ in 0..reps {
            let agent = if fresh { (self.fresh)() } else { self.agent.clone() };
            let t = Instant::now();
            self.post(&agent, "/v1/sql?db=bench", q.as_bytes())?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        Ok(times[times.len() / 2])
    }
}

/// Runs the comparison `repeat` times (plain and secured alternate) and reports medians.
pub fn security(
    work: &Path,
    ds: Dataset,
    clients: usize,
    reps: usize,
    repeat: usize,
) -> Result<Vec<Comparison>, String> {
    let batches = generate(ds, 5000);
    let t0 = START_S * 1_000_000_000;
    let h1 = t0 + 3600 * 1_000_000_000;
    let q = format!(
        "SELECT date_bin(interval '1 minute', time, to_timestamp(0)) AS m, max(usage_user) \
         FROM cpu WHERE hostname = 'host_7' AND time >= to_timestamp_nanos({t0}) \
         AND time < to_timestamp_nanos({h1}) GROUP BY m ORDER BY m"
    );
    println!(
        "security {}: {} rows, {clients} clients; query median of {reps}; {repeat} rounds",
        ds.label(),
        ds.rows()
    );
    // [plain, secured] x [ingest, query kept alive, query on a new connection]
    let mut figures = [[Vec::new(), Vec::new(), Vec::new()], [Vec::new(), Vec::new(), Vec::new()]];
    for round in 0..repeat {
        for (i, secured) in [(0, false), (1, true)] {
            let dir = work.join(format!("security-{round}-{i}"));
            let _ = std::fs::remove_dir_all(&dir);
            let s = Server::start(&dir, secured)?;
            let rate = s.ingest(&batches, ds.rows(), clients)?;
            let kept = s.latency(&q, reps, false)?;
            let fresh = s.latency(&q, reps, true)?;
            let name = if secured { "TLS + token" } else { "plain" };
            println!(
                "  round {round} {name:<12} ingest {rate:>9.0} rows/s   query {kept:>6.2} ms \
                 (new connection {fresh:>6.2} ms)"
            );
            figures[i][0].push(rate);
            figures[i][1].push(kept);
            figures[i][2].push(fresh);
            drop(s);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    let median = |v: &Vec<f64>| {
        let mut v = v.clone();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let metrics = [
        ("ingest_rows_per_sec", Better::Higher),
        ("small_query_ms", Better::Lower),
        ("small_query_new_connection_ms", Better::Lower),
    ];
    Ok(metrics
        .iter()
        .enumerate()
        .map(|(m, (metric, better))| Comparison {
            bench: "security".into(),
            metric: (*metric).into(),
            params: vec![("dataset".into(), ds.label()), ("clients".into(), clients.to_string())],
            ebb: median(&figures[1][m]),
            baseline: "plain".into(),
            base: median(&figures[0][m]),
            better: *better,
        })
        .collect())
}
