//! Backups as the SQL layer sees them: `BACKUP TO '<uri>'` and `system.backups`.
//!
//! The server implements [`Backups`] (taking each shard's part, storing sets, see the
//! `ebb-backup` crate); the SQL layer reads the statement, checks that the user is an admin,
//! and shows what the server reports.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, RecordBatch, StringArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use crate::error::{QueryError, Result};
use crate::sql::shard::Intent;

/// A `BACKUP TO` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupRequest {
    /// The destination URI (a directory or `s3://bucket/prefix?...`).
    pub to: String,
    /// Seal every object with a key of its own, the keys sealed with a key the server keeps
    /// and destroys with the set (`BACKUP TO '...' ENCRYPTED`).
    pub encrypted: bool,
}

/// Where a backup is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BackupState {
    /// Taking and uploading parts.
    Running,
    /// Its set is complete at the destination.
    Done,
    /// It stopped; no set was written (what it uploaded is removed by a prune).
    Failed,
}

impl BackupState {
    /// How the state is shown.
    pub fn as_str(self) -> &'static str {
        match self {
            BackupState::Running => "running",
            BackupState::Done => "done",
            BackupState::Failed => "failed",
        }
    }
}

/// One backup: one this server ran (or runs), or a set found at a destination.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BackupRow {
    /// The set's id.
    pub id: String,
    /// The destination, without credentials.
    pub destination: String,
    /// Where it is.
    pub state: BackupState,
    /// `node` or `cluster`.
    pub kind: String,
    /// When it started (ms since the epoch): every write and delete acknowledged before is
    /// in it.
    pub started_ms: u64,
    /// When it finished, if it did.
    pub finished_ms: Option<u64>,
    /// Its parts (shards).
    pub parts: u64,
    /// Its files (so far, while it runs).
    pub files: u64,
    /// Of those, the files gone through.
    pub files_done: u64,
    /// The bytes of its files (so far, while it runs).
    pub bytes: u64,
    /// Of those, the bytes gone through.
    pub bytes_done: u64,
    /// The bytes this backup transferred (the rest were at the destination already).
    pub bytes_copied: u64,
    /// Its manifest's generation (each purge of deleted data writes the next), once written.
    pub generation: Option<u64>,
    /// Why it failed, or why its set cannot be read.
    pub error: Option<String>,
}

/// What [`Backups::journal`] answers: held until the request is done.
#[derive(Default)]
pub struct Journaled(pub Option<Box<dyn std::any::Any + Send + Sync>>);

impl std::fmt::Debug for Journaled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Journaled(held)" } else { "Journaled" })
    }
}

/// The server's backups.
#[async_trait]
pub trait Backups: Send + Sync + std::fmt::Debug {
    /// Runs a backup to completion (`BACKUP TO`), issued by `issuer`.
    async fn backup(&self, request: BackupRequest, issuer: &str) -> Result<BackupRow>;

    /// The backups this server runs or ran, and the sets at every destination it backed up
    /// to (`system.backups`).
    async fn list(&self) -> Result<Vec<BackupRow>>;

    /// Records `intent`, a request that deletes data, in the deletion journal of every
    /// destination holding sets (durably, before any shard applies it), so it reaches every
    /// set taken before it and every restore of one. The caller holds what it answers until
    /// the request is done (or failed): a server with no destination journals nothing, and
    /// a backup to a first destination waits for such requests to finish before it begins.
    async fn journal(&self, intent: &Intent) -> Result<Journaled>;

    /// Request `id` (journaled) has been applied by every shard: a set taken from now on
    /// holds it.
    async fn journal_done(&self, id: u64);

    /// Each backup set as a copy of each delete request it must be reached by, with its own
    /// state (`system.deletions`): pending while the journal holds a request the set may
    /// lack, persisted once a purge applied it.
    async fn deletion_copies(&self) -> Vec<crate::deletions::ReplicaDeletion>;
}

/// The schema of `system.backups` and of `BACKUP TO`'s answer.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("destination", DataType::Utf8, false),
        Field::new("state", DataType::Utf8, false),
        Field::new("kind", DataType::Utf8, false),
        crate::deletions::ts_field("started", false),
        crate::deletions::ts_field("finished", true),
        Field::new("parts", DataType::UInt64, false),
        Field::new("files", DataType::UInt64, false),
        Field::new("files_done", DataType::UInt64, false),
        Field::new("bytes", DataType::UInt64, false),
        Field::new("bytes_done", DataType::UInt64, false),
        Field::new("bytes_copied", DataType::UInt64, false),
        Field::new("generation", DataType::UInt64, true),
        Field::new("error", DataType::Utf8, true),
    ]))
}

