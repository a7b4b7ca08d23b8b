//! Integration tests of the server and the cluster, on loopback.
//!
//! One test binary per crate: every module links against the same build of the crate, so the
//! test suite links once instead of once per file.

mod audit;
mod auth;
mod backup;
mod cli;
mod clients;
mod cluster;
mod cluster_balance;
mod cluster_ddl;
mod cluster_erasure;
mod cluster_harness;
mod cluster_intent;
mod cluster_server;
mod cluster_split;
mod cluster_writes;
mod common;
mod disk_full;
mod flight;
mod fuzz;
mod grafana;
mod hostile;

mod limits;
mod linearizable;
mod local_cluster;
mod nemesis;
mod nemesis_processes;
mod prometheus;
mod readiness;
mod readme;
mod replicated_shard;
mod rollup;
mod server;
mod tls;
mod upgrade;
mod watchdog;
