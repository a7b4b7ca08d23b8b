//! A backup set's manifest: what the set holds (a part per shard, each a list of files and the
//! objects holding them), when it was taken, and its generation (a purge that rewrites a part
//! writes the next generation).
//!
//! Stored as `sets/<id>/<generation:08>.set`: the manifest as JSON (readable with any tool),
//! then a line `blake3:<hex>` over those bytes. The highest generation is the set; a manifest
//! whose checksum does not match is damaged, and so is the set. A set exists once its manifest
//! is written, which is the last step of a backup, so a backup that stopped midway leaves only
//! objects no set names (prune removes them).

use serde::{Deserialize, Serialize};

use crate::error::{BackupError, Result};

/// The manifest format this build writes and reads.
pub const FORMAT: u32 = 1;

/// An immutable object in the store, named by the BLAKE3 hash of its content.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ObjectRef {
    /// The BLAKE3 hash of the content, in hex.
    pub hash: String,
    /// The content's length in bytes.
    pub len: u64,
}

impl ObjectRef {
    /// The object's name in the store: `objects/<first two hex digits>/<hash>`.
    pub fn key(&self) -> object_store::path::Path {
        object_key(&self.hash)
    }
}

/// The largest object a set may name (no engine file comes near it).
pub const MAX_OBJECT: u64 = 1 << 40;

/// True for a file name a part may hold: a plain name in one directory, as engines write them.
pub fn valid_file_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

/// True for an object's hash: BLAKE3 in lower-case hex.
pub fn valid_hash(hash: &str) -> bool {
    hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The name of the object with hash `hash`.
pub fn object_key(hash: &str) -> object_store::path::Path {
    let fan = hash.get(..2).unwrap_or("00");
    object_store::path::Path::from(format!("objects/{fan}/{hash}"))
}

/// One file of a part and the object holding it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// The file's name in the part's directory.
    pub name: String,
    /// Its content.
    pub object: ObjectRef,
}

/// A position in a shard's Raft log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogPosition {
    /// The leader's term.
    pub term: u64,
    /// The entry's index.
    pub index: u64,
}

/// One shard's data in a set: a consistent copy of its engine (a checkpoint).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    /// The shard (0 on a single node).
    pub shard: u64,
    /// The engine sequence number the part holds everything up to.
    pub seq: u64,
    /// The last Raft log entry the part holds, for a shard replica; `None` on a single node.
    pub applied: Option<LogPosition>,
    /// Its files.
    pub files: Vec<FileEntry>,
}

impl Part {
    /// The bytes of its files.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.object.len).sum()
    }
}

/// What a set was taken of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SetKind {
    /// A single node (one part, shard 0).
    Node,
    /// A cluster (a part per shard and the cluster's metadata).
    Cluster,
}

impl SetKind {
    /// How the kind is shown.
    pub fn as_str(self) -> &'static str {
        match self {
            SetKind::Node => "node",
            SetKind::Cluster => "cluster",
        }
    }
}

/// A backup set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupSet {
    /// The manifest format ([`FORMAT`]).
    pub format: u32,
    /// The set's id (sortable by the time it was taken).
    pub id: String,
    /// What it was taken of.
    pub kind: SetKind,
    /// When the backup started (ms since the epoch): every write and delete acknowledged
    /// before this is in the set.
    pub started_ms: u64,
    /// When its manifest was first written (ms since the epoch).
    pub finished_ms: u64,
    /// Its generation: 1 when taken, one more each time a purge rewrote it.
    pub generation: u64,
    /// The version of the server that took it.
    pub server_version: String,
    /// Its parts, by shard.
    pub parts: Vec<Part>,
    /// A cluster's metadata group (nodes, shards and their hash spans, users and grants), for
    /// a cluster's set.
    #[serde(default)]
    pub meta: Option<Part>,
    /// The delete requests applied to it after it was taken (by purges; see
    /// [`crate::journal`]).
    #[serde(default)]
    pub purged: Vec<Purged>,
    /// For an encrypted set: its objects' keys, sealed with the set's key (see
    /// [`crate::crypto`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<crate::crypto::SetEncryption>,
    /// The server or cluster it was taken of (see [`crate::store::BackupStore::claim`]);
    /// `None` in sets taken before origins were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
}

/// A delete request a purge applied to a set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Purged {
    /// The request id.
    pub id: u64,
    /// When the set's generation holding it was written (ms since the epoch): from then on no
    /// object of the set holds what it deleted.
    pub at_ms: u64,
    /// Its deadline (ms since the epoch), if it had one.
    pub deadline_ms: Option<u64>,
}

impl BackupSet {
    /// True if a purge applied request `id` to the set.
    pub fn purged(&self, id: u64) -> bool {
        self.purged.iter().any(|p| p.id == id)
    }
}

impl BackupSet {
    /// The bytes of its files.
    pub fn bytes(&self) -> u64 {
        self.all_parts().map(Part::bytes).sum()
    }