/// `rows` as a batch of [`schema`].
pub fn batch(rows: &[BackupRow]) -> Result<RecordBatch> {
    use crate::deletions::ms_to_ns;
    use datafusion::arrow::array::TimestampNanosecondArray;
    let strings = |f: &dyn Fn(&BackupRow) -> String| -> ArrayRef {
        Arc::new(StringArray::from(rows.iter().map(f).collect::<Vec<_>>()))
    };
    let numbers = |f: &dyn Fn(&BackupRow) -> u64| -> ArrayRef {
        Arc::new(UInt64Array::from(rows.iter().map(f).collect::<Vec<_>>()))
    };
    let columns: Vec<ArrayRef> = vec![
        strings(&|r| r.id.clone()),
        strings(&|r| r.destination.clone()),
        strings(&|r| r.state.as_str().to_string()),
        strings(&|r| r.kind.clone()),
        Arc::new(TimestampNanosecondArray::from(
            rows.iter().map(|r| ms_to_ns(r.started_ms)).collect::<Vec<_>>(),
        )),
        Arc::new(TimestampNanosecondArray::from(
            rows.iter().map(|r| r.finished_ms.map(ms_to_ns)).collect::<Vec<_>>(),
        )),
        numbers(&|r| r.parts),
        numbers(&|r| r.files),
        numbers(&|r| r.files_done),
        numbers(&|r| r.bytes),
        numbers(&|r| r.bytes_done),
        numbers(&|r| r.bytes_copied),
        Arc::new(UInt64Array::from(rows.iter().map(|r| r.generation).collect::<Vec<_>>())),
        Arc::new(StringArray::from(rows.iter().map(|r| r.error.clone()).collect::<Vec<_>>())),
    ];
    RecordBatch::try_new(schema(), columns).map_err(|e| QueryError::Internal(e.to_string()))
}

/// True if `sql` is a `BACKUP` statement (its first word).
pub fn is_backup(sql: &str) -> bool {
    let word: String = sql.trim_start().chars().take_while(|c| c.is_ascii_alphabetic()).collect();
    word.eq_ignore_ascii_case("backup")
}

/// Parses `BACKUP TO '<uri>' [ENCRYPTED]` (optionally ending in `;`).
pub fn parse_backup(sql: &str) -> Result<BackupRequest> {
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
    let syntax = |msg: &str| {
        QueryError::invalid(format!(
            "BACKUP syntax: {msg}; write BACKUP TO '<directory or s3://bucket/prefix>' \
             [ENCRYPTED]"
        ))
    };
    let tokens =
        Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().map_err(QueryError::syntax)?;
    let mut t = tokens.into_iter().filter(|t| !matches!(t, Token::Whitespace(_)));
    match t.next() {
        Some(Token::Word(w)) if w.value.eq_ignore_ascii_case("backup") => {}
        _ => return Err(syntax("expected BACKUP")),
    }
    match t.next() {
        Some(Token::Word(w)) if w.value.eq_ignore_ascii_case("to") && w.quote_style.is_none() => {}
        _ => return Err(syntax("expected TO")),
    }
    let to = match t.next() {
        Some(Token::SingleQuotedString(v)) => v,
        _ => return Err(syntax("expected the destination as a string literal")),
    };
    let mut encrypted = false;
    let mut next = t.next();
    if let Some(Token::Word(w)) = &next {
        if w.value.eq_ignore_ascii_case("encrypted") && w.quote_style.is_none() {
            encrypted = true;
            next = t.next();
        }
    }
    match next {
        None | Some(Token::EOF) | Some(Token::SemiColon) => {}
        Some(other) => return Err(syntax(&format!("unexpected {other}"))),
    }
    if t.any(|x| x != Token::EOF) {
        return Err(QueryError::invalid("give one statement after BACKUP's ;"));
    }
    Ok(BackupRequest { to, encrypted })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backup_statements_parse_and_others_are_refused() {
        assert!(is_backup("  backup to '/x'"));
        assert!(!is_backup("backups"));
        assert_eq!(
            parse_backup("BACKUP TO 's3://b/p?endpoint=http://h:1';").unwrap(),
            BackupRequest { to: "s3://b/p?endpoint=http://h:1".into(), encrypted: false }
        );
        assert!(parse_backup("backup to '/x' encrypted;").unwrap().encrypted);
        assert_eq!(parse_backup("backup to '/a''b'").unwrap().to, "/a'b");
        for bad in [
            "BACKUP",
            "BACKUP TO",
            "BACKUP TO x",
            "BACKUP '/x'",
            "BACKUP TO '/x' NOW",
            "BACKUP TO '/x' ENCRYPTED ENCRYPTED",
            "BACKUP TO '/x'; SELECT 1",
        ] {
            assert!(parse_backup(bad).is_err(), "{bad} parsed");
        }
    }
}
