//! `ebb import FILE`: sends a line-protocol file to a server in batches, with a progress bar.
//!
//! The file is read point by point (a string value may span lines) and each point is checked
//! here before it is sent, so a malformed line is named by its line number in the file. A batch
//! the server refuses (a field of another type than its column, a row beyond retention) is
//! named by the file's line too: the server says which line of the batch it refused.
//!
//! Without `--skip-invalid` the import stops at the first refused line; every point before it
//! is written, nothing after it is, and the summary says so and how to resume
//! (`--from-line`). With `--skip-invalid` refused lines are left out, listed, and the rest is
//! written.

use std::io::{BufRead, BufReader};
use std::time::Instant;

use ebb_query::lp::{parse_line, ParseError, ValueError};
use indicatif::{ProgressBar, ProgressStyle};

use super::url;
use crate::error::Result;

/// The largest point the importer assembles (a string value spanning lines), in bytes and in
/// lines: past either, the point's first line is refused and reading goes on at its second.
/// (The point is parsed again as each line that could close its string comes, so the line
/// bound also bounds that work.)
const MAX_POINT_BYTES: usize = 1 << 20;
const MAX_POINT_LINES: usize = 1_000;

/// The most bytes sent in one request, whatever the batch's line count.
const MAX_BATCH_BYTES: usize = 8 << 20;

/// Refused lines listed one by one in the summary; past that, counted.
const LISTED: usize = 20;

/// What `ebb import` is asked to do.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// The server's base URL.
    pub base: String,
    /// The database to write into.
    pub db: String,
    /// The file (`-` for standard input).
    pub path: String,
    /// Timestamp precision of the file (`ns`, `us`, `ms`, `s`, `m`, `h`).
    pub precision: String,
    /// Points per request.
    pub batch: usize,
    /// The first line of the file to import (1-based): earlier lines are read, not sent.
    pub from_line: u64,
    /// Leave refused lines out and go on, instead of stopping at the first.
    pub skip_invalid: bool,
}

/// Why an import stopped before the end of the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// The file cannot be opened or read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A line of the file is not UTF-8.
    #[error("line {line} is not UTF-8")]
    NotUtf8 {
        /// The line (1-based).
        line: u64,
    },
    /// The request did not reach the server, or its answer did not arrive.
    #[error("cannot reach {base}: {source}")]
    Unreachable {
        /// The server's base URL.
        base: String,
        /// Why.
        source: Box<ureq::Error>,
    },
    /// The server refused a batch as a whole (not one of its lines): credentials, the
    /// database name, a busy or failing server.
    #[error("the server refused the batch of lines {first}-{last} ({status}): {message}")]
    Batch {
        /// The batch's first line in the file.
        first: u64,
        /// The batch's last line in the file.
        last: u64,
        /// The answer's status.
        status: u16,
        /// The server's message.
        message: String,
    },
    /// A line was refused and `--skip-invalid` was not given.
    #[error("line {line}: {reason}")]
    Line {
        /// The line (1-based).
        line: u64,
        /// Why, as the importer or the server says it.
        reason: String,
    },
}

/// What an import did: printed as its summary, whether it finished or stopped.
#[derive(Debug, Default)]
pub struct ImportReport {
    /// Points the server acknowledged.
    pub points_written: u64,
    /// The last line of the file whose points are all written or skipped (0 if none).
    pub done_through: u64,
    /// Lines read before `--from-line`, not sent.
    pub lines_before_start: u64,
    /// Refused lines left out (`--skip-invalid`): the first [`LISTED`], with why.
    pub skipped: Vec<(u64, String)>,
    /// How many lines were left out in all.
    pub skipped_count: u64,
}

impl ImportReport {
    fn skip(&mut self, line: u64, reason: String) {
        self.skipped_count += 1;
        if self.skipped.len() < LISTED {
            self.skipped.push((line, reason));
        }
    }

    /// The summary, as printed after the import.
    pub fn summary(&self, secs: f64) -> String {
        let mut out = format!(
            "wrote {} points from lines {}-{} in {secs:.2} s ({:.0} points/s)",
            self.points_written,
            self.lines_before_start + 1,
            self.done_through,
            self.points_written as f64 / secs.max(1e-9)
        );
        if self.points_written == 0 {
            out = format!("wrote no points in {secs:.2} s");
        }
        if self.skipped_count > 0 {
            let s = if self.skipped_count == 1 { "" } else { "s" };
            out.push_str(&format!("\nskipped {} refused line{s}:", self.skipped_count));
            for (line, why) in &self.skipped {
                out.push_str(&format!("\n  line {line}: {why}"));
            }
            let more = self.skipped_count - self.skipped.len() as u64;
            if more > 0 {
                out.push_str(&format!("\n  and {more} more"));
            }
        }
        out
    }
}