    /// The number of its files.
    pub fn files(&self) -> usize {
        self.all_parts().map(|p| p.files.len()).sum()
    }

    /// Every object it references.
    pub fn objects(&self) -> impl Iterator<Item = &ObjectRef> {
        self.all_parts().flat_map(|p| p.files.iter().map(|f| &f.object))
    }

    /// Its shards' parts, then its metadata's.
    pub fn all_parts(&self) -> impl Iterator<Item = &Part> {
        self.parts.iter().chain(self.meta.iter())
    }

    /// The name of this generation's manifest.
    pub fn manifest_key(&self) -> object_store::path::Path {
        manifest_key(&self.id, self.generation)
    }

    /// The manifest's bytes.
    pub fn encode(&self) -> Vec<u8> {
        // A struct of strings and numbers always serializes.
        seal(serde_json::to_vec_pretty(self).unwrap_or_default())
    }

    /// Reads manifest `bytes`, stored as `object` (for errors).
    pub fn decode(bytes: &[u8], object: &str) -> Result<BackupSet> {
        let set = set_of_key(object).unwrap_or_default();
        let bad = |why: String| BackupError::Manifest {
            set: set.clone(),
            object: object.to_string(),
            why,
        };
        let body = unseal(bytes).map_err(bad)?;
        let format: FormatOnly =
            serde_json::from_str(body).map_err(|e| bad(format!("unreadable: {e}")))?;
        if format.format != FORMAT {
            return Err(bad(format!(
                "format {} (this build reads format {FORMAT})",
                format.format
            )));
        }
        let s: BackupSet =
            serde_json::from_str(body).map_err(|e| bad(format!("unreadable: {e}")))?;
        if s.id != set {
            return Err(bad(format!("names set {} where its place says {set}", s.id)));
        }
        s.check().map_err(bad)?;
        Ok(s)
    }

    /// Refuses what no server writes, so nothing read from a destination (which others may
    /// write to) names a file outside a part, an object outside the store, or sizes beyond
    /// any real file.
    fn check(&self) -> std::result::Result<(), String> {
        if self.generation == 0 || self.generation > u64::from(u32::MAX) {
            return Err(format!("generation {}", self.generation));
        }
        let mut shards = std::collections::HashSet::new();
        for (i, part) in self.all_parts().enumerate() {
            // The metadata part is the last; a cluster's shards are never u64::MAX.
            if i < self.parts.len() && !shards.insert(part.shard) {
                return Err(format!("shard {} has two parts", part.shard));
            }
            let mut names = std::collections::HashSet::new();
            for f in &part.files {
                if !valid_file_name(&f.name) {
                    return Err(format!("{:?} is not a file name of a part", f.name));
                }
                if !names.insert(f.name.as_str()) {
                    return Err(format!("file {} is named twice in shard {}", f.name, part.shard));
                }
                if !valid_hash(&f.object.hash) {
                    return Err(format!("{:?} is not an object's hash", f.object.hash));
                }
                if f.object.len > MAX_OBJECT {
                    return Err(format!("file {} of {} bytes", f.name, f.object.len));
                }
            }
        }
        Ok(())
    }
}

/// `body` (JSON) followed by a line `blake3:<hex>` over it.
pub(crate) fn seal(mut body: Vec<u8>) -> Vec<u8> {
    body.push(b'\n');
    let sum = blake3::hash(&body);
    body.extend_from_slice(format!("blake3:{}\n", sum.to_hex()).as_bytes());
    body
}

/// The body [`seal`] wrapped, if its checksum matches.
pub(crate) fn unseal(bytes: &[u8]) -> std::result::Result<&str, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not text".to_string())?;
    let trimmed = text.strip_suffix('\n').ok_or("cut short")?;
    let at = trimmed.rfind('\n').ok_or("cut short")?;
    let (body, line) = (&text[..at + 1], &trimmed[at + 1..]);
    let want = line.strip_prefix("blake3:").ok_or("no checksum line")?;
    if blake3::hash(body.as_bytes()).to_hex().as_str() != want {
        return Err("its checksum does not match".into());
    }
    Ok(body)
}

/// A manifest's format alone (read before the rest, so a newer format is named as such).
#[derive(Deserialize)]
struct FormatOnly {
    format: u32,
}

/// The name of generation `generation` of set `id`'s manifest.
pub fn manifest_key(id: &str, generation: u64) -> object_store::path::Path {
    object_store::path::Path::from(format!("sets/{id}/{generation:08}.set"))
}

/// The set and generation a manifest's name gives, if it is one.
pub fn parse_manifest_key(key: &str) -> Option<(String, u64)> {
    let rest = key.strip_prefix("sets/")?;
    let (id, file) = rest.split_once('/')?;
    let generation = file.strip_suffix(".set")?.parse().ok()?;
    Some((id.to_string(), generation))
}

fn set_of_key(key: &str) -> Option<String> {
    parse_manifest_key(key).map(|(id, _)| id)
}

