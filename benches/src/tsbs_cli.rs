//! Command-line arguments of `ebb-bench ingest` and `ebb-bench query`.

use std::path::{Path, PathBuf};

use crate::peers::System;
use crate::tsbs::Dataset;

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
    /// Extra arguments for `ebb server` (e.g. `--sync=none`); the default is the server's own.
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
    /// Runs the benchmark in `work`.
    pub fn run(&self, work: &Path) -> Result<(), String> {
        let ebb_args: Vec<String> =
            self.ebb_args.iter().filter(|a| !a.is_empty()).cloned().collect();
        crate::tsbs::ingest(
            work,
            &sets(&self.sets)?,
            self.clients.max(1),
            &ebb_args,
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
    /// Extra arguments for `ebb server`.
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
            peers,
            baseline_bin: self.baseline_bin.clone(),
        };
        crate::tsbs_query::query(work, &sets(&self.sets)?, &s)
    }
}
