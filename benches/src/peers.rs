//! Servers the ingest and query benchmarks run: EbbDB (`ebb server`), InfluxDB 1.x (`influxd`),
//! VictoriaMetrics and QuestDB (`java -m io.questdb/io.questdb.ServerMain`), each a child
//! process on loopback with its own temporary data directory.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::workload::WriteSync;

/// A server under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    /// EbbDB.
    Ebb,
    /// InfluxDB 1.x.
    Influx,
    /// VictoriaMetrics.
    Victoria,
    /// QuestDB (its jar from Maven Central, run with Java 17).
    QuestDb,
}

impl System {
    /// Name used in `RESULT` lines.
    pub fn name(self) -> &'static str {
        match self {
            System::Ebb => "ebb",
            System::Influx => "influxdb",
            System::Victoria => "victoriametrics",
            System::QuestDb => "questdb",
        }
    }
}

/// A running server; killed when dropped.
pub struct Running {
    /// Which.
    pub system: System,
    /// Base URL of its HTTP API.
    pub url: String,
    /// `host:port` of its PostgreSQL wire protocol listener, if it has one.
    pub pg: Option<String>,
    child: Child,
}

impl Running {
    /// Stops the server as its service manager would (SIGTERM: EbbDB flushes its memtables,
    /// the peers close their files) and waits up to `grace` for it to exit, then kills it.
    pub fn stop(mut self, grace: Duration) -> Result<(), String> {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status();
        if !sent.is_ok_and(|s| s.success()) {
            return Err(format!("cannot signal {} (pid {pid})", self.system.name()));
        }
        let start = Instant::now();
        while start.elapsed() < grace {
            if self.child.try_wait().map_err(|e| e.to_string())?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!("{} did not stop within {grace:?} of SIGTERM", self.system.name()))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free loopback port.
pub fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

/// The `ebb` binary next to this one (`cargo build --release -p ebb-node`).
pub fn ebb_binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let p = exe.with_file_name("ebb");
    if p.exists() {
        Ok(p)
    } else {
        Err(format!("{} not found: build it with `cargo build --release -p ebb-node`", p.display()))
    }
}

fn wait_http(url: &str, path: &str, ok: &[u16]) -> Result<(), String> {
    let agent: ureq::Agent =
        ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        if let Ok(r) = agent.get(&format!("{url}{path}")).call() {
            if ok.contains(&r.status().as_u16()) {
                return Ok(());
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!("{url} did not come up within 60 s"))
}

/// The QuestDB jar: `$EBB_QUESTDB_JAR`, else where
/// `mvn dependency:get -Dartifact=org.questdb:questdb:9.2.0` puts it.
pub fn questdb_jar() -> Result<PathBuf, String> {
    let p = match std::env::var_os("EBB_QUESTDB_JAR") {
        Some(p) => PathBuf::from(p),
        None => {
            let home = std::env::var_os("HOME").ok_or("HOME is not set")?;
            PathBuf::from(home).join(".m2/repository/org/questdb/questdb/9.2.0/questdb-9.2.0.jar")
        }
    };
    if p.exists() {
        Ok(p)
    } else {
        Err(format!(
            "{} not found: run `mvn dependency:get -Dartifact=org.questdb:questdb:9.2.0` \
             or set EBB_QUESTDB_JAR (see BENCHMARKS.md)",
            p.display()
        ))
    }
}

impl System {
    /// How `self` makes a write durable under `sync`, as the benchmarks print it: the setting
    /// [`start_build`] gives it, where it has one.
    pub fn durability(self, sync: WriteSync) -> &'static str {
        match (self, sync) {
            (System::Ebb, WriteSync::Always) => "--sync always (an fsync before the answer)",
            (System::Ebb, WriteSync::Off) => "--sync none (no fsync before the answer)",
            (System::Influx, WriteSync::Always) => {
                "wal-fsync-delay=0s (an fsync of the WAL before the answer)"
            }
            // A longer delay makes each write wait that long for a shared fsync: no setting of
            // InfluxDB 1.x answers before its WAL is synced.
            (System::Influx, WriteSync::Off) => {
                "wal-fsync-delay=0s (it has no setting that answers before an fsync)"
            }
            (System::QuestDb, WriteSync::Always) => "cairo.commit.mode=sync (an fsync per commit)",
            (System::QuestDb, WriteSync::Off) => "cairo.commit.mode=nosync",
            (System::Victoria, _) => {
                "no setting (buffers rows in memory and writes them to disk about every second)"
            }
        }
    }
}

/// Starts `system` with its data under `dir`, with its default durability.
pub fn start(system: System, dir: &Path) -> Result<Running, String> {
    start_build(system, None, dir, &[], WriteSync::Always)
}

/// Starts `system` with its data under `dir`, EbbDB from the binary `ebb` (an earlier build)
/// if given and with `ebb_args`; every system made as durable as `sync` says (see
/// [`System::durability`]).
pub fn start_build(
    system: System,
    ebb: Option<&Path>,
    dir: &Path,
    ebb_args: &[String],
    sync: WriteSync,
) -> Result<Running, String> {
    if ebb_args.iter().any(|a| a == "--sync" || a.starts_with("--sync=")) {
        return Err("give the durability with the benchmark's --sync, not in --ebb-args".into());
    }
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let port = free_port()?;
    let url = format!("http://127.0.0.1:{port}");
    let log = std::fs::File::create(dir.join("server.log")).map_err(|e| e.to_string())?;
    let log2 = log.try_clone().map_err(|e| e.to_string())?;
    let pg = match system {
        System::Ebb | System::QuestDb => Some(format!("127.0.0.1:{}", free_port()?)),
        _ => None,
    };
    let pg_addr = pg.clone().unwrap_or_default();
    let mut cmd = match system {
        System::Ebb => {
            let bin = match ebb {
                Some(bin) => bin.to_path_buf(),
                None => ebb_binary()?,
            };
            let mut c = Command::new(bin);
            c.args(["server", "--data-dir"])
                .arg(dir.join("data"))
                .args(["--http-addr", &format!("127.0.0.1:{port}")])
                .args(["--pg-addr", &pg_addr])
                .args(["--grpc-addr", &format!("127.0.0.1:{}", free_port()?)])
                .args([
                    "--sync",
                    match sync {
                        WriteSync::Always => "always",
                        WriteSync::Off => "none",
                    },
                ])
                .args(ebb_args)
                .env("EBB_LOG", "warn");
            c
        }
        System::Influx => {
            let conf = dir.join("influxdb.conf");
            let d = dir.display();
            let text = format!(
                "reporting-disabled = true\nbind-address = \"127.0.0.1:{}\"\n\
                 [meta]\n  dir = \"{d}/meta\"\n\
                 [data]\n  dir = \"{d}/data\"\n  wal-dir = \"{d}/wal\"\n  query-log-enabled = false\n\
                 \x20 wal-fsync-delay = \"0s\"\n\
                 [http]\n  bind-address = \"127.0.0.1:{port}\"\n  log-enabled = false\n  max-body-size = 0\n\
                 [monitor]\n  store-enabled = false\n\
                 [continuous_queries]\n  enabled = false\n",
                free_port()?
            );
            std::fs::write(&conf, text).map_err(|e| e.to_string())?;
            let mut c = Command::new("influxd");
            c.arg("-config").arg(&conf);
            c
        }
        System::Victoria => {
            let mut c = Command::new("victoria-metrics");
            c.arg(format!("-storageDataPath={}", dir.join("data").display()))
                .arg(format!("-httpListenAddr=127.0.0.1:{port}"))
                .arg("-loggerLevel=ERROR")
                .arg("-search.disableCache");
            c
        }
        System::QuestDb => {
            let root = dir.join("data");
            std::fs::create_dir_all(&root).map_err(|e| e.to_string())?;
            let mut c = Command::new("java");
            c.arg("-p")
                .arg(questdb_jar()?)
                .args(["-m", "io.questdb/io.questdb.ServerMain", "-d"])
                .arg(&root)
                .env("QDB_HTTP_BIND_TO", format!("127.0.0.1:{port}"))
                .env("QDB_PG_NET_BIND_TO", &pg_addr)
                .env("QDB_LINE_TCP_NET_BIND_TO", format!("127.0.0.1:{}", free_port()?))
                .env("QDB_HTTP_MIN_NET_BIND_TO", format!("127.0.0.1:{}", free_port()?))
                .env("QDB_LINE_UDP_ENABLED", "false")
                .env(
                    "QDB_CAIRO_COMMIT_MODE",
                    match sync {
                        WriteSync::Always => "sync",
                        WriteSync::Off => "nosync",
                    },
                )
                .env("QDB_TELEMETRY_ENABLED", "false");
            c
        }
    };
    let child = cmd.stdout(Stdio::from(log)).stderr(Stdio::from(log2)).spawn().map_err(|e| {
        format!("cannot start {}: {e} (install it: see BENCHMARKS.md)", system.name())
    })?;
    let running = Running { system, url: url.clone(), pg, child };
    match system {
        System::Ebb => wait_http(&url, "/ready", &[200])?,
        System::Influx => wait_http(&url, "/ping", &[204])?,
        System::Victoria => wait_http(&url, "/health", &[200])?,
        System::QuestDb => wait_http(&url, "/ping", &[204])?,
    }
    Ok(running)
}

/// Size of a directory tree in bytes.
pub fn dir_bytes(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else { return 0 };
    rd.flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}
