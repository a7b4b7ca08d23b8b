//! `ebb sql`: run SQL against a server, from `-c` or an interactive prompt.

use rustyline::error::ReadlineError;

use super::url;
use crate::error::{NodeError, Result};

/// Output format of `ebb sql`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// A text table per statement.
    Table,
    /// CSV with a header (the last statement's result).
    Csv,
    /// JSON rows (the last statement's result).
    Json,
}

impl OutputFormat {
    fn accept(self) -> &'static str {
        match self {
            OutputFormat::Table => "text/plain",
            OutputFormat::Csv => "text/csv",
            OutputFormat::Json => "application/json",
        }
    }
}

/// Runs `sql` on the server at `base`; returns the printed result, or the server's error.
pub fn run_one(base: &str, db: &str, sql: &str, format: OutputFormat) -> Result<String> {
    let agent = super::agent();
    let mut resp = agent
        .post(&url(base, "/v1/sql"))
        .query("db", db)
        .header("Accept", format.accept())
        .send(sql)
        .map_err(|e| format!("cannot reach {base}: {e}"))?;
    let status = resp.status();
    let body =
        resp.body_mut().read_to_string().map_err(|e| format!("reading the response: {e}"))?;
    if status.is_success() {
        let tag = resp
            .headers()
            .get("x-ebb-statement")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        // A table shows every statement's result; CSV and JSON the last one's, or its tag.
        if body.trim().is_empty() {
            return Ok(format!("{tag}\n"));
        }
        Ok(body)
    } else {
        let msg = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
            .unwrap_or(body);
        Err(NodeError::Client(format!("ERROR ({status}): {msg}")))
    }
}

/// The interactive prompt: statements end with `;`; `\q` or Ctrl-D quits.
pub fn repl(base: &str, db: &str, format: OutputFormat) -> Result<()> {
    let mut rl = rustyline::DefaultEditor::new().map_err(|e| e.to_string())?;
    println!("EbbDB at {base}, database {db}. End statements with ';'. \\q quits.");
    let mut buf = String::new();
    loop {
        let prompt = if buf.is_empty() { "ebb> " } else { "...> " };
        match rl.readline(prompt) {
            Ok(line) => {
                let t = line.trim();
                if buf.is_empty() && (t == "\\q" || t == "quit" || t == "exit") {
                    return Ok(());
                }
                buf.push_str(&line);
                buf.push('\n');
                if t.ends_with(';') {
                    let sql = std::mem::take(&mut buf);
                    let _ = rl.add_history_entry(sql.trim());
                    match run_one(base, db, &sql, format) {
                        Ok(out) => print!("{out}"),
                        Err(e) => eprintln!("{e}"),
                    }
                }
            }
            Err(ReadlineError::Interrupted) => buf.clear(),
            Err(ReadlineError::Eof) => return Ok(()),
            Err(e) => return Err(NodeError::Client(e.to_string())),
        }
    }
}
