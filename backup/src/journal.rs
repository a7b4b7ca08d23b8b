//! The deletion journal: every request that deletes data (`DELETE`, `ERASE`, `DROP TABLE`)
//! issued while sets are kept at a destination, stored beside them as
//! `journal/<request id:020>.entry` (JSON and a `blake3:` checksum line, as manifests are).
//!
//! A set is a copy every delete must reach. The server applies each entry to every set taken
//! before it (a purge, which writes the set's next generation and records the request in
//! [`crate::BackupSet::purged`]), and a restore applies every entry before it renames the
//! restored directory into place, so even a set restored before its purge ran never serves
//! what was deleted after it was taken. Entries are opaque to this crate: `request` is the
//! request as the server applies it (applying one a set already holds changes nothing).

use futures::TryStreamExt;
use object_store::path::Path as Key;
use object_store::{ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};

use crate::error::{BackupError, InStore, Result};
use crate::set::{seal, unseal};
use crate::store::BackupStore;

/// The entry format this build writes and reads.
pub const ENTRY_FORMAT: u32 = 1;

/// The largest entry read (a request's text is bounded far below this).
const MAX_ENTRY: u64 = 4 << 20;

/// One delete request, as the journal keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournalEntry {
    /// [`ENTRY_FORMAT`].
    pub format: u32,
    /// The request id (every shard records the request under it).
    pub id: u64,
    /// What it is (`delete`, `erase`, `DROP TABLE`).
    pub kind: String,
    /// When it was issued (ms since the epoch).
    pub issued_at_ms: u64,
    /// Its deadline (ms since the epoch), if it has one.
    pub deadline_ms: Option<u64>,
    /// When every shard of the server had applied it (ms since the epoch); `None` while it
    /// may still be running. A set taken after this holds it.
    pub completed_ms: Option<u64>,
    /// The request as the server applies it.
    pub request: serde_json::Value,
    /// The server or cluster that issued it (its sets' [`crate::BackupSet::origin`]); `None`
    /// in entries written before origins were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
}

impl JournalEntry {
    /// Its name in the store.
    pub fn key(&self) -> Key {
        entry_key(self.id)
    }

    /// Its bytes.
    pub fn encode(&self) -> Vec<u8> {
        seal(serde_json::to_vec_pretty(self).unwrap_or_default())
    }

    /// Reads entry `bytes`, stored as `object` (for errors).
    pub fn decode(bytes: &[u8], object: &str) -> Result<JournalEntry> {
        let bad = |why: String| BackupError::Manifest {
            set: "journal".into(),
            object: object.to_string(),
            why,
        };
        let body = unseal(bytes).map_err(bad)?;
        let e: JournalEntry =
            serde_json::from_str(body).map_err(|e| bad(format!("unreadable: {e}")))?;
        if e.format != ENTRY_FORMAT {
            return Err(bad(format!(
                "format {} (this build reads format {ENTRY_FORMAT})",
                e.format
            )));
        }
        if entry_key(e.id).as_ref() != object {
            return Err(bad(format!("names request {} where its place says otherwise", e.id)));
        }
        Ok(e)
    }

    /// True if set taken from `started_ms` may lack it (it was not complete when the set
    /// began), so it must be applied to that set.
    pub fn may_be_missing_from(&self, started_ms: u64) -> bool {
        self.completed_ms.is_none_or(|done| done >= started_ms)
    }

    /// True if `set` may lack it and no purge applied it there yet. A cluster's request
    /// completes by one node's clock and its set begins by another's: it is taken as missing
    /// from a set that began up to [`CLOCK_SKEW_MS`] after it completed.
    pub fn missing_from(&self, set: &crate::BackupSet) -> bool {
        if let (Some(ours), Some(theirs)) = (&self.origin, &set.origin) {
            // Another server's set: its data never held what this request deleted.
            if ours != theirs {
                return false;
            }
        }
        let margin = match set.kind {
            crate::SetKind::Node => 0,
            _ => CLOCK_SKEW_MS,
        };
        self.may_be_missing_from(set.started_ms.saturating_sub(margin)) && !set.purged(self.id)
    }
}

/// How far apart the clocks of a cluster's nodes may be, for deciding which requests a set may
/// lack (a request is applied again to a set that holds it at no cost but the purge).
pub const CLOCK_SKEW_MS: u64 = 10_000;

/// The name of request `id`'s entry.
pub fn entry_key(id: u64) -> Key {
    Key::from(format!("journal/{id:020}.entry"))
}

impl BackupStore {
    /// Writes (or replaces) `entry`.
    pub async fn put_journal(&self, entry: &JournalEntry) -> Result<()> {
        let key = entry.key();
        self.raw()
            .put(&key, PutPayload::from(entry.encode()))
            .await
            .doing(|| format!("writing {key}"))?;
        self.durable(&key, true).await
    }

    /// Every journal entry, oldest request first; an entry that cannot be read is an error
    /// naming it (a restore must not go on without it).
    pub async fn journal(&self) -> Result<Vec<JournalEntry>> {
        let metas: Vec<_> = self
            .raw()
            .list(Some(&Key::from("journal")))
            .try_collect()
            .await
            .doing(|| "listing the deletion journal".to_string())?;
        let mut out = Vec::with_capacity(metas.len());
        for m in metas {
            let key = m.location;
            // Sized by what the GET answers, not the listing (the object may have changed).
            let bytes = match self.get_small(&key, MAX_ENTRY).await {
                Err(BackupError::Manifest { object, why, .. }) => {
                    return Err(BackupError::Manifest { set: "journal".into(), object, why })
                }
                r => r?,
            };
            out.push(JournalEntry::decode(&bytes, key.as_ref())?);
        }
        out.sort_by_key(|e| (e.issued_at_ms, e.id));
        Ok(out)
    }

    /// Removes request `id`'s entry.
    pub async fn remove_journal(&self, id: u64) -> Result<()> {
        let key = entry_key(id);
        match self.raw().delete(&key).await {
            Ok(()) => self.durable(&key, false).await,
            Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(source) => Err(BackupError::Store { what: format!("removing {key}"), source }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_round_trips_and_any_change_is_caught() {
        let e = JournalEntry {
            format: ENTRY_FORMAT,
            id: 42,
            kind: "erase".into(),
            issued_at_ms: 1_700_000_000_000,
            deadline_ms: Some(1_700_000_600_000),
            completed_ms: None,
            origin: None,
            request: serde_json::json!({"op": {"Erase": {"tag": "user", "value": "alice"}}}),
        };
        let key = e.key().to_string();
        assert_eq!(key, "journal/00000000000000000042.entry");
        let bytes = e.encode();
        assert_eq!(JournalEntry::decode(&bytes, &key).unwrap(), e);
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x01;
            assert!(JournalEntry::decode(&b, &key).is_err(), "byte {i} flipped went unseen");
        }
        assert!(JournalEntry::decode(&bytes, "journal/00000000000000000043.entry").is_err());
        assert!(e.may_be_missing_from(0));
        let done = JournalEntry { completed_ms: Some(1_700_000_001_000), ..e };
        assert!(done.may_be_missing_from(1_700_000_001_000));
        assert!(!done.may_be_missing_from(1_700_000_001_001));
    }
}
