//! One `ebb server` run by a benchmark on loopback: started (plain, or secured as the README
//! tells users to: an admin, a token, HTTPS), fed line protocol, queried; killed when dropped.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::peers::{ebb_binary, free_port};

/// A running `ebb server`; killed when dropped.
pub(crate) struct Server {
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

/// Runs `bin` with `args`: its standard output, or its standard error as the error.
pub(crate) fn run(bin: &Path, args: &[&str]) -> Result<String, String> {
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
    /// Starts a server in `dir` with `extra` flags; `secured` as the README recommends.
    pub(crate) fn start(dir: &Path, secured: bool, extra: &[&str]) -> Result<Server, String> {
        Server::start_bin(&ebb_binary()?, dir, secured, extra)
    }

    /// [`Server::start`] with the `ebb` binary `bin` (another build's, for a baseline).
    pub(crate) fn start_bin(
        bin: &Path,
        dir: &Path,
        secured: bool,
        extra: &[&str],
    ) -> Result<Server, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let port = free_port()?;
        let mut cmd = Command::new(bin);
        cmd.args(["server", "--data-dir"])
            .arg(dir.join("data"))
            .args(["--http-addr", &format!("127.0.0.1:{port}")])
            .args(["--pg-addr", &format!("127.0.0.1:{}", free_port()?)])
            .args(["--flight-addr", &format!("127.0.0.1:{}", free_port()?)])
            .args(["--grpc-addr", &format!("127.0.0.1:{}", free_port()?)])
            .args(extra)
            // EBB_BENCH_SERVER_LOG: the servers' log filter (their logs go to server.log).
            .env(
                "EBB_LOG",
                std::env::var("EBB_BENCH_SERVER_LOG").unwrap_or_else(|_| "warn".into()),
            );
        let mut ca = None;
        if secured {
            let certs = dir.join("certs");
            let c = certs.to_string_lossy().into_owned();
            run(bin, &["cert", "ca", "--dir", &c])?;
            run(bin, &["cert", "issue", "node", "--dir", &c, "--host", "127.0.0.1"])?;
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

    /// POSTs `body` to `path` (an admin endpoint, say).
    pub(crate) fn post_path(&self, path: &str, body: &[u8]) -> Result<String, String> {
        self.post(&self.agent, path, body)
    }

    pub(crate) fn sql(&self, q: &str) -> Result<String, String> {
        self.post(&self.agent, "/v1/sql?db=bench", q.as_bytes())
    }

    /// Sends every batch with `clients` connections; rows/s.
    pub(crate) fn ingest(
        &self,
        batches: &[String],
        rows: usize,
        clients: usize,
    ) -> Result<f64, String> {
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
    pub(crate) fn latency(&self, q: &str, reps: usize, fresh: bool) -> Result<f64, String> {
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
