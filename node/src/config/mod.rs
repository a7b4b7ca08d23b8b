//! Server configuration: defaults, overridden by a TOML file, by environment variables and by
//! command-line flags, in that order.
//!
//! ```toml
//! data_dir = "./ebb-data"
//! http_addr = "127.0.0.1:7080"
//! pg_addr = "127.0.0.1:7432"
//! grpc_addr = "127.0.0.1:7090"
//! flight_addr = "127.0.0.1:7091" # Arrow Flight SQL
//! delete_deadline = "24h"        # every delete physically gone within this
//! sync = "always"                # single node: fsync before acknowledging ("interval", "none")
//! sync_interval = "100ms"        # how often sync = "interval" fsyncs
//! disk_reserve = "2GiB"          # writes refused below this free space ("5%"; default: 5%, at most 2 GiB)
//! retention_check_interval = "60s"
//! max_body_bytes = 67108864      # largest accepted HTTP request body (after decompression)
//! log_format = "text"            # or "json"
//! # Cluster mode (any of these turns it on):
//! cluster = false                # create a new cluster with this node as its first member
//! join = "10.0.0.1:7090,10.0.0.2:7090"  # gRPC addresses of nodes of a cluster to join
//! advertise_grpc = "10.0.0.3:7090" # the gRPC address other nodes reach this one at
//! shards = 4                     # shards a new cluster starts with (they split as it grows)
//! replication = 3                # replicas per shard of a new cluster
//! raft_snapshot_every = 10000    # Raft log entries between snapshots of a shard
//! raft_heartbeat = "300ms"       # Raft heartbeats; elections after 5-10 missed
//! split_shard_bytes = "16GiB"    # a shard larger than this splits ("none": never for size)
//! split_shard_rows = 200000      # ... or one writing more rows a second, for a minute
//! move_rate = "64MiB"            # bytes a second a node sends moving replicas at
//! backup_rate = "100MiB"         # bytes a second a backup transfers at (default: "none")
//! memtable_budget = "512MiB"     # memtable memory all of a node's shard replicas share
//! node_name = "ebb-0"            # this node's name (a pod's name; default: none)
//! init_node = "ebb-0"            # the node that creates the cluster if no `join` seed answers
//! init_cluster = false           # disaster recovery: create a new cluster here without asking
//! default_retention = "30d"      # retention of tables created without one (default: none)
//! # Access control:
//! admin_password_file = "/run/secrets/ebb-admin"  # creates user `admin` on a server without users
//! insecure = false               # allow serving non-loopback addresses without any user
//! # Resource limits:
//! query_memory = "512MiB"       # memory one statement may hold (it spills or fails beyond)
//! server_memory = "2GiB"         # memory all running statements may hold together
//! statement_timeout = "300s"     # how long a statement may run ("none": no limit)
//! max_statements = 64            # requests running statements at once (more wait up to 30 s)
//! max_connections = 1024         # open connections per client port (HTTP, PostgreSQL)
//! max_sql_bytes = 4194304        # longest SQL text of one request
//! max_expression_depth = 500     # most operators chained into one SQL expression
//! max_list_items = 10000         # most items of one parenthesized SQL list (IN, arguments)
//! max_statements_per_request = 1000  # most SQL statements in one request
//! max_relations = 500            # most tables and subqueries one SQL statement names
//! max_nesting = 16               # most levels of parentheses one inside another in SQL
//! max_tags_per_line = 256        # most tags of one line-protocol line
//! max_columns_per_table = 1000   # most columns a table may have
//! max_series_per_request = 100000  # most new series one write request may create
//! # TLS (reloaded when the files change or on SIGHUP):
//! tls_cert = "/etc/ebb/tls/tls.crt"  # HTTPS and PostgreSQL TLS (then required on both)
//! tls_key = "/etc/ebb/tls/tls.key"
//! cluster_ca = "/etc/ebb/cluster/ca.crt"      # mutual TLS between nodes (gRPC): the CA,
//! cluster_cert = "/etc/ebb/cluster/tls.crt"   # this node's certificate signed by it,
//! cluster_key = "/etc/ebb/cluster/tls.key"    # and its key
//! ```
//!
//! The admin password can also come from `EBB_ADMIN_PASSWORD` (never from a flag, which other
//! users of the machine could read in the process list).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::error::Result;
use crate::tls::{CertFiles, ClusterFiles};
pub use parse::bytes;
use parse::{bad, boolean};

