//! The `ebb` command: `ebb server`, `ebb sql`, `ebb import`, `ebb erase`, `ebb audit`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use ebb_node::cli::sql::OutputFormat;
use ebb_node::config::{self, LogFormat, Overrides};
use ebb_node::error::NodeError;

#[derive(Parser)]
#[command(
    name = "ebb",
    version = ebb_node::VERSION_TEXT,
    about = "EbbDB: a time-series database that forgets on time"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size of the server's variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Runs the server (HTTP, PostgreSQL wire protocol, gRPC) on a data directory.
    Server {
        /// TOML configuration file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Data directory [default: ./ebb-data; env EBB_DATA_DIR].
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// HTTP address [default: 127.0.0.1:7080; env EBB_HTTP_ADDR].
        #[arg(long)]
        http_addr: Option<String>,
        /// PostgreSQL wire protocol address [default: 127.0.0.1:7432; env EBB_PG_ADDR].
        #[arg(long)]
        pg_addr: Option<String>,
        /// gRPC address [default: 127.0.0.1:7090; env EBB_GRPC_ADDR].
        #[arg(long)]
        grpc_addr: Option<String>,
        /// Arrow Flight SQL address [default: 127.0.0.1:7091; env EBB_FLIGHT_ADDR].
        #[arg(long)]
        flight_addr: Option<String>,
        /// Deadline for every delete to be physically gone, e.g. 24h, or none
        /// [default: 24h; env EBB_DELETE_DEADLINE].
        #[arg(long)]
        delete_deadline: Option<String>,
        /// When a single node fsyncs its write-ahead log: always (before acknowledging a
        /// write), interval (every --sync-interval) or none (see README "Durability")
        /// [default: always; env EBB_SYNC].
        #[arg(long)]
        sync: Option<String>,
        /// How often --sync interval fsyncs, e.g. 100ms [default: 100ms; env EBB_SYNC_INTERVAL].
        #[arg(long)]
        sync_interval: Option<String>,
        /// Free space kept for deletes and compactions: below it writes are refused (HTTP 507,
        /// SQLSTATE 53100), e.g. 2GiB, 5%, or 0 for none [default: 5% of the volume, at most
        /// 2 GiB; env EBB_DISK_RESERVE].
        #[arg(long)]
        disk_reserve: Option<String>,
        /// Create a new cluster with this node as its first member [env EBB_CLUSTER].
        #[arg(long)]
        cluster: bool,
        /// Disaster recovery: if the data directory holds no node id, create a new cluster
        /// here without asking the --join seeds (nodes holding an old cluster's data will not
        /// join it) [env EBB_INIT_CLUSTER].
        #[arg(long)]
        init_cluster: bool,
        /// Join the cluster of these nodes (gRPC addresses, comma-separated) [env EBB_JOIN].
        #[arg(long)]
        join: Option<String>,
        /// gRPC address other nodes reach this one at [default: grpc_addr; env EBB_ADVERTISE_GRPC].
        #[arg(long)]
        advertise_grpc: Option<String>,
        /// Shards of a new cluster [default: 4; env EBB_SHARDS].
        #[arg(long)]
        shards: Option<u32>,
        /// Replicas per shard of a new cluster [default: 3; env EBB_REPLICATION].
        #[arg(long)]
        replication: Option<u32>,
        /// Raft log entries between snapshots of a shard [default: 10000; env
        /// EBB_RAFT_SNAPSHOT_EVERY]. Smaller: shorter logs on disk, more snapshots.
        #[arg(long)]
        raft_snapshot_every: Option<u64>,
        /// How often a shard's Raft leader sends heartbeats, e.g. 100ms or 1s; followers call
        /// an election after 5 to 10 missed ones [default: 300ms; env EBB_RAFT_HEARTBEAT].
        #[arg(long)]
        raft_heartbeat: Option<String>,
        /// A shard larger than this splits in two, e.g. 16GiB or none [default: 16GiB; env
        /// EBB_SPLIT_SHARD_BYTES].
        #[arg(long)]
        split_shard_bytes: Option<String>,
        /// A shard whose leader writes more rows a second than this, over a minute, splits in
        /// two; or none [default: 200000; env EBB_SPLIT_SHARD_ROWS].
        #[arg(long)]
        split_shard_rows: Option<String>,
        /// Bytes a second this node sends moving shard replicas at, e.g. 64MiB or none
        /// [default: 64MiB; env EBB_MOVE_RATE].
        #[arg(long)]
        move_rate: Option<String>,
        /// Bytes a second a backup transfers at, e.g. 100MiB or none [default: none; env
        /// EBB_BACKUP_RATE].
        #[arg(long)]
        backup_rate: Option<String>,
        /// Memtable memory all shard replicas of a cluster node share, e.g. 512MiB or none
        /// [default: 512MiB; env EBB_MEMTABLE_BUDGET].
        #[arg(long)]
        memtable_budget: Option<String>,
        /// This node's name, e.g. a pod's name [env EBB_NODE_NAME].
        #[arg(long)]
        node_name: Option<String>,
        /// The node (by name) that creates the cluster if no `join` seed answers; the others
        /// only join [env EBB_INIT_NODE].
        #[arg(long)]
        init_node: Option<String>,
        /// Retention of tables created without one, e.g. 30d [default: none; env
        /// EBB_DEFAULT_RETENTION].
        #[arg(long)]
        default_retention: Option<String>,
        /// A file holding the password user `admin` is created with on a server without users
        /// [env EBB_ADMIN_PASSWORD_FILE; or the password itself in EBB_ADMIN_PASSWORD].
        #[arg(long)]
        admin_password_file: Option<PathBuf>,
        /// A file holding the join token this node shows when it joins a cluster; the node
        /// that creates a cluster accepts it from the others [env EBB_JOIN_TOKEN_FILE].
        #[arg(long)]
        join_token_file: Option<PathBuf>,
        /// Serve non-loopback addresses even without any user: every client may do anything
        /// [env EBB_INSECURE].
        #[arg(long)]
        insecure: bool,
        /// Memory one statement may hold, e.g. 256MiB [default: 512MiB; env EBB_QUERY_MEMORY].
        #[arg(long)]
        query_memory: Option<String>,
        /// Memory all running statements may hold together [default: 2GiB; env
        /// EBB_SERVER_MEMORY].
        #[arg(long)]
        server_memory: Option<String>,
        /// How long a statement may run, e.g. 30s, or none [default: 300s; env
        /// EBB_STATEMENT_TIMEOUT].
        #[arg(long)]
        statement_timeout: Option<String>,
        /// Open connections per client port [default: 1024; env EBB_MAX_CONNECTIONS].
        #[arg(long)]
        max_connections: Option<usize>,
        /// Requests that may run statements at once; more wait up to 30 s for a turn
        /// [default: 64; env EBB_MAX_STATEMENTS].
        #[arg(long)]
        max_statements: Option<usize>,
        /// Certificate chain (PEM) for HTTPS and PostgreSQL TLS, which then become required
        /// [env EBB_TLS_CERT]. Reloaded when the file changes or on SIGHUP.
        #[arg(long)]
        tls_cert: Option<PathBuf>,
        /// Key of --tls-cert (PEM) [env EBB_TLS_KEY].
        #[arg(long)]
        tls_key: Option<PathBuf>,
        /// Cluster CA (PEM): nodes then talk gRPC over mutual TLS, each presenting a
        /// certificate it signed [env EBB_CLUSTER_CA].
        #[arg(long)]
        cluster_ca: Option<PathBuf>,
        /// This node's certificate, signed by the cluster CA [env EBB_CLUSTER_CERT].
        #[arg(long)]
        cluster_cert: Option<PathBuf>,
        /// Key of --cluster-cert [env EBB_CLUSTER_KEY].
        #[arg(long)]
        cluster_key: Option<PathBuf>,
        /// Checks the configuration (file, environment, flags), prints it and exits.
        #[arg(long)]
        check_config: bool,
    },
    /// Makes a cluster CA and certificates signed by it (for local clusters and tests).
    Cert {
        #[command(subcommand)]
        command: CertCommand,
    },
    /// Runs SQL on a server: `-c` for one command, else an interactive prompt.
    Sql {
        /// Server HTTP URL.
        #[arg(long, default_value = "http://127.0.0.1:7080", env = "EBB_URL")]
        url: String,
        /// Database for unqualified table names.
        #[arg(long, default_value = "public")]
        db: String,
        /// SQL to run (then exit).
        #[arg(short = 'c', long = "command")]
        command: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value = "table")]
        format: OutputFormat,
    },
    /// Erases everything one tag value identifies (a user's data): every series with it, in
    /// every table of the database, is deleted and removed from the series index.
    Erase {
        /// The tag and value, e.g. user=alice.
        #[arg(long)]
        tag: String,
        /// The database.
        #[arg(long, default_value = "public")]
        db: String,
        /// Deadline for the data to be physically gone, shorter than the server's delete
        /// deadline, e.g. 1h [default: the server's].
        #[arg(long)]
        deadline: Option<String>,
        /// Server HTTP URL.
        #[arg(long, default_value = "http://127.0.0.1:7080", env = "EBB_URL")]
        url: String,
    },
    /// Proves deletes: verification on every replica, and the audit report.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// Cluster administration.
    Node {
        #[command(subcommand)]
        command: NodeCommand,
    },
    /// Backups: `create` one on a server (needs ADMIN), `list`, `verify` and `prune` the sets
    /// at a destination (a directory or s3://bucket/prefix).
    Backup {
        #[command(subcommand)]
        command: BackupCommand,
    },
    /// Builds a new data directory from a backup set (offline; start a server on it after).
    /// Every object is checked; nothing is left in DIR unless all of the set arrived whole.
    Restore {
        /// The destination holding the set (a directory or s3://bucket/prefix?...).
        #[arg(long)]
        from: String,
        /// The set's id [default: the newest].
        #[arg(long)]
        backup: Option<String>,
        /// The new data directory (must not exist, or be empty).
        #[arg(long)]
        data_dir: PathBuf,
        /// Bytes a second to read at, e.g. 100MiB [default: unlimited].
        #[arg(long)]
        rate: Option<String>,
        /// For an encrypted set: the key directory of the server that took it
        /// (<data dir>/backup/keys); the restored server keeps a copy.
        #[arg(long)]
        key_dir: Option<PathBuf>,
        /// No progress on standard error.
        #[arg(long)]
        quiet: bool,
    },
    /// Imports a line-protocol file (`-` for standard input) into a server.
    Import {
        /// The file.
        file: String,
        /// Server HTTP URL.
        #[arg(long, default_value = "http://127.0.0.1:7080", env = "EBB_URL")]
        url: String,
        /// Database to write into.
        #[arg(long, default_value = "public")]
        db: String,
        /// Timestamp precision of the file: ns, us, ms, s, m, h.
        #[arg(long, default_value = "ns")]
        precision: String,
        /// Points per request.
        #[arg(long, default_value_t = 5000)]
        batch: usize,
        /// The first line of the file to import: to resume an import that stopped.
        #[arg(long, default_value_t = 1)]
        from_line: u64,
        /// Leave out lines the server refuses (listed at the end) instead of stopping at the
        /// first.
        #[arg(long)]
        skip_invalid: bool,
    },
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Scans every replica (files, memtables, WAL, Raft log, snapshots) for values delete
    /// request ID covers; exits non-zero unless none is found.
    Verify {
        /// The request id (`system.deletions.id`, or what DELETE and ERASE print).
        id: u64,
        /// Print the full verification as JSON.
        #[arg(long)]
        json: bool,
        /// Server HTTP URL.
        #[arg(long, default_value = "http://127.0.0.1:7080", env = "EBB_URL")]
        url: String,
    },
    /// Every delete request of a period: deadline, persistence on every replica, slack,
    /// verification, and a chart of persistence latency against the deadline.
    Report {
        /// The period, ending now, e.g. 30d.
        #[arg(long, default_value = "30d")]
        since: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "html")]
        format: ebb_node::cli::audit::ReportFormat,
        /// Which persisted requests to verify on every replica.
        #[arg(long, value_enum, default_value = "deletes")]
        verify: ebb_node::cli::audit::VerifyScope,
        /// Write the report to this file instead of standard output.
        #[arg(long, short = 'o')]
        output: Option<PathBuf>,
        /// Server HTTP URL.
        #[arg(long, default_value = "http://127.0.0.1:7080", env = "EBB_URL")]
        url: String,
    },
}

