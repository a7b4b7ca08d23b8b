//! The `ebb` command: `ebb server`, `ebb sql`, `ebb import`, `ebb erase`, `ebb audit`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use ebb_node::cli::sql::OutputFormat;
use ebb_node::config::{self, LogFormat, Overrides};
use ebb_node::error::NodeError;

#[derive(Parser)]
#[command(name = "ebb", version, about = "EbbDB: a time-series database that forgets on time")]
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
        /// Deadline for every delete to be physically gone, e.g. 24h, or none
        /// [default: 24h; env EBB_DELETE_DEADLINE].
        #[arg(long)]
        delete_deadline: Option<String>,
        /// Create a new cluster with this node as its first member [env EBB_CLUSTER].
        #[arg(long)]
        cluster: bool,
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
        /// Checks the configuration (file, environment, flags), prints it and exits.
        #[arg(long)]
        check_config: bool,
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
        /// Lines per request.
        #[arg(long, default_value_t = 5000)]
        batch: usize,
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
enum NodeCommand {
    /// Drains node ID: its shard replicas move to the other nodes, then it leaves the cluster.
    /// Follow the moves in `system.shards`.
    Decommission {
        /// The node id (see `system.nodes`).
        id: u64,
        /// gRPC address of any node of the cluster.
        #[arg(long, default_value = "127.0.0.1:7090", env = "EBB_GRPC")]
        grpc: String,
    },
}

fn init_logs(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("EBB_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
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
            delete_deadline,
            cluster,
            join,
            advertise_grpc,
            shards,
            replication,
            raft_snapshot_every,
            node_name,
            init_node,
            default_retention,
            admin_password_file,
            insecure,
            query_memory,
            server_memory,
            statement_timeout,
            check_config,
        } => {
            let flags = Overrides {
                data_dir,
                http_addr,
                pg_addr,
                grpc_addr,
                delete_deadline,
                cluster: cluster.then_some(true),
                join,
                advertise_grpc,
                shards,
                replication,
                raft_snapshot_every,
                node_name,
                init_node,
                default_retention,
                admin_password_file,
                insecure: insecure.then_some(true),
                query_memory,
                server_memory,
                statement_timeout,
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
        Command::Node { command: NodeCommand::Decommission { id, grpc } } => {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(NodeError::from)
                .and_then(|rt| rt.block_on(ebb_node::cluster::decommission(&grpc, id)))
                .map(|()| println!("node {id} is draining; it leaves once its replicas have moved"))
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
        Command::Import { file, url, db, precision, batch } => {
            ebb_node::cli::import::import(&url, &db, &file, &precision, batch.max(1)).map(|_| ())
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

/// `ebb server --check-config`: resolves the configuration as the server would and prints it.
fn check(file: Option<PathBuf>, flags: Overrides) -> Result<(), NodeError> {
    let env = Overrides::from_env(|k| std::env::var(k).ok())?;
    let c = config::resolve(file.as_deref(), &env, &flags)?;
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
        "  data {}  HTTP {}  PostgreSQL {}  gRPC {}",
        c.data_dir.display(),
        c.http_addr,
        c.pg_addr,
        c.grpc_addr
    );
    println!(
        "  delete deadline {}  default retention {}  retention checks every {:?}",
        d(c.delete_deadline),
        d(c.default_retention),
        c.retention_check_interval
    );
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
        "  statements: {} MiB each, {} MiB together, timeout {}",
        c.limits.query_memory_bytes >> 20,
        c.limits.server_memory_bytes >> 20,
        d(c.limits.statement_timeout)
    );
    Ok(())
}

fn run_server(file: Option<PathBuf>, flags: Overrides) -> Result<(), NodeError> {
    let env = Overrides::from_env(|k| std::env::var(k).ok())?;
    let config = config::resolve(file.as_deref(), &env, &flags)?;
    init_logs(config.log_format);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("ebb").build()?;
    rt.block_on(async {
        let server = ebb_node::server::Server::start(&config).await?;
        match server.cluster() {
            Some(node) => eprintln!(
                "EbbDB cluster node {} ready: HTTP http://{}  PostgreSQL {}  gRPC {}  data {}",
                node.id,
                server.http_addr,
                server.pg_addr,
                server.grpc_addr,
                config.data_dir.display()
            ),
            None => eprintln!(
                "EbbDB ready: HTTP http://{}  PostgreSQL {}  gRPC {}  data {}",
                server.http_addr,
                server.pg_addr,
                server.grpc_addr,
                config.data_dir.display()
            ),
        }
        ebb_node::server::termination().await;
        tracing::info!("shutting down");
        server.shutdown().await
    })
}
