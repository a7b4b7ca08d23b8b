//! A cluster of `ebb server` processes on loopback for `ebb-bench cluster`: start, add a node,
//! run SQL, read metrics and the shard map.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::peers::{ebb_binary, free_port};
use crate::tsbs::agent;

/// One node process; killed when dropped.
pub struct Node {
    /// Its data directory.
    pub dir: PathBuf,
    /// Base URL of its HTTP API.
    pub url: String,
    /// Its gRPC address.
    pub grpc: String,
    child: Child,
}

impl Node {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A shard as `system.shards` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardRow {
    /// Shard id.
    pub shard: u64,
    /// Nodes holding a replica.
    pub replicas: Vec<u64>,
    /// Whether a move is in progress.
    pub moving: bool,
}

/// Settings every node of a cluster starts with.
#[derive(Debug, Clone, Copy)]
pub struct ClusterSettings {
    /// Shards of the cluster.
    pub shards: u32,
    /// Replicas per shard.
    pub replication: u32,
    /// Raft log entries between snapshots.
    pub snapshot_every: u64,
    /// How fast each node sends replicas it moves.
    pub move_rate: MoveRate,
}

/// The `--move-rate` nodes start with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveRate {
    /// The server's default.
    Default,
    /// Bytes a second.
    Limit(u64),
    /// No limit.
    Unlimited,
}

/// Nodes started in order; node `i` (0-based) is the `i + 1`-th to join.
pub struct Cluster {
    /// The nodes.
    pub nodes: Vec<Node>,
    dir: PathBuf,
    settings: ClusterSettings,
    /// The `ebb` binary nodes run.
    bin: PathBuf,
}

/// Splits one CSV record (fields may be double-quoted, with `""` for a quote).
fn csv_fields(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out
}

impl Cluster {
    /// Starts `n` nodes under `dir`: the first creates the cluster, the others join it. Returns
    /// once every shard has `min(replication, n)` replicas and no move is in progress.
    pub fn start(dir: &Path, n: usize, settings: ClusterSettings) -> Result<Cluster, String> {
        Self::start_with(dir, n, settings, None)
    }

    /// [`Cluster::start`] with another `ebb` binary (an earlier build, to compare against).
    pub fn start_with(
        dir: &Path,
        n: usize,
        settings: ClusterSettings,
        bin: Option<&Path>,
    ) -> Result<Cluster, String> {
        let bin = match bin {
            Some(b) => b.to_path_buf(),
            None => ebb_binary()?,
        };
        Self::start_in(dir, n, settings, bin, |_| Ok(None))
    }

    /// [`Cluster::start_with`], node `i` (0-based) started inside the cgroup `cgroup(i)` names
    /// (a directory with a `cgroup.procs`), if any.
    pub fn start_in(
        dir: &Path,
        n: usize,
        settings: ClusterSettings,
        bin: PathBuf,
        cgroup: impl Fn(usize) -> Result<Option<PathBuf>, String>,
    ) -> Result<Cluster, String> {
        let mut c = Cluster { nodes: Vec::new(), dir: dir.to_path_buf(), settings, bin };
        for i in 0..n {
            c.add_in(cgroup(i)?.as_deref())?;
        }
        let want = (settings.replication as usize).min(n);
        c.wait_until(Duration::from_secs(120), "replicas placed", |rows| {
            rows.len() == settings.shards as usize
                && rows.iter().all(|r| r.replicas.len() == want && !r.moving)
        })?;
        Ok(c)
    }

    /// The join token file every node is given (the first registers it), for binaries that
    /// take one (a baseline build from before join tokens does not).
    fn join_token_file(&self) -> Result<Option<PathBuf>, String> {
        let help = Command::new(&self.bin)
            .args(["server", "--help"])
            .output()
            .map_err(|e| format!("cannot run ebb: {e}"))?;
        if !String::from_utf8_lossy(&help.stdout).contains("--join-token-file") {
            return Ok(None);
        }
        let path = self.dir.join("join.token");
        if !path.exists() {
            std::fs::write(&path, "YmVuY2gtY2x1c3Rlci1qb2luLXRva2VuLTAxMjM0NTY3ODlhYg")
                .map_err(|e| e.to_string())?;
        }
        Ok(Some(path))
    }

    /// Starts one more node, joining through the first; returns once it serves HTTP.
    pub fn add(&mut self) -> Result<(), String> {
        self.add_in(None)
    }

