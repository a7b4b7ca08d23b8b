//! `ebb import FILE`: sends a line-protocol file to a server in batches, with a progress bar,
//! and prints the rate at the end.

use std::io::{BufRead, BufReader};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

use super::url;
use crate::error::Result;

/// Why a batch of lines was not imported.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// The request did not reach the server, or its answer did not arrive.
    #[error("cannot reach {base}: {source}")]
    Unreachable {
        /// The server's base URL.
        base: String,
        /// Why.
        source: Box<ureq::Error>,
    },
    /// The server answered the batch with an error.
    #[error("batch starting at line {first_line} rejected ({status}): {body}")]
    Rejected {
        /// The batch's first line in the file (1-based).
        first_line: u64,
        /// The answer's status.
        status: ureq::http::StatusCode,
        /// The answer's body (its error message).
        body: String,
    },
}

/// Imports `path` (line protocol; `-` for standard input) into database `db` at `base`,
/// `batch` lines per request. Returns the lines sent.
pub fn import(base: &str, db: &str, path: &str, precision: &str, batch: usize) -> Result<u64> {
    let (reader, total): (Box<dyn BufRead>, u64) = if path == "-" {
        (Box::new(BufReader::new(std::io::stdin())), 0)
    } else {
        let f = std::fs::File::open(path).map_err(|e| format!("cannot open {path}: {e}"))?;
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        (Box::new(BufReader::with_capacity(1 << 20, f)), len)
    };
    let bar = if total > 0 { ProgressBar::new(total) } else { ProgressBar::new_spinner() };
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let agent = super::agent();
    let endpoint = url(base, "/write");
    let start = Instant::now();
    let (mut lines, mut sent_lines, mut first_line) = (0u64, 0u64, 1u64);
    let mut body = String::new();
    let mut in_body = 0usize;
    let send = |body: &str, first: u64| -> Result<(), ImportError> {
        let mut resp = agent
            .post(&endpoint)
            .query("db", db)
            .query("precision", precision)
            .send(body)
            .map_err(|e| ImportError::Unreachable {
                base: base.to_string(),
                source: Box::new(e),
            })?;
        if resp.status().is_success() {
            return Ok(());
        }
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        Err(ImportError::Rejected { first_line: first, status: resp.status(), body: text })
    };
    for line in reader.lines() {
        let line = line.map_err(|e| format!("reading {path}: {e}"))?;
        lines += 1;
        bar.inc(line.len() as u64 + 1);
        body.push_str(&line);
        body.push('\n');
        in_body += 1;
        if in_body >= batch {
            send(&body, first_line)?;
            sent_lines += in_body as u64;
            body.clear();
            in_body = 0;
            first_line = lines + 1;
            let secs = start.elapsed().as_secs_f64().max(1e-9);
            bar.set_message(format!("{:.0} lines/s", sent_lines as f64 / secs));
        }
    }
    if in_body > 0 {
        send(&body, first_line)?;
        sent_lines += in_body as u64;
    }
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    println!(
        "imported {sent_lines} lines in {secs:.2} s ({:.0} lines/s)",
        sent_lines as f64 / secs
    );
    Ok(sent_lines)
}
