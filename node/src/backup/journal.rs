//! The local outbox of the deletion journal: a delete request is written here (synced) before
//! any shard applies it, then copied to the journal of every destination this server backed
//! up to ([`ebb_backup::journal`]); an entry leaves the outbox once every destination has it
//! in its final form (with the time every shard had applied it).

use std::path::{Path, PathBuf};

use ebb_backup::journal::{JournalEntry, ENTRY_FORMAT};
use ebb_backup::BackupError;
use ebb_query::sql::shard::Intent;

/// `<data dir>/backup/journal`.
#[derive(Debug)]
pub struct Outbox {
    dir: PathBuf,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BackupError + '_ {
    move |source| BackupError::Io { path: path.to_path_buf(), source }
}

impl Outbox {
    /// The outbox under `backup_dir`.
    pub fn new(backup_dir: &Path) -> Outbox {
        Outbox { dir: backup_dir.join("journal") }
    }

    fn path(&self, id: u64) -> PathBuf {
        self.dir.join(format!("{id:020}.entry"))
    }

    /// The entry of `intent`, not yet complete.
    pub fn entry(intent: &Intent) -> Result<JournalEntry, BackupError> {
        Ok(JournalEntry {
            format: ENTRY_FORMAT,
            id: intent.id,
            kind: intent.kind.clone(),
            issued_at_ms: intent.issued_at_ms,
            deadline_ms: intent.deadline_ms,
            completed_ms: None,
            request: serde_json::to_value(intent).map_err(|e| BackupError::Source(Box::new(e)))?,
            // Set when it is written to a destination (the registry's origin).
            origin: None,
        })
    }

    /// Writes `entry` durably (a new file synced, renamed into place, the directory synced).
    pub fn put(&self, entry: &JournalEntry) -> Result<(), BackupError> {
        ebb_backup::transfer::private_dir(&self.dir)?;
        let path = self.path(entry.id);
        let tmp = path.with_extension("tmp");
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
            f.write_all(&entry.encode()).map_err(io(&tmp))?;
            f.sync_all().map_err(io(&tmp))?;
        }
        std::fs::rename(&tmp, &path).map_err(io(&path))?;
        // Whatever completion was recorded beside an entry of that id is not this one's.
        if entry.completed_ms.is_none() {
            let _ = std::fs::remove_file(self.done_path(entry.id));
        }
        std::fs::File::open(&self.dir).and_then(|d| d.sync_all()).map_err(io(&self.dir))?;
        Ok(())
    }

    fn done_path(&self, id: u64) -> PathBuf {
        self.dir.join(format!("{id:020}.done"))
    }

    /// Records that request `id` completed on every shard at `at_ms`, without a sync: on the
    /// delete's path, and losing it costs nothing (an entry found incomplete at start is
    /// taken as complete then, later than it was, so a set may only be purged of it again).
    pub fn complete(&self, id: u64, at_ms: u64) {
        let path = self.done_path(id);
        if let Err(e) = std::fs::write(&path, at_ms.to_string()) {
            tracing::warn!(path = %path.display(), error = %e, "recording a request as done");
        }
    }

    /// Request `id`'s entry, if the outbox has it, with its completion if recorded.
    pub fn get(&self, id: u64) -> Option<JournalEntry> {
        let path = self.path(id);
        let bytes = std::fs::read(&path).ok()?;
        let key = ebb_backup::journal::entry_key(id);
        match JournalEntry::decode(&bytes, key.as_ref()) {
            Ok(mut e) => {
                if e.completed_ms.is_none() {
                    // A time before the request was issued is no completion of it (a write
                    // cut short, or a leftover of another entry): the entry stays incomplete.
                    e.completed_ms = std::fs::read_to_string(self.done_path(id))
                        .ok()
                        .and_then(|t| t.trim().parse::<u64>().ok())
                        .filter(|&at| at >= e.issued_at_ms);
                }
                Some(e)
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "an unreadable journal entry");
                None
            }
        }
    }

    /// Every entry waiting, oldest request first.
    pub fn entries(&self) -> Vec<JournalEntry> {
        let Ok(rd) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        let mut out: Vec<JournalEntry> = rd
            .flatten()
            .filter_map(|e| {
                let name = e.file_name();
                let id = name.to_str()?.strip_suffix(".entry")?.parse().ok()?;
                self.get(id)
            })
            .collect();
        out.sort_by_key(|e| (e.issued_at_ms, e.id));
        out
    }

    /// Removes request `id`'s entry.
    pub fn remove(&self, id: u64) {
        let _ = std::fs::remove_file(self.path(id));
        let _ = std::fs::remove_file(self.done_path(id));
    }
}

/// The request a journal entry holds.
pub fn intent_of(entry: &JournalEntry) -> Result<Intent, BackupError> {
    serde_json::from_value(entry.request.clone()).map_err(|e| BackupError::Manifest {
        set: "journal".into(),
        object: entry.key().to_string(),
        why: format!("not a request this build reads: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_completed_apart_and_removed_whole() {
        let dir = tempfile::tempdir().unwrap();
        let outbox = Outbox::new(dir.path());
        let intent = Intent {
            id: 42,
            database: "public".into(),
            sql: "ERASE WHERE user = 'a'".into(),
            op: None,
            kind: "erase".into(),
            deadline_ms: None,
            issued_by: "admin".into(),
            issued_at_ms: 1,
        };
        outbox.put(&Outbox::entry(&intent).unwrap()).unwrap();
        assert_eq!(outbox.get(42).unwrap().completed_ms, None);
        outbox.complete(42, 77);
        assert_eq!(outbox.get(42).unwrap().completed_ms, Some(77));
        assert_eq!(outbox.entries().len(), 1, "the completion is no entry of its own");
        // A completion cut short (before the request's issue) or empty reads as none: the
        // entry is taken as incomplete, never as complete too early.
        std::fs::write(outbox.done_path(42), "0").unwrap();
        assert_eq!(outbox.get(42).unwrap().completed_ms, None);
        std::fs::write(outbox.done_path(42), "").unwrap();
        assert_eq!(outbox.get(42).unwrap().completed_ms, None);
        // An entry written anew drops a completion left beside it.
        outbox.complete(42, 77);
        outbox.put(&Outbox::entry(&intent).unwrap()).unwrap();
        assert_eq!(outbox.get(42).unwrap().completed_ms, None);
        outbox.remove(42);
        assert!(outbox.get(42).is_none());
        assert_eq!(std::fs::read_dir(&outbox.dir).unwrap().count(), 0);
    }
}