/// The default of [`Config::raft_heartbeat`].
/// (A shorter one fails over sooner; each heartbeat costs every shard's leader an RPC per
/// follower, and on a saturated node an AppendEntries that takes longer is sent again.)
pub const DEFAULT_RAFT_HEARTBEAT: Duration = Duration::from_millis(300);

pub mod durability;
mod env;
mod parse;
pub mod scaling;

pub use env::ENV_VARS;

/// Everything `ebb server` needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Keys of the configuration file this build does not know, ignored (see
    /// [`Overrides::ignored`]).
    pub ignored_keys: Vec<String>,
    /// Data directory.
    pub data_dir: PathBuf,
    /// HTTP listen address (line protocol, SQL, health, metrics).
    pub http_addr: SocketAddr,
    /// PostgreSQL wire protocol listen address.
    pub pg_addr: SocketAddr,
    /// gRPC listen address (node-to-node and admin).
    pub grpc_addr: SocketAddr,
    /// Arrow Flight SQL listen address (clients: ADBC, JDBC).
    pub flight_addr: SocketAddr,
    /// Deadline within which every delete is physically gone (`None`: no deadline).
    pub delete_deadline: Option<Duration>,
    /// Create a new cluster on this node if its data directory holds none, without asking the
    /// seeds (disaster recovery).
    pub init_cluster: bool,
    /// When a single node fsyncs its WAL (see [`durability`]; cluster mode always fsyncs the
    /// Raft log before an entry counts).
    pub sync: ebb_storage::SyncMode,
    /// Free space kept for deletes and compactions: writes that add data are refused below it.
    pub disk_reserve: durability::DiskReserve,
    /// How often retention purges run.
    pub retention_check_interval: Duration,
    /// Largest accepted request body, after decompression.
    pub max_body_bytes: usize,
    /// `text` or `json` logs.
    pub log_format: LogFormat,
    /// Run as a cluster node (also implied by `join` or a stored node id).
    pub cluster: bool,
    /// gRPC addresses of nodes of an existing cluster to join.
    pub join: Vec<String>,
    /// The gRPC address other nodes reach this one at (default: `grpc_addr`).
    pub advertise_grpc: Option<String>,
    /// Shards of a new cluster.
    pub shards: u32,
    /// Replicas per shard of a new cluster.
    pub replication: u32,
    /// When shards split by themselves and how fast replicas move.
    pub scaling: scaling::Scaling,
    /// Raft log entries between two snapshots of a shard (the log before a snapshot is purged,
    /// so a replica that falls further behind, or a new one, is sent the snapshot).
    pub raft_snapshot_every: u64,
    /// How often a shard's Raft leader sends heartbeats. A follower that hears nothing for 5
    /// to 10 of them calls an election, and a leader gives one AppendEntries this long.
    pub raft_heartbeat: Duration,
    /// This node's name (in Kubernetes, the pod's name).
    pub node_name: Option<String>,
    /// The node that creates the cluster when its data directory is new and no node of `join`
    /// answers; the others only join.
    pub init_node: Option<String>,
    /// Retention of tables created without one (`None`: kept until deleted).
    pub default_retention: Option<Duration>,
    /// The password user `admin` is created with when the server has no users.
    pub admin_password: Option<Secret>,
    /// A file holding the join token a cluster node shows when it joins (read when it joins);
    /// the node that creates a cluster registers it for the others.
    pub join_token_file: Option<PathBuf>,
    /// Serve addresses other machines reach without any user (everyone may do anything).
    pub insecure: bool,
    /// What statements may use (memory, time, the size and depth of their SQL).
    pub limits: ebb_query::front::Limits,
    /// What one write request may add (tags per line, columns per table, new series).
    pub write_limits: ebb_query::WriteLimits,
    /// Open connections per client port.
    pub max_connections: usize,
    /// TLS on the HTTP and PostgreSQL ports.
    pub tls: Option<CertFiles>,
    /// Mutual TLS on the gRPC port and towards other nodes.
    pub cluster_tls: Option<ClusterFiles>,
}