/// A new set id for a backup started at `now_ms` (ms since the epoch): its UTC time,
/// `YYYYMMDDTHHMMSS.mmmZ`, so ids sort as the sets were taken.
pub fn new_set_id(now_ms: u64) -> String {
    let secs = now_ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        now_ms % 1000
    )
}

/// The time (ms since the epoch) a set id names, if it is one [`new_set_id`] makes.
pub fn set_id_ms(id: &str) -> Option<u64> {
    let b = id.as_bytes();
    let ok = b.len() == 20
        && b[8] == b'T'
        && b[15] == b'.'
        && b[19] == b'Z'
        && b.iter().enumerate().all(|(i, c)| matches!(i, 8 | 15 | 19) || c.is_ascii_digit());
    if !ok {
        return None;
    }
    let n = |r: std::ops::Range<usize>| id[r].parse::<u64>().ok();
    let (y, m, d) = (n(0..4)?, n(4..6)?, n(6..8)?);
    let (hh, mm, ss, ms) = (n(9..11)?, n(11..13)?, n(13..15)?, n(16..19)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 59 {
        return None;
    }
    let days = days_from_civil(y as i64, m as u32, d as u32);
    let secs = u64::try_from(days).ok()? * 86_400 + hh * 3600 + mm * 60 + ss;
    Some(secs * 1000 + ms)
}

/// The id for a set started at `now_ms` at a destination whose newest set is `newest`: its
/// time, or just after `newest` if the clock is behind it (ids must sort as sets were
/// taken: the newest is restored by default and prune keeps the newest).
pub fn next_set_id(now_ms: u64, newest: Option<&str>) -> String {
    let id = new_set_id(now_ms);
    match newest {
        Some(n) if id.as_str() <= n => match set_id_ms(n) {
            Some(ms) => new_set_id(ms + 1),
            None => id,
        },
        _ => id,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The proleptic Gregorian date of `days` since 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> BackupSet {
        BackupSet {
            format: FORMAT,
            id: new_set_id(1_700_000_000_123),
            kind: SetKind::Node,
            started_ms: 1_700_000_000_123,
            finished_ms: 1_700_000_001_000,
            generation: 1,
            server_version: "0.1.0".into(),
            parts: vec![Part {
                shard: 0,
                seq: 42,
                applied: None,
                files: vec![FileEntry {
                    name: "00000001.sst".into(),
                    object: ObjectRef { hash: "ab".repeat(32), len: 10 },
                }],
            }],
            purged: vec![],
            meta: None,
            encryption: None,
            origin: None,
        }
    }

    #[test]
    fn ids_are_utc_times() {
        assert_eq!(new_set_id(1_700_000_000_123), "20231114T221320.123Z");
        assert_eq!(new_set_id(0), "19700101T000000.000Z");
        assert_eq!(new_set_id(951_782_400_000), "20000229T000000.000Z");
        for ms in [0, 1_700_000_000_123, 951_782_400_000, 4_102_444_799_999] {
            assert_eq!(set_id_ms(&new_set_id(ms)), Some(ms));
        }
        assert_eq!(set_id_ms("20231114T221320.123"), None);
        assert_eq!(set_id_ms("2023111XT221320.123Z"), None);
    }

    #[test]
    fn a_clock_behind_the_newest_set_still_makes_a_newer_id() {
        let newest = new_set_id(1_700_000_000_123);
        assert_eq!(next_set_id(1_600_000_000_000, Some(&newest)), "20231114T221320.124Z");
        assert_eq!(next_set_id(1_700_000_000_123, Some(&newest)), "20231114T221320.124Z");
        assert_eq!(next_set_id(1_700_000_000_500, Some(&newest)), "20231114T221320.500Z");
        assert_eq!(next_set_id(1_700_000_000_500, None), "20231114T221320.500Z");
    }

    #[test]
    fn a_manifest_round_trips_and_any_change_is_caught() {
        let s = sample();
        let key = s.manifest_key().to_string();
        assert_eq!(key, "sets/20231114T221320.123Z/00000001.set");
        assert_eq!(parse_manifest_key(&key), Some((s.id.clone(), 1)));
        let bytes = s.encode();
        assert_eq!(BackupSet::decode(&bytes, &key).unwrap(), s);
        // Every single flipped byte is caught.
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x01;
            assert!(BackupSet::decode(&b, &key).is_err(), "byte {i} flipped went unseen");
        }
        // So is a cut.
        for cut in [1, bytes.len() / 2, bytes.len() - 1] {
            assert!(BackupSet::decode(&bytes[..cut], &key).is_err());
        }
        // A manifest stored under another set's name is refused.
        let other = manifest_key("20991231T000000.000Z", 1).to_string();
        assert!(BackupSet::decode(&bytes, &other).is_err());
    }

    #[test]
    fn a_newer_format_is_named() {
        let mut s = sample();
        s.format = FORMAT + 1;
        let key = s.manifest_key().to_string();
        let e = BackupSet::decode(&s.encode(), &key).unwrap_err().to_string();
        assert!(e.contains(&format!("format {}", FORMAT + 1)), "{e}");
    }
}