    /// [`Cluster::add`], the node's process started inside `cgroup` (a cgroup directory), so
    /// a CPU limit there holds from its first instruction, as a container's does: the runtime
    /// sizes its thread pools from it.
    pub fn add_in(&mut self, cgroup: Option<&Path>) -> Result<(), String> {
        let i = self.nodes.len() + 1;
        let dir = self.dir.join(format!("n{i}"));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let (http, grpc) = (free_port()?, free_port()?);
        let log =
            std::fs::File::create(self.dir.join(format!("n{i}.log"))).map_err(|e| e.to_string())?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        let s = self.settings;
        let mut cmd = match cgroup {
            None => Command::new(&self.bin),
            Some(cg) => {
                // The shell joins the cgroup, then becomes the server (same process id).
                let mut c = Command::new("sh");
                c.args(["-c", r#"echo $$ > "$0/cgroup.procs" && exec "$@""#])
                    .arg(cg)
                    .arg(&self.bin);
                c
            }
        };
        cmd.args(["server", "--data-dir"])
            .arg(&dir)
            .args(["--http-addr", &format!("127.0.0.1:{http}")])
            .args(["--grpc-addr", &format!("127.0.0.1:{grpc}")])
            .args(["--pg-addr", &format!("127.0.0.1:{}", free_port()?)])
            .args(["--flight-addr", &format!("127.0.0.1:{}", free_port()?)])
            .args(["--shards", &s.shards.to_string()])
            .args(["--replication", &s.replication.to_string()])
            .args(["--raft-snapshot-every", &s.snapshot_every.to_string()])
            .env("EBB_LOG", std::env::var("EBB_BENCH_NODE_LOG").unwrap_or_else(|_| "warn".into()));
        match s.move_rate {
            MoveRate::Default => &mut cmd,
            MoveRate::Limit(b) => cmd.args(["--move-rate", &b.to_string()]),
            MoveRate::Unlimited => cmd.args(["--move-rate", "none"]),
        };
        match self.nodes.first() {
            None => cmd.arg("--cluster"),
            Some(first) => cmd.args(["--join", &first.grpc]),
        };
        if let Some(token) = self.join_token_file()? {
            cmd.arg("--join-token-file").arg(token);
        }
        let child = cmd
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2))
            .spawn()
            .map_err(|e| format!("cannot start ebb: {e}"))?;
        let node = Node {
            dir,
            url: format!("http://127.0.0.1:{http}"),
            grpc: format!("127.0.0.1:{grpc}"),
            child,
        };
        let start = Instant::now();
        loop {
            if let Ok(r) = agent().get(&format!("{}/health", node.url)).call() {
                if r.status().is_success() {
                    break;
                }
            }
            if start.elapsed() > Duration::from_secs(60) {
                return Err(format!(
                    "node {i} did not come up; see {}/n{i}.log",
                    self.dir.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.nodes.push(node);
        Ok(())
    }

    /// Base URLs of every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.url.clone()).collect()
    }

    /// Runs `sql` on node `i` against database `bench`; the CSV answer without its header.
    pub fn sql(&self, i: usize, sql: &str) -> Result<Vec<Vec<String>>, String> {
        Ok(self.sql_with_header(i, sql)?.1)
    }

    /// Like [`Cluster::sql`], with the column names.
    pub fn sql_with_header(
        &self,
        i: usize,
        sql: &str,
    ) -> Result<(Vec<String>, Vec<Vec<String>>), String> {
        let mut r = agent()
            .post(&format!("{}/v1/sql", self.nodes[i].url))
            .query("db", "bench")
            .header("Accept", "text/csv")
            .send(sql)
            .map_err(|e| e.to_string())?;
        let body = r.body_mut().read_to_string().map_err(|e| e.to_string())?;
        if !r.status().is_success() {
            return Err(format!("{sql:?} failed: {} {body}", r.status()));
        }
        let mut lines = body.lines().filter(|l| !l.is_empty());
        let header = lines.next().map(csv_fields).unwrap_or_default();
        Ok((header, lines.map(csv_fields).collect()))
    }

    /// The shard map as node 0 sees it.
    pub fn shards(&self) -> Result<Vec<ShardRow>, String> {
        let rows =
            self.sql(0, "SELECT shard, replicas, moving FROM system.shards ORDER BY shard")?;
        rows.iter()
            .map(|f| {
                let bad = || format!("unexpected system.shards row {f:?}");
                if f.len() != 3 {
                    return Err(bad());
                }
                Ok(ShardRow {
                    shard: f[0].parse().map_err(|_| bad())?,
                    replicas: f[1]
                        .split(',')
                        .filter(|s| !s.is_empty())
                        .map(|s| s.trim().parse().map_err(|_| bad()))
                        .collect::<Result<_, _>>()?,
                    moving: f[2] == "true",
                })
            })
            .collect()
    }

    /// Polls the shard map every 50 ms until `done` holds for it.
    pub fn wait_until(
        &self,
        timeout: Duration,
        what: &str,
        mut done: impl FnMut(&[ShardRow]) -> bool,
    ) -> Result<Vec<ShardRow>, String> {
        let start = Instant::now();
        let mut last = Err("no answer".to_string());
        while start.elapsed() < timeout {
            last = self.shards();
            if let Ok(rows) = &last {
                if done(rows) {
                    return last;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!("{what}: not reached within {timeout:?}; last shard map: {last:?}"))
    }

    /// Value of metric `name` (with its labels, as in `ebb_last_seq{shard="1"}`) on node `i`.
    pub fn metric(&self, i: usize, name: &str) -> Result<u64, String> {
        self.try_metric(i, name)?.ok_or_else(|| format!("node {} exports no metric {name}", i + 1))
    }

    /// Like [`Cluster::metric`], `None` if the node does not export it.
    pub fn try_metric(&self, i: usize, name: &str) -> Result<Option<u64>, String> {
        let mut r = agent()
            .get(&format!("{}/metrics", self.nodes[i].url))
            .call()
            .map_err(|e| e.to_string())?;
        let body = r.body_mut().read_to_string().map_err(|e| e.to_string())?;
        Ok(body.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_split_quotes() {
        assert_eq!(csv_fields("1,\"1,2,3\",false"), vec!["1", "1,2,3", "false"]);
        assert_eq!(csv_fields("\"a\"\"b\","), vec!["a\"b", ""]);
    }
}