/// A secret setting: never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl Config {
    /// Whether this node is `init_node`.
    pub fn is_init_node(&self) -> bool {
        self.init_node.is_some() && self.init_node == self.node_name
    }

    /// True if the server runs as a cluster node.
    pub fn cluster_mode(&self) -> bool {
        self.cluster
            || self.init_cluster
            || !self.join.is_empty()
            || self.is_init_node()
            || self.data_dir.join(crate::cluster::NODE_ID_FILE).exists()
    }

    /// True if every address the server listens on is a loopback address.
    pub fn loopback_only(&self) -> bool {
        [self.http_addr, self.pg_addr, self.grpc_addr, self.flight_addr]
            .iter()
            .all(|a| a.ip().is_loopback())
    }

    /// The gRPC address other nodes reach this one at.
    pub fn advertised_grpc(&self) -> Result<String> {
        if let Some(a) = &self.advertise_grpc {
            return Ok(a.clone());
        }
        if self.grpc_addr.ip().is_unspecified() {
            return Err(bad(
                "grpc_addr listens on every interface: set advertise_grpc to the address other \
                 nodes reach this one at",
            ));
        }
        Ok(self.grpc_addr.to_string())
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::from("./ebb-data"),
            http_addr: ([127, 0, 0, 1], 7080).into(),
            pg_addr: ([127, 0, 0, 1], 7432).into(),
            grpc_addr: ([127, 0, 0, 1], 7090).into(),
            flight_addr: ([127, 0, 0, 1], 7091).into(),
            delete_deadline: Some(Duration::from_secs(24 * 3600)),
            init_cluster: false,
            sync: ebb_storage::SyncMode::Always,
            disk_reserve: durability::DiskReserve::Default,
            retention_check_interval: Duration::from_secs(60),
            max_body_bytes: 64 << 20,
            log_format: LogFormat::Text,
            cluster: false,
            join: Vec::new(),
            advertise_grpc: None,
            shards: 4,
            replication: 3,
            raft_snapshot_every: 10_000,
            raft_heartbeat: DEFAULT_RAFT_HEARTBEAT,
            scaling: Default::default(),
            node_name: None,
            init_node: None,
            default_retention: None,
            admin_password: None,
            join_token_file: None,
            insecure: false,
            limits: ebb_query::front::Limits::default(),
            write_limits: ebb_query::WriteLimits::default(),
            max_connections: 1024,
            tls: None,
            cluster_tls: None,
            ignored_keys: Vec::new(),
        }
    }
}