/// A point read from the file: its text (line ends included) and its first and last line.
struct Point {
    text: String,
    first: u64,
    last: u64,
}

/// Reads points from a line-protocol file, checking each.
struct Points<R> {
    reader: R,
    path: String,
    /// Lines read from the file so far.
    line: u64,
    /// Bytes read from the file so far.
    bytes: u64,
    /// Lines read but not yet made into points (a point that gave up hands back all lines but
    /// its first).
    queue: std::collections::VecDeque<(u64, String)>,
    eof: bool,
}

/// What the next lines of a file hold.
enum Read {
    /// A point that parses.
    Point(Point),
    /// A point that does not, at this line.
    Refused(u64, String),
    /// Blank or comment lines, through this one.
    Blank(u64),
}

impl<R: BufRead> Points<R> {
    fn next_line(&mut self) -> Result<Option<(u64, String)>, ImportError> {
        if let Some(l) = self.queue.pop_front() {
            return Ok(Some(l));
        }
        if self.eof {
            return Ok(None);
        }
        let mut buf = Vec::new();
        let n = self
            .reader
            .read_until(b'\n', &mut buf)
            .map_err(|source| ImportError::Read { path: self.path.clone(), source })?;
        if n == 0 {
            self.eof = true;
            return Ok(None);
        }
        self.line += 1;
        self.bytes += n as u64;
        let text = String::from_utf8(buf).map_err(|_| ImportError::NotUtf8 { line: self.line })?;
        Ok(Some((self.line, text)))
    }

    fn next(&mut self) -> Result<Option<Read>, ImportError> {
        let Some((first, text)) = self.next_line()? else { return Ok(None) };
        let trimmed = text.trim_end_matches(['\n', '\r']).trim_start_matches(' ');
        if trimmed.is_empty()
            || (trimmed.starts_with('#') && !trimmed.contains(|c: char| c.is_ascii_control()))
        {
            return Ok(Some(Read::Blank(first)));
        }
        let mut point = Point { text, first, last: first };
        let mut taken = vec![];
        // Whether the text read so far can have closed the open string: a line without `"`
        // cannot, so the point is parsed again only after one with.
        let mut may_close = true;
        loop {
            if may_close {
                let parsed = parse_line(point.text.trim_end_matches(['\n', '\r'])).map(|_| ());
                match parsed {
                    Ok(()) => return Ok(Some(Read::Point(point))),
                    Err(ParseError::Field { error: ValueError::UnterminatedString, .. }) => {}
                    Err(e) => return Ok(Some(self.refuse(first, e.to_string(), taken))),
                }
            }
            // A string value open at the end: it may go on on the next line, within bounds.
            if point.text.len() >= MAX_POINT_BYTES || taken.len() >= MAX_POINT_LINES {
                return Ok(Some(self.refuse(first, "unterminated string".into(), taken)));
            }
            match self.next_line()? {
                Some((no, more)) => {
                    may_close = more.contains('"');
                    point.text.push_str(&more);
                    point.last = no;
                    taken.push((no, more));
                }
                None => return Ok(Some(Read::Refused(first, "unterminated string".into()))),
            }
        }
    }

    /// Line `first` refused for `reason`; the lines taken after it for its point are read
    /// again.
    fn refuse(&mut self, first: u64, reason: String, taken: Vec<(u64, String)>) -> Read {
        for l in taken.into_iter().rev() {
            self.queue.push_front(l);
        }
        Read::Refused(first, reason)
    }
}

/// A batch being filled: its text and, per line of it, the file's line.
#[derive(Default)]
struct Batch {
    points: Vec<Point>,
    bytes: usize,
}

impl Batch {
    fn body(&self) -> String {
        let mut body = String::with_capacity(self.bytes + self.points.len());
        for p in &self.points {
            body.push_str(&p.text);
            if !p.text.ends_with('\n') {
                body.push('\n');
            }
        }
        body
    }

    /// The point that starts at line `n` (1-based) of [`Batch::body`].
    fn at_body_line(&self, n: usize) -> Option<usize> {
        let mut line = 1;
        for (i, p) in self.points.iter().enumerate() {
            if line == n {
                return Some(i);
            }
            line += (p.last - p.first + 1) as usize;
        }
        None
    }
}

/// Imports a file as `opts` says; the report of what was written, also when it stopped (with
/// the error that stopped it).
pub fn import(opts: &ImportOptions) -> (ImportReport, Option<ImportError>) {
    let mut report = ImportReport::default();
    let error = run(opts, &mut report).err();
    (report, error)
}