#[derive(Subcommand)]
enum BackupCommand {
    /// Backs up the server (every shard, consistent as of now; only files the destination
    /// lacks are copied), printing progress. Runs `BACKUP TO` (needs ADMIN).
    Create {
        /// The destination: a directory the server can write, or s3://bucket/prefix with
        /// ?endpoint=, region=, allow_http=true, credentials=/path (keys come from the
        /// server's environment or that file, never the URI).
        #[arg(long)]
        to: String,
        /// Seal every object with a key of its own, the keys sealed with a key the server keeps
        /// in <data dir>/backup/keys and destroys with the set (BACKUP TO ... ENCRYPTED).
        #[arg(long)]
        encrypt: bool,
        /// Print no progress.
        #[arg(long)]
        quiet: bool,
        /// Server HTTP URL.
        #[arg(long, default_value = "http://127.0.0.1:7080", env = "EBB_URL")]
        url: String,
    },
    /// Lists backups: the server's (`system.backups`), or with --at the sets at a destination.
    List {
        /// A destination to list instead of asking the server.
        #[arg(long)]
        at: Option<String>,
        /// Server HTTP URL.
        #[arg(long, default_value = "http://127.0.0.1:7080", env = "EBB_URL")]
        url: String,
    },
    /// Reads every object of a set and checks every checksum; exits non-zero on a missing or
    /// damaged object, naming it.
    Verify {
        /// The set's id.
        id: String,
        /// The destination.
        #[arg(long)]
        at: String,
        /// Bytes a second to read at, e.g. 100MiB [default: unlimited].
        #[arg(long)]
        rate: Option<String>,
    },
    /// Keeps the newest N sets and removes the others and every object no kept set uses.
    Prune {
        /// How many sets to keep.
        #[arg(long)]
        keep: usize,
        /// The destination.
        #[arg(long)]
        at: String,
    },
}