/// Settings as written (file, environment or flags); unset ones keep the lower layer's value.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Overrides {
    /// Keys of the file this build does not know, ignored: a newer build's settings (a chart
    /// upgraded before a rollback of the image) or typos. The server logs them;
    /// `ebb server --check-config` refuses them.
    #[serde(skip)]
    pub ignored: Vec<String>,
    /// See [`Config::data_dir`].
    pub data_dir: Option<PathBuf>,
    /// See [`Config::http_addr`].
    pub http_addr: Option<String>,
    /// See [`Config::pg_addr`].
    pub pg_addr: Option<String>,
    /// See [`Config::grpc_addr`].
    pub grpc_addr: Option<String>,
    /// See [`Config::flight_addr`].
    pub flight_addr: Option<String>,
    /// See [`Config::delete_deadline`] (`"24h"`, or `"none"`).
    pub delete_deadline: Option<String>,
    /// See [`Config::init_cluster`].
    pub init_cluster: Option<bool>,
    /// See [`Config::sync`] (`"always"`, `"interval"` or `"none"`).
    pub sync: Option<String>,
    /// The interval of `sync = "interval"` (`"100ms"`, `"1s"`).
    pub sync_interval: Option<String>,
    /// See [`Config::disk_reserve`] (`"2GiB"`, `"5%"`, `"0"`).
    pub disk_reserve: Option<String>,
    /// See [`Config::retention_check_interval`].
    pub retention_check_interval: Option<String>,
    /// See [`Config::max_body_bytes`].
    pub max_body_bytes: Option<usize>,
    /// See [`Config::log_format`].
    pub log_format: Option<String>,
    /// See [`Config::cluster`].
    pub cluster: Option<bool>,
    /// See [`Config::join`] (comma-separated `host:port` list).
    pub join: Option<String>,
    /// See [`Config::advertise_grpc`].
    pub advertise_grpc: Option<String>,
    /// See [`Config::shards`].
    pub shards: Option<u32>,
    /// See [`Config::replication`].
    pub replication: Option<u32>,
    /// See [`Config::raft_snapshot_every`].
    pub raft_snapshot_every: Option<u64>,
    /// See [`Config::raft_heartbeat`] (`"300ms"`, `"1s"`).
    pub raft_heartbeat: Option<String>,
    /// See [`scaling::Scaling::split_bytes`] (`"16GiB"`, or `"none"`).
    pub split_shard_bytes: Option<String>,
    /// See [`scaling::Scaling::split_rows_per_sec`] (rows a second, or `"none"`).
    pub split_shard_rows: Option<String>,
    /// See [`scaling::Scaling::move_rate`] (`"64MiB"` a second, or `"none"`).
    pub move_rate: Option<String>,
    /// See [`scaling::Scaling::memtable_budget`] (`"512MiB"`, or `"none"`).
    pub memtable_budget: Option<String>,
    /// See [`scaling::Scaling::backup_rate`] (`"100MiB"` a second, or `"none"`).
    pub backup_rate: Option<String>,
    /// See [`Config::node_name`].
    pub node_name: Option<String>,
    /// See [`Config::init_node`].
    pub init_node: Option<String>,
    /// See [`Config::default_retention`] (`"30d"`, or `"none"`).
    pub default_retention: Option<String>,
    /// A file holding [`Config::admin_password`] (trailing newlines are dropped).
    pub admin_password_file: Option<PathBuf>,
    /// [`Config::admin_password`] itself (from the environment only).
    #[serde(skip)]
    pub admin_password: Option<String>,
    /// See [`Config::join_token_file`].
    pub join_token_file: Option<PathBuf>,
    /// See [`Config::insecure`].
    pub insecure: Option<bool>,
    /// Memory one statement may hold (`"1GiB"`, `"512MiB"` or bytes).
    pub query_memory: Option<String>,
    /// Memory all running statements may hold together.
    pub server_memory: Option<String>,
    /// How long a statement may run (`"300s"`, or `"none"`).
    pub statement_timeout: Option<String>,
    /// See [`Config::max_connections`].
    pub max_connections: Option<usize>,
    /// Requests that may run statements at once.
    pub max_statements: Option<usize>,
    /// See [`ebb_query::sql::bounds::SqlBounds::max_sql_bytes`].
    pub max_sql_bytes: Option<usize>,
    /// See [`ebb_query::sql::bounds::SqlBounds::max_expression_depth`].
    pub max_expression_depth: Option<usize>,
    /// See [`ebb_query::sql::bounds::SqlBounds::max_list_items`].
    pub max_list_items: Option<usize>,
    /// See [`ebb_query::sql::bounds::SqlBounds::max_statements_per_request`].
    pub max_statements_per_request: Option<usize>,
    /// See [`ebb_query::sql::bounds::SqlBounds::max_relations`].
    pub max_relations: Option<usize>,
    /// See [`ebb_query::sql::bounds::SqlBounds::max_nesting`].
    pub max_nesting: Option<usize>,
    /// See [`ebb_query::WriteLimits::max_tags_per_line`].
    pub max_tags_per_line: Option<usize>,
    /// See [`ebb_query::WriteLimits::max_columns_per_table`].
    pub max_columns_per_table: Option<usize>,
    /// See [`ebb_query::WriteLimits::max_series_per_request`].
    pub max_series_per_request: Option<usize>,
    /// Certificate chain of the client ports (PEM).
    pub tls_cert: Option<PathBuf>,
    /// Its key.
    pub tls_key: Option<PathBuf>,
    /// The cluster CA (PEM).
    pub cluster_ca: Option<PathBuf>,
    /// This node's cluster certificate.
    pub cluster_cert: Option<PathBuf>,
    /// Its key.
    pub cluster_key: Option<PathBuf>,
}

