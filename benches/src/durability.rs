//! `ebb-bench durability`: what each `--sync` mode of a single node costs. Three `ebb server`s
//! per round on the same data, one after the other: `--sync always` (an fsync, shared by the
//! requests that arrive meanwhile, before each write is acknowledged), `--sync interval`
//! (every 100 ms) and `--sync none`; rounds repeat and medians are reported. Measured:
//! line-protocol ingest over kept-alive connections (rows/s) at each request size. `RESULT`
//! lines name the mode measured `ebb` and `--sync none` the baseline, so a ratio below 1 is
//! the cost of that durability.

use std::path::Path;

use crate::ebb_server::Server;
use crate::report::{median, Better, Comparison};
use crate::tsbs::{generate, Dataset};

/// The modes, in the order they run in a round.
const MODES: [(&str, &[&str]); 3] = [
    ("none", &["--sync", "none"]),
    ("always", &["--sync", "always"]),
    ("interval", &["--sync", "interval", "--sync-interval", "100ms"]),
];

/// Runs `repeat` rounds of every mode at every request size and returns the comparisons.
pub fn durability(
    work: &Path,
    ds: Dataset,
    clients: usize,
    batch_rows: &[usize],
    repeat: usize,
) -> Result<Vec<Comparison>, String> {
    println!(
        "durability {}: {} rows, {clients} clients, requests of {batch_rows:?} rows, {repeat} rounds",
        ds.label(),
        ds.rows()
    );
    let mut out = Vec::new();
    for &per in batch_rows {
        let batches = generate(ds, per);
        // rates[mode][round]
        let mut rates = vec![Vec::new(); MODES.len()];
        for round in 0..repeat {
            for (m, (name, flags)) in MODES.iter().enumerate() {
                let dir = work.join(format!("durability-{per}-{round}-{name}"));
                let _ = std::fs::remove_dir_all(&dir);
                let s = Server::start(&dir, false, flags)?;
                let rate = s.ingest(&batches, ds.rows(), clients)?;
                println!("  {per:>5} rows/request  round {round}  {name:<8} {rate:>10.0} rows/s");
                rates[m].push(rate);
                drop(s);
                let _ = std::fs::remove_dir_all(&dir);
            }
        }
        let none = median(&rates[0]);
        for (m, (name, _)) in MODES.iter().enumerate().skip(1) {
            out.push(Comparison {
                bench: "durability".into(),
                metric: "ingest_rows_per_sec".into(),
                params: vec![
                    ("sync".into(), (*name).into()),
                    ("rows_per_request".into(), per.to_string()),
                    ("clients".into(), clients.to_string()),
                    ("dataset".into(), ds.label()),
                ],
                ebb: median(&rates[m]),
                baseline: "none".into(),
                base: none,
                better: Better::Higher,
            });
        }
    }
    Ok(out)
}