#[derive(Subcommand)]
enum NodeCommand {
    /// Drains node ID: its shard replicas move to the other nodes, then it leaves the cluster.
    /// Follow the moves in `system.shards`. Needs ADMIN.
    Decommission {
        /// The node id (see `system.nodes`).
        id: u64,
        /// HTTP URL of any node of the cluster.
        #[arg(long, default_value = "http://127.0.0.1:7080", env = "EBB_URL")]
        url: String,
    },
}

#[derive(Subcommand)]
enum CertCommand {
    /// Creates a CA: DIR/ca.crt and DIR/ca.key (never over existing files).
    Ca {
        /// Directory for the files.
        #[arg(long, default_value = "certs")]
        dir: PathBuf,
        /// Days the CA is valid.
        #[arg(long, default_value_t = 3650)]
        days: u32,
    },
    /// Issues DIR/NAME.crt and DIR/NAME.key, signed by DIR/ca.crt, for the given hosts; the
    /// certificate serves as a node's cluster certificate and as its HTTPS/PostgreSQL one.
    Issue {
        /// The certificate's name (its files' names).
        name: String,
        /// Directory holding the CA, and for the files.
        #[arg(long, default_value = "certs")]
        dir: PathBuf,
        /// A DNS name or IP address clients reach the node at (repeat for several).
        #[arg(long = "host")]
        hosts: Vec<String>,
        /// Days the certificate is valid.
        #[arg(long, default_value_t = 825)]
        days: u32,
    },
}