impl Overrides {
    /// Reads a TOML file.
    pub fn from_file(path: &Path) -> Result<Overrides> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| bad(format!("cannot read config file {}: {e}", path.display())))?;
        let bad_file = |e: toml::de::Error| bad(format!("config file {}: {e}", path.display()));
        let de = toml::Deserializer::parse(&text).map_err(bad_file)?;
        let mut ignored = Vec::new();
        let mut o: Overrides = serde_ignored::deserialize(de, |key| ignored.push(key.to_string()))
            .map_err(bad_file)?;
        o.ignored = ignored;
        Ok(o)
    }

    /// Reads the `EBB_*` environment variables through `get`.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Overrides> {
        let mut o = Overrides::default();
        for (var, _) in ENV_VARS {
            let Some(v) = get(var) else { continue };
            match *var {
                "EBB_DATA_DIR" => o.data_dir = Some(PathBuf::from(v)),
                "EBB_HTTP_ADDR" => o.http_addr = Some(v),
                "EBB_PG_ADDR" => o.pg_addr = Some(v),
                "EBB_GRPC_ADDR" => o.grpc_addr = Some(v),
                "EBB_FLIGHT_ADDR" => o.flight_addr = Some(v),
                "EBB_DELETE_DEADLINE" => o.delete_deadline = Some(v),
                "EBB_SYNC" => o.sync = Some(v),
                "EBB_INIT_CLUSTER" => o.init_cluster = Some(boolean(var, &v)?),
                "EBB_SYNC_INTERVAL" => o.sync_interval = Some(v),
                "EBB_DISK_RESERVE" => o.disk_reserve = Some(v),
                "EBB_RETENTION_CHECK_INTERVAL" => o.retention_check_interval = Some(v),
                "EBB_MAX_BODY_BYTES" => {
                    o.max_body_bytes =
                        Some(v.parse().map_err(|_| bad(format!("{var}: not a number: {v:?}")))?)
                }
                "EBB_LOG_FORMAT" => o.log_format = Some(v),
                "EBB_CLUSTER" => o.cluster = Some(boolean(var, &v)?),
                "EBB_INSECURE" => o.insecure = Some(boolean(var, &v)?),
                "EBB_ADMIN_PASSWORD_FILE" => o.admin_password_file = Some(PathBuf::from(v)),
                "EBB_JOIN_TOKEN_FILE" => o.join_token_file = Some(PathBuf::from(v)),
                "EBB_ADMIN_PASSWORD" => o.admin_password = Some(v),
                "EBB_QUERY_MEMORY" => o.query_memory = Some(v),
                "EBB_SERVER_MEMORY" => o.server_memory = Some(v),
                "EBB_STATEMENT_TIMEOUT" => o.statement_timeout = Some(v),
                "EBB_MAX_CONNECTIONS"
                | "EBB_MAX_STATEMENTS"
                | "EBB_MAX_SQL_BYTES"
                | "EBB_MAX_EXPRESSION_DEPTH"
                | "EBB_MAX_LIST_ITEMS"
                | "EBB_MAX_STATEMENTS_PER_REQUEST"
                | "EBB_MAX_RELATIONS"
                | "EBB_MAX_NESTING"
                | "EBB_MAX_TAGS_PER_LINE"
                | "EBB_MAX_COLUMNS_PER_TABLE"
                | "EBB_MAX_SERIES_PER_REQUEST" => {
                    let n =
                        Some(v.parse().map_err(|_| bad(format!("{var}: not a number: {v:?}")))?);
                    *match *var {
                        "EBB_MAX_CONNECTIONS" => &mut o.max_connections,
                        "EBB_MAX_STATEMENTS" => &mut o.max_statements,
                        "EBB_MAX_SQL_BYTES" => &mut o.max_sql_bytes,
                        "EBB_MAX_EXPRESSION_DEPTH" => &mut o.max_expression_depth,
                        "EBB_MAX_LIST_ITEMS" => &mut o.max_list_items,
                        "EBB_MAX_STATEMENTS_PER_REQUEST" => &mut o.max_statements_per_request,
                        "EBB_MAX_RELATIONS" => &mut o.max_relations,
                        "EBB_MAX_NESTING" => &mut o.max_nesting,
                        "EBB_MAX_TAGS_PER_LINE" => &mut o.max_tags_per_line,
                        "EBB_MAX_COLUMNS_PER_TABLE" => &mut o.max_columns_per_table,
                        _ => &mut o.max_series_per_request,
                    } = n;
                }
                "EBB_TLS_CERT" => o.tls_cert = Some(PathBuf::from(v)),
                "EBB_TLS_KEY" => o.tls_key = Some(PathBuf::from(v)),
                "EBB_CLUSTER_CA" => o.cluster_ca = Some(PathBuf::from(v)),
                "EBB_CLUSTER_CERT" => o.cluster_cert = Some(PathBuf::from(v)),
                "EBB_CLUSTER_KEY" => o.cluster_key = Some(PathBuf::from(v)),
                "EBB_JOIN" => o.join = Some(v),
                "EBB_ADVERTISE_GRPC" => o.advertise_grpc = Some(v),
                "EBB_NODE_NAME" => o.node_name = Some(v),
                "EBB_INIT_NODE" => o.init_node = Some(v),
                "EBB_DEFAULT_RETENTION" => o.default_retention = Some(v),
                "EBB_SPLIT_SHARD_BYTES" => o.split_shard_bytes = Some(v),
                "EBB_SPLIT_SHARD_ROWS" => o.split_shard_rows = Some(v),
                "EBB_MOVE_RATE" => o.move_rate = Some(v),
                "EBB_MEMTABLE_BUDGET" => o.memtable_budget = Some(v),
                "EBB_BACKUP_RATE" => o.backup_rate = Some(v),
                "EBB_RAFT_HEARTBEAT" => o.raft_heartbeat = Some(v),
                "EBB_RAFT_SNAPSHOT_EVERY" => {
                    o.raft_snapshot_every =
                        Some(v.parse().map_err(|_| bad(format!("{var}: not a number: {v:?}")))?)
                }
                "EBB_SHARDS" | "EBB_REPLICATION" => {
                    let n =
                        Some(v.parse().map_err(|_| bad(format!("{var}: not a number: {v:?}")))?);
                    if *var == "EBB_SHARDS" {
                        o.shards = n;
                    } else {
                        o.replication = n;
                    }
                }
                _ => {}
            }
        }
        Ok(o)
    }

    /// Applies the settings present to `c`.
    pub fn apply(&self, c: &mut Config) -> Result<()> {
        let addr = |what: &str, s: &str| -> Result<SocketAddr> {
            s.parse().map_err(|_| bad(format!("{what}: not an address (host:port): {s:?}")))
        };
        if let Some(d) = &self.data_dir {
            c.data_dir = d.clone();
        }
        if let Some(a) = &self.http_addr {
            c.http_addr = addr("http_addr", a)?;
        }
        if let Some(a) = &self.pg_addr {
            c.pg_addr = addr("pg_addr", a)?;
        }
        if let Some(a) = &self.grpc_addr {
            c.grpc_addr = addr("grpc_addr", a)?;
        }
        if let Some(a) = &self.flight_addr {
            c.flight_addr = addr("flight_addr", a)?;
        }
        if let Some(d) = &self.delete_deadline {
            c.delete_deadline = ebb_query::sql::ddl::parse_retention(d)
                .map_err(|e| bad(format!("delete_deadline: {e}")))?;
        }
        c.sync =
            durability::sync_mode(self.sync.as_deref(), self.sync_interval.as_deref(), c.sync)?;
        if let Some(b) = self.init_cluster {
            c.init_cluster = b;
        }
        if let Some(r) = &self.disk_reserve {
            c.disk_reserve = durability::DiskReserve::parse(r)?;
        }
        if let Some(d) = &self.retention_check_interval {
            c.retention_check_interval = ebb_query::sql::ddl::parse_retention(d)
                .map_err(|e| bad(format!("retention_check_interval: {e}")))?
                .ok_or_else(|| bad("retention_check_interval must be positive"))?;
        }
        if let Some(n) = self.max_body_bytes {
            if n == 0 {
                return Err(bad("max_body_bytes must be positive"));
            }
            c.max_body_bytes = n;
        }
        if let Some(b) = self.cluster {
            c.cluster = b;
        }
        if let Some(j) = &self.join {
            c.join =
                j.split(',').map(str::trim).filter(|a| !a.is_empty()).map(String::from).collect();
            for a in &c.join {
                if !a.contains(':') {
                    return Err(bad(format!("join: {a:?} is not host:port")));
                }
            }
        }
        if let Some(a) = &self.advertise_grpc {
            c.advertise_grpc = Some(a.clone());
        }
        scaling::apply(self, &mut c.scaling)?;
        if let Some(n) = self.shards {
            if !(1..=4096).contains(&n) {
                return Err(bad("shards must be between 1 and 4096"));
            }
            c.shards = n;
        }
        if let Some(n) = self.replication {
            if !(1..=7).contains(&n) {
                return Err(bad("replication must be between 1 and 7"));
            }
            c.replication = n;
        }
        if let Some(n) = self.raft_snapshot_every {
            if !(16..=10_000_000).contains(&n) {
                return Err(bad("raft_snapshot_every must be between 16 and 10000000"));
            }
            c.raft_snapshot_every = n;
        }
        if let Some(h) = &self.raft_heartbeat {
            let range = Duration::from_millis(10)..=Duration::from_secs(10);
            c.raft_heartbeat = parse::interval("raft_heartbeat", h, range)?;
        }
        if let Some(n) = &self.node_name {
            c.node_name = (!n.is_empty()).then(|| n.clone());
        }
        if let Some(n) = &self.init_node {
            c.init_node = (!n.is_empty()).then(|| n.clone());
        }
        if let Some(r) = &self.default_retention {
            c.default_retention = ebb_query::sql::ddl::parse_retention(r)
                .map_err(|e| bad(format!("default_retention: {e}")))?;
        }
        if let Some(path) = &self.admin_password_file {
            let text = std::fs::read_to_string(path).map_err(|e| {
                bad(format!("admin_password_file: cannot read {}: {e}", path.display()))
            })?;
            c.admin_password = Some(Secret(text.trim_end_matches(['\n', '\r']).to_string()));
        }
        if let Some(p) = &self.admin_password {
            c.admin_password = Some(Secret(p.clone()));
        }
        if let Some(p) = &self.join_token_file {
            c.join_token_file = Some(p.clone());
        }
        if c.admin_password.as_ref().is_some_and(|p| p.0.is_empty()) {
            return Err(bad("the admin password is empty"));
        }
        if let Some(b) = self.insecure {
            c.insecure = b;
        }
        if let Some(v) = &self.query_memory {
            c.limits.query_memory_bytes = bytes("query_memory", v)?;
        }
        if let Some(v) = &self.server_memory {
            c.limits.server_memory_bytes = bytes("server_memory", v)?;
        }
        if c.limits.query_memory_bytes > c.limits.server_memory_bytes {
            return Err(bad("query_memory is larger than server_memory"));
        }
        if let Some(v) = &self.statement_timeout {
            c.limits.statement_timeout = ebb_query::sql::ddl::parse_retention(v)
                .map_err(|e| bad(format!("statement_timeout: {e}")))?;
        }
        if let Some(n) = self.max_connections {
            if n == 0 {
                return Err(bad("max_connections must be positive"));
            }
            c.max_connections = n;
        }
        if let Some(n) = self.max_statements {
            if n == 0 {
                return Err(bad("max_statements must be positive"));
            }
            c.limits.max_statements = n;
        }
        let counts: [(&str, Option<usize>, &mut usize); 9] = [
            ("max_sql_bytes", self.max_sql_bytes, &mut c.limits.sql.max_sql_bytes),
            (
                "max_expression_depth",
                self.max_expression_depth,
                &mut c.limits.sql.max_expression_depth,
            ),
            ("max_list_items", self.max_list_items, &mut c.limits.sql.max_list_items),
            (
                "max_statements_per_request",
                self.max_statements_per_request,
                &mut c.limits.sql.max_statements_per_request,
            ),
            ("max_relations", self.max_relations, &mut c.limits.sql.max_relations),
            ("max_nesting", self.max_nesting, &mut c.limits.sql.max_nesting),
            ("max_tags_per_line", self.max_tags_per_line, &mut c.write_limits.max_tags_per_line),
            (
                "max_columns_per_table",
                self.max_columns_per_table,
                &mut c.write_limits.max_columns_per_table,
            ),
            (
                "max_series_per_request",
                self.max_series_per_request,
                &mut c.write_limits.max_series_per_request,
            ),
        ];
        for (name, given, setting) in counts {
            if let Some(n) = given {
                if n == 0 {
                    return Err(bad(format!("{name} must be positive")));
                }
                *setting = n;
            }
        }
        if let Some(f) = &self.log_format {
            c.log_format = match f.as_str() {
                "text" => LogFormat::Text,
                "json" => LogFormat::Json,
                other => {
                    return Err(bad(format!("log_format: {other:?} is neither text nor json")))
                }
            };
        }
        Ok(())
    }
}