fn run(opts: &ImportOptions, report: &mut ImportReport) -> Result<(), ImportError> {
    let read_err = |source| ImportError::Read { path: opts.path.clone(), source };
    let (reader, total): (Box<dyn BufRead>, u64) = if opts.path == "-" {
        (Box::new(BufReader::new(std::io::stdin())), 0)
    } else {
        let f = std::fs::File::open(&opts.path).map_err(read_err)?;
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
    let sender = Sender { agent: super::agent(), endpoint: url(&opts.base, "/write"), opts };
    let mut points = Points {
        reader,
        path: opts.path.clone(),
        line: 0,
        bytes: 0,
        queue: Default::default(),
        eof: false,
    };
    let mut batch = Batch::default();
    let start = Instant::now();
    let result = (|| {
        while let Some(read) = points.next()? {
            let (first, last) = match &read {
                Read::Point(p) => (p.first, p.last),
                Read::Refused(line, _) | Read::Blank(line) => (*line, *line),
            };
            bar.set_position(points.bytes);
            if first < opts.from_line {
                // Before the first line asked for (a point that starts before it too).
                report.lines_before_start = last;
                report.done_through = last;
                continue;
            }
            match read {
                Read::Blank(line) if batch.points.is_empty() => report.done_through = line,
                Read::Blank(_) => {}
                Read::Refused(line, reason) if opts.skip_invalid => {
                    report.skip(line, reason);
                    if batch.points.is_empty() {
                        report.done_through = line;
                    }
                }
                Read::Refused(line, reason) => {
                    sender.flush(&mut batch, report)?;
                    return Err(ImportError::Line { line, reason });
                }
                Read::Point(p) => {
                    batch.bytes += p.text.len();
                    batch.points.push(p);
                    if batch.points.len() >= opts.batch || batch.bytes >= MAX_BATCH_BYTES {
                        sender.flush(&mut batch, report)?;
                        let secs = start.elapsed().as_secs_f64().max(1e-9);
                        bar.set_message(format!(
                            "{:.0} points/s",
                            report.points_written as f64 / secs
                        ));
                    }
                }
            }
        }
        sender.flush(&mut batch, report)?;
        report.done_through = report.done_through.max(points.line);
        Ok(())
    })();
    bar.finish_and_clear();
    result
}

struct Sender<'a> {
    agent: ureq::Agent,
    endpoint: String,
    opts: &'a ImportOptions,
}

impl Sender<'_> {
    /// Sends the batch; with `--skip-invalid`, the lines the server refuses are left out one
    /// at a time and the rest sent again. Empties the batch.
    fn flush(&self, batch: &mut Batch, report: &mut ImportReport) -> Result<(), ImportError> {
        while !batch.points.is_empty() {
            let (first, last) = (batch.points[0].first, batch.points[batch.points.len() - 1].last);
            let mut resp = self
                .agent
                .post(&self.endpoint)
                .query("db", &self.opts.db)
                .query("precision", &self.opts.precision)
                .send(batch.body())
                .map_err(|e| ImportError::Unreachable {
                    base: self.opts.base.clone(),
                    source: Box::new(e),
                })?;
            let status = resp.status().as_u16();
            if resp.status().is_success() {
                report.points_written += batch.points.len() as u64;
                report.done_through = last;
                *batch = Batch::default();
                return Ok(());
            }
            let text = resp.body_mut().read_to_string().unwrap_or_default();
            let answer: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            let message = answer["error"].as_str().map_or(text.clone(), str::to_string);
            let refused = answer["line"]
                .as_u64()
                .filter(|_| status == 400)
                .and_then(|n| batch.at_body_line(usize::try_from(n).ok()?));
            let Some(i) = refused else {
                return Err(ImportError::Batch { first, last, status, message });
            };
            // The server numbers the batch's lines: the file's line replaces its number.
            let n = answer["line"].as_u64().unwrap_or_default();
            let message = message.replace(&format!(" (line {n})"), "");
            let message =
                message.strip_prefix(&format!("line {n}: ")).unwrap_or(&message).to_string();
            let line = batch.points[i].first;
            if !self.opts.skip_invalid {
                // Every point before the refused one is written; none after it.
                batch.points.truncate(i);
                batch.bytes = batch.points.iter().map(|p| p.text.len()).sum();
                self.flush(batch, report)?;
                return Err(ImportError::Line { line, reason: message });
            }
            let p = batch.points.remove(i);
            batch.bytes -= p.text.len();
            report.skip(line, message);
            if batch.points.is_empty() {
                report.done_through = report.done_through.max(line);
            }
        }
        Ok(())
    }
}