fn init_logs(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("EBB_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only where a person reads it: not in files, pipes or log collectors.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Server {
            config,
            data_dir,
            http_addr,
            pg_addr,
            grpc_addr,
            flight_addr,
            delete_deadline,
            sync,
            sync_interval,
            disk_reserve,
            cluster,
            init_cluster,
            join,
            advertise_grpc,
            shards,
            replication,
            raft_snapshot_every,
            raft_heartbeat,
            split_shard_bytes,
            split_shard_rows,
            move_rate,
            backup_rate,
            memtable_budget,
            node_name,
            init_node,
            default_retention,
            admin_password_file,
            join_token_file,
            insecure,
            query_memory,
            server_memory,
            statement_timeout,
            max_connections,
            max_statements,
            tls_cert,
            tls_key,
            cluster_ca,
            cluster_cert,
            cluster_key,
            check_config,
        } => {
            let flags = Overrides {
                data_dir,
                http_addr,
                pg_addr,
                grpc_addr,
                flight_addr,
                delete_deadline,
                sync,
                sync_interval,
                disk_reserve,
                cluster: cluster.then_some(true),
                init_cluster: init_cluster.then_some(true),
                join,
                advertise_grpc,
                shards,
                replication,
                raft_snapshot_every,
                raft_heartbeat,
                split_shard_bytes,
                split_shard_rows,
                move_rate,
                backup_rate,
                memtable_budget,
                node_name,
                init_node,
                default_retention,
                admin_password_file,
                join_token_file,
                insecure: insecure.then_some(true),
                query_memory,
                server_memory,
                statement_timeout,
                max_connections,
                max_statements,
                tls_cert,
                tls_key,
                cluster_ca,
                cluster_cert,
                cluster_key,
                ..Overrides::default()
            };
            if check_config {
                check(config, flags)
            } else {
                run_server(config, flags)
            }
        }
        Command::Sql { url, db, command, format } => match command {
            Some(sql) => {
                ebb_node::cli::sql::run_one(&url, &db, &sql, format).map(|out| print!("{out}"))
            }
            None => ebb_node::cli::sql::repl(&url, &db, format),
        },
        Command::Node { command: NodeCommand::Decommission { id, url } } => {
            ebb_node::cli::decommission(&url, id)
                .map(|()| println!("node {id} is draining; it leaves once its replicas have moved"))
        }
        Command::Cert { command: CertCommand::Ca { dir, days } } => {
            ebb_node::tls::issue::make_ca(&dir, days)
                .map(|p| println!("wrote {} and its key (keep the key secret)", p.display()))
                .map_err(|e| NodeError::Config(e.to_string()))
        }
        Command::Cert { command: CertCommand::Issue { name, dir, hosts, days } } => {
            ebb_node::tls::issue::issue(&dir, &name, &hosts, days)
                .map(|p| println!("wrote {} and its key", p.display()))
                .map_err(|e| NodeError::Config(e.to_string()))
        }
        Command::Erase { tag, db, deadline, url } => {
            ebb_node::cli::audit::erase(&url, &db, &tag, deadline.as_deref()).map(|o| print!("{o}"))
        }
        Command::Audit { command: AuditCommand::Verify { id, json, url } } => {
            match ebb_node::cli::audit::verify(&url, id, json) {
                Ok((out, pass)) => {
                    print!("{out}");
                    if !pass {
                        return ExitCode::from(2);
                    }
                    Ok(())
                }
                Err(e) => Err(e),
            }
        }
        Command::Audit { command: AuditCommand::Report { since, format, verify, output, url } } => {
            ebb_node::cli::audit::report(&url, &since, format, verify).and_then(|text| match output
            {
                Some(path) => std::fs::write(&path, text)
                    .map_err(|e| NodeError::Client(format!("writing {}: {e}", path.display()))),
                None => {
                    print!("{text}");
                    Ok(())
                }
            })
        }
        Command::Backup { command } => return backup_command(command),
        Command::Restore { from, backup, data_dir, rate, key_dir, quiet } => {
            let rate = match parse_rate(rate.as_deref()) {
                Ok(r) => r,
                Err(e) => return fail(e),
            };
            block_on(ebb_node::cli::backup::restore(
                &from,
                backup.as_deref(),
                &data_dir,
                rate,
                key_dir.as_deref(),
                quiet,
            ))
            .map(|out| print!("{out}"))
        }
        Command::Import { file, url, db, precision, batch, from_line, skip_invalid } => {
            import(ebb_node::cli::import::ImportOptions {
                base: url,
                db,
                path: file,
                precision,
                batch: batch.max(1),
                from_line,
                skip_invalid,
            })
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ebb: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `ebb import`: imports, prints what was written, and on a stop where and how to resume.
fn import(opts: ebb_node::cli::import::ImportOptions) -> Result<(), NodeError> {
    use ebb_node::cli::import::ImportError;
    let start = std::time::Instant::now();
    let (report, stopped) = ebb_node::cli::import::import(&opts);
    println!("{}", report.summary(start.elapsed().as_secs_f64()));
    let Some(e) = stopped else { return Ok(()) };
    let file = &opts.path;
    let hint = match &e {
        ImportError::Line { line, .. } => format!(
            "nothing from line {line} on was written. Fix line {line} and resume with \
             `ebb import {file} --from-line {line}`, or leave refused lines out with --skip-invalid"
        ),
        _ => format!("resume with `ebb import {file} --from-line {}`", report.done_through + 1),
    };
    Err(format!("import stopped: {e}\n{hint}").into())
}

/// `ebb server --check-config`: resolves the configuration as the server would and prints it.
fn check(file: Option<PathBuf>, flags: Overrides) -> Result<(), NodeError> {
    let env = Overrides::from_env(|k| std::env::var(k).ok())?;
    let c = config::resolve(file.as_deref(), &env, &flags)?;
    if !c.ignored_keys.is_empty() {
        return Err(NodeError::Config(format!(
            "unknown settings in the configuration file: {} (this build, ebb {}, does not know \
             them; the server would ignore them)",
            c.ignored_keys.join(", "),
            ebb_node::VERSION
        )));
    }
    let mode = if c.cluster_mode() {
        let advertise = c.advertised_grpc()?;
        let role = if c.is_init_node() {
            "creates the cluster unless a seed answers"
        } else if c.cluster {
            "creates the cluster"
        } else {
            "joins through the seeds"
        };
        format!(
            "cluster node {} ({role}); advertises {advertise}; seeds {:?}; {} shards, replication {}",
            c.node_name.as_deref().unwrap_or("(unnamed)"),
            c.join,
            c.shards,
            c.replication
        )
    } else {
        "single node".to_string()
    };
    let d = |v: Option<std::time::Duration>| v.map_or("none".to_string(), |d| format!("{d:?}"));
    println!("configuration ok: {mode}");
    println!(
        "  data {}  HTTP {}  PostgreSQL {}  gRPC {}  Flight SQL {}",
        c.data_dir.display(),
        c.http_addr,
        c.pg_addr,
        c.grpc_addr,
        c.flight_addr
    );
    println!(
        "  delete deadline {}  default retention {}  retention checks every {:?}",
        d(c.delete_deadline),
        d(c.default_retention),
        c.retention_check_interval
    );
    if c.cluster_mode() {
        println!("  writes durable: fsynced in the Raft log of a majority before acknowledged");
        println!("  Raft heartbeats every {:?}, elections after 5-10 missed", c.raft_heartbeat);
    } else {
        println!("  WAL sync {}", ebb_node::config::durability::describe(c.sync));
    }
    let access = if c.admin_password.is_some() {
        "an admin password creates user admin on a server without users"
    } else if c.loopback_only() {
        "no admin password: a server without users trusts every client (loopback only)"
    } else if c.insecure {
        "no admin password and --insecure: a server without users trusts every client"
    } else {
        "no admin password: a server without users will refuse to start on these addresses"
    };
    println!("  access: {access}");
    println!(
        "  statements: {} MiB each, {} MiB together, timeout {}, {} at once; {} connections per port",
        c.limits.query_memory_bytes >> 20,
        c.limits.server_memory_bytes >> 20,
        d(c.limits.statement_timeout),
        c.limits.max_statements,
        c.max_connections
    );
    let tls = match &c.tls {
        Some(t) => {
            ebb_node::tls::TlsSource::clients("HTTP", t, &[])
                .map_err(|e| NodeError::Config(format!("TLS: {e}")))?;
            format!("HTTPS and PostgreSQL TLS required, certificate {}", t.cert.display())
        }
        None => "none: HTTP and PostgreSQL traffic, passwords included, is plain text".into(),
    };
    println!("  client TLS: {tls}");
    let cluster = match &c.cluster_tls {
        Some(t) => {
            ebb_node::tls::TlsSource::cluster(t)
                .map_err(|e| NodeError::Config(format!("cluster TLS: {e}")))?;
            format!("mutual TLS, CA {}", t.ca.display())
        }
        None => "none: any client reaching the gRPC port is trusted as a node".into(),
    };
    println!("  cluster TLS: {cluster}");
    Ok(())
}

/// Runs `f` on a small runtime (the CLI's object-store calls are async).
fn block_on<T>(f: impl std::future::Future<Output = Result<T, NodeError>>) -> Result<T, NodeError> {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?.block_on(f)
}

/// A `--rate` as bytes a second.
fn parse_rate(rate: Option<&str>) -> Result<Option<u64>, NodeError> {
    rate.map(|r| ebb_node::config::bytes("--rate", r).map(|n| n as u64)).transpose()
}

fn fail(e: NodeError) -> ExitCode {
    eprintln!("ebb: {e}");
    ExitCode::FAILURE
}

fn backup_command(command: BackupCommand) -> ExitCode {
    use ebb_node::cli::backup;
    let result = match command {
        BackupCommand::Create { to, encrypt, quiet, url } => {
            backup::create(&url, &to, encrypt, quiet).map(|out| print!("{out}"))
        }
        BackupCommand::List { at: Some(at), .. } => {
            block_on(backup::list_at(&at)).map(|o| print!("{o}"))
        }
        BackupCommand::List { at: None, url } => ebb_node::cli::sql::run_one(
            &url,
            "public",
            "SELECT * FROM system.backups ORDER BY started",
            ebb_node::cli::sql::OutputFormat::Table,
        )
        .map(|o| print!("{o}")),
        BackupCommand::Verify { id, at, rate } => {
            let verified = parse_rate(rate.as_deref())
                .and_then(|rate| block_on(backup::verify(&at, &id, rate)));
            match verified {
                Ok((out, pass)) => {
                    print!("{out}");
                    return if pass { ExitCode::SUCCESS } else { ExitCode::from(2) };
                }
                Err(e) => Err(e),
            }
        }
        BackupCommand::Prune { keep, at } => {
            block_on(backup::prune(&at, keep)).map(|o| print!("{o}"))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

fn run_server(file: Option<PathBuf>, flags: Overrides) -> Result<(), NodeError> {
    let env = Overrides::from_env(|k| std::env::var(k).ok())?;
    let config = config::resolve(file.as_deref(), &env, &flags)?;
    init_logs(config.log_format);
    for key in &config.ignored_keys {
        tracing::warn!(
            key,
            "configuration file: unknown setting ignored (a newer build's, or a typo)"
        );
    }
    // Every file the server makes is its owner's alone (the data directory is 0700 too).
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("ebb")
        .thread_stack_size(8 << 20)
        .build()?;
    rt.block_on(async {
        let server = ebb_node::server::Server::start(&config).await?;
        let scheme = if config.tls.is_some() { "https" } else { "http" };
        match server.cluster() {
            Some(node) => eprintln!(
                "EbbDB cluster node {} ready: HTTP {scheme}://{}  PostgreSQL {}  gRPC {}  \
                 Flight SQL {}  data {}",
                node.id,
                server.http_addr,
                server.pg_addr,
                server.grpc_addr,
                server.flight_addr,
                config.data_dir.display()
            ),
            None => eprintln!(
                "EbbDB ready: HTTP {scheme}://{}  PostgreSQL {}  gRPC {}  Flight SQL {}  data {}",
                server.http_addr,
                server.pg_addr,
                server.grpc_addr,
                server.flight_addr,
                config.data_dir.display()
            ),
        }
        ebb_node::server::termination().await;
        tracing::info!("shutting down");
        server.shutdown().await
    })
}