/// The TLS settings of all layers (the last layer setting a file wins): a certificate needs
/// its key, and the cluster's three files go together.
fn tls(layers: &[&Overrides]) -> Result<(Option<CertFiles>, Option<ClusterFiles>)> {
    let last =
        |f: fn(&Overrides) -> &Option<PathBuf>| layers.iter().rev().find_map(|o| f(o).clone());
    let tls = match (last(|o| &o.tls_cert), last(|o| &o.tls_key)) {
        (None, None) => None,
        (Some(cert), Some(key)) => Some(CertFiles { cert, key }),
        _ => return Err(bad("tls_cert and tls_key go together: set both")),
    };
    let cluster =
        match (last(|o| &o.cluster_ca), last(|o| &o.cluster_cert), last(|o| &o.cluster_key)) {
            (None, None, None) => None,
            (Some(ca), Some(cert), Some(key)) => {
                Some(ClusterFiles { ca, node: CertFiles { cert, key } })
            }
            _ => {
                return Err(bad(
                    "cluster_ca, cluster_cert and cluster_key go together: set all three",
                ))
            }
        };
    Ok((tls, cluster))
}

/// Builds the configuration: defaults, then the file, the environment and the flags.
pub fn resolve(file: Option<&Path>, env: &Overrides, flags: &Overrides) -> Result<Config> {
    let mut c = Config::default();
    let file = file.map(Overrides::from_file).transpose()?;
    if let Some(f) = &file {
        f.apply(&mut c)?;
        c.ignored_keys = f.ignored.clone();
    }
    env.apply(&mut c)?;
    flags.apply(&mut c)?;
    let layers: Vec<&Overrides> = file.iter().chain([env, flags]).collect();
    (c.tls, c.cluster_tls) = tls(&layers)?;
    Ok(c)
}

#[cfg(test)]
mod tests;
