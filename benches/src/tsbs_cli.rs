//! Command-line arguments of `ebb-bench ingest` and `ebb-bench query`.

use std::path::{Path, PathBuf};

use crate::peers::System;
use crate::tsbs::Dataset;
use crate::workload::WriteSync;

fn peers(names: &[String]) -> Result<Vec<System>, String> {
    names
        .iter()
        .filter(|n| !n.is_empty() && n.as_str() != "none")
        .map(|n| match n.as_str() {
            "influxdb" => Ok(System::Influx),
            "victoriametrics" => Ok(System::Victoria),
            "questdb" => Ok(System::QuestDb),
            other => Err(format!("unknown peer {other:?} (influxdb, victoriametrics, questdb)")),
        })
        .collect()
}

fn sets(names: &[String]) -> Result<Vec<Dataset>, String> {
    names.iter().map(|s| s.parse()).collect()
}

/// `ebb-bench ingest`.
#[derive(Debug, clap::Args)]
pub struct IngestArgs {
    /// Data sets as HOSTSxHOURS.
    #[arg(long, value_delimiter = ',', default_value = "100x6,1000x1")]
    pub sets: Vec<String>,
    /// Concurrent client connections.
    #[arg(long, default_value_t = 4)]
    pub clients: usize,
    /// Peers measured after EbbDB.
    #[arg(long, value_delimiter = ',', default_value = "influxdb,victoriametrics,questdb")]
    pub peers: Vec<String>,
    /// When a write is durable, for EbbDB and each peer as close as it has a setting for
    /// (printed per system): `always` (EbbDB's default) or `off`.
    #[arg(long, value_enum, default_value_t = WriteSync::Always)]
    pub sync: WriteSync,
    /// Extra arguments for `ebb server` (not `--sync`: see `--sync`).
    #[arg(long, allow_hyphen_values = true, value_delimiter = ' ')]
    pub ebb_args: Vec<String>,
    /// An earlier `ebb` binary, loaded alternately with this build (`before=` in the RESULT
    /// lines, the median of `--rounds`).
    #[arg(long)]
    pub baseline_bin: Option<PathBuf>,
    /// Loads of each build when `--baseline-bin` is given.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Working directory (default: a temporary directory, removed afterwards).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

impl IngestArgs {
    /// The smallest run (`--quick`): 10 hosts for an hour, one round.
    pub fn quick(&mut self) {
        self.sets = vec!["10x1".into()];
        self.rounds = 1;
    }

    /// Runs the benchmark in `work`.
    pub fn run(&self, work: &Path) -> Result<(), String> {
        let ebb_args: Vec<String> =
            self.ebb_args.iter().filter(|a| !a.is_empty()).cloned().collect();
        crate::tsbs::ingest(
            work,
            &sets(&self.sets)?,
            self.clients.max(1),
            &ebb_args,
            self.sync,
            &peers(&self.peers)?,
            self.baseline_bin
                .clone()
                .map(|bin| crate::tsbs::Before { bin, rounds: self.rounds })
                .as_ref(),
        )
    }
}

/// `ebb-bench query`.
#[derive(Debug, clap::Args)]
pub struct QueryArgs {
    /// Data sets as HOSTSxHOURS (the 8- and 12-hour TSBS windows need 12 hours).
    #[arg(long, value_delimiter = ',', default_value = "100x12,1000x12")]
    pub sets: Vec<String>,
    /// Timed runs per query after one warm-up, each with new TSBS parameters (the median is
    /// reported).
    #[arg(long, default_value_t = 20)]
    pub reps: usize,
    /// Peers measured after EbbDB.
    #[arg(long, value_delimiter = ',', default_value = "influxdb,questdb")]
    pub peers: Vec<String>,
    /// When a write is durable, for EbbDB and each peer as close as it has a setting for:
    /// `always` (EbbDB's default) or `off`.
    #[arg(long, value_enum, default_value_t = WriteSync::Always)]
    pub sync: WriteSync,
    /// Extra arguments for `ebb server` (not `--sync`: see `--sync`).
    #[arg(long, allow_hyphen_values = true, value_delimiter = ' ')]
    pub ebb_args: Vec<String>,
    /// An earlier `ebb` binary, measured after this build with the same data and settings
    /// (`before=` in the RESULT lines).
    #[arg(long)]
    pub baseline_bin: Option<PathBuf>,
    /// Working directory (default: a temporary directory, removed afterwards).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

impl QueryArgs {
    /// The smallest run (`--quick`): 10 hosts for 12 hours, two timed runs per query.
    pub fn quick(&mut self) {
        self.sets = vec!["10x12".into()];
        self.reps = 2;
    }

    /// Runs the benchmark in `work`.
    pub fn run(&self, work: &Path) -> Result<(), String> {
        let peers = peers(&self.peers)?;
        if peers.contains(&System::Victoria) {
            return Err(
                "victoriametrics has no SQL or InfluxQL: it takes part in ingest only".into()
            );
        }
        let s = crate::tsbs_query::Settings {
            reps: self.reps.max(1),
            ebb_args: self.ebb_args.iter().filter(|a| !a.is_empty()).cloned().collect(),
            sync: self.sync,
            peers,
            baseline_bin: self.baseline_bin.clone(),
        };
        crate::tsbs_query::query(work, &sets(&self.sets)?, &s)
    }
}
