//! Verification of delete requests (`ebb audit verify`) and the report of every request
//! (`ebb audit report`).
//!
//! A verification asks every replica that holds data of the request's shards to read every
//! place it stores entries (memtables, SSTs, WAL segments and, in a cluster, Raft log segments,
//! snapshots, and engine directories a snapshot install replaced) for values the request's
//! deletes cover, and to say what it read and what it found. It also accounts for every byte of
//! every file in the replica's directories (the engine's and, in a cluster, the Raft log's):
//! each run of bytes is referenced by a live structure and verified, or zero; any other run is
//! reported with its file and offset. Each part of each backup set is scanned the same way
//! (see `backup::BackupService::audit`). Zero found and nothing unaccounted on every replica
//! and every set, and at least one copy that knows the request, is the pass.

pub mod report;

use ebb_query::Database;
use ebb_storage::audit::SourceScan;
use serde::{Deserialize, Serialize};

/// What one place of one replica held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceReport {
    /// `memtable`, `sst`, `wal`, `raft log`, `snapshot sst`, ...
    pub kind: String,
    /// File name.
    pub name: String,
    /// Its size.
    pub bytes: u64,
    /// Entries read.
    pub entries: u64,
    /// Covered values found.
    pub found: u64,
    /// The first of them (`key-hex@seq`).
    pub examples: Vec<String>,
}

impl From<SourceScan> for SourceReport {
    fn from(s: SourceScan) -> Self {
        SourceReport {
            kind: s.kind,
            name: s.name,
            bytes: s.bytes,
            entries: s.entries,
            found: s.found,
            examples: s.examples.iter().map(|f| format!("{}@{}", hex(&f.key), f.seq)).collect(),
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// What one replica's scan found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaReport {
    /// Shard (0 on a single node).
    pub shard: u64,
    /// Node (0 on a single node).
    pub node: u64,
    /// False if the replica's ledger has no delete of the request (nothing was deleted here,
    /// or the ledger has forgotten it).
    pub holds_request: bool,
    /// Every place scanned.
    pub sources: Vec<SourceReport>,
    /// Why the replica could not be scanned, if it could not.
    pub error: Option<String>,
    /// Files of the replica whose every byte was accounted for (see
    /// [`ebb_storage::audit::FileAccount`]), and their bytes.
    #[serde(default)]
    pub files_accounted: u64,
    /// Bytes of those files.
    #[serde(default)]
    pub bytes_accounted: u64,
    /// Byte runs no live structure references and that are not zero.
    #[serde(default)]
    pub unaccounted: Vec<Unaccounted>,
    /// The copy scanned when it is not a replica: `backup <set id>` (the part of shard
    /// `shard` of that set, downloaded and checked object by object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy: Option<String>,
}

/// A run of bytes on disk nothing accounts for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unaccounted {
    /// What the file is (`sst`, `wal`, `raft log`, `unknown`...).
    pub kind: String,
    /// The file, relative to the replica's directory.
    pub file: String,
    /// Offset of the run.
    pub offset: u64,
    /// Its length.
    pub len: u64,
}

impl ReplicaReport {
    /// An empty report of the replica of `shard` on `node`.
    pub fn new(shard: u64, node: u64) -> ReplicaReport {
        ReplicaReport {
            shard,
            node,
            holds_request: false,
            sources: vec![],
            error: None,
            files_accounted: 0,
            bytes_accounted: 0,
            unaccounted: vec![],
            copy: None,
        }
    }

    /// Covered values found on the replica.
    pub fn found(&self) -> u64 {
        self.sources.iter().map(|s| s.found).sum()
    }

    /// Adds the accounts of the files of directory `dir` (relative to the replica's).
    pub fn add_accounts(&mut self, dir: &str, accounts: &[ebb_storage::audit::FileAccount]) {
        for a in accounts {
            self.files_accounted += 1;
            self.bytes_accounted += a.bytes;
            let file = if dir.is_empty() { a.name.clone() } else { format!("{dir}/{}", a.name) };
            self.unaccounted.extend(a.unaccounted.iter().map(|&(offset, len)| Unaccounted {
                kind: a.kind.to_string(),
                file: file.clone(),
                offset,
                len,
            }));
        }
    }
}

/// The verification of one request over every replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyReport {
    /// Request id.
    pub id: u64,
    /// One per replica asked.
    pub replicas: Vec<ReplicaReport>,
    /// Files (and memtables) scanned in all.
    pub sources_scanned: u64,
    /// Bytes they hold.
    pub bytes_scanned: u64,
    /// Entries read.
    pub entries_scanned: u64,
    /// Covered values found in all.
    pub found: u64,
    /// Every replica scanned, at least one knew the request, nothing found, and every byte of
    /// every file accounted for.
    pub pass: bool,
}

impl VerifyReport {
    /// The report over `replicas`.
    pub fn new(id: u64, mut replicas: Vec<ReplicaReport>) -> VerifyReport {
        replicas.sort_by_key(|r| (r.shard, r.node));
        let sources = replicas.iter().flat_map(|r| &r.sources);
        let (mut n, mut bytes, mut entries) = (0, 0, 0);
        for s in sources {
            n += 1;
            bytes += s.bytes;
            entries += s.entries;
        }
        let found = replicas.iter().map(ReplicaReport::found).sum();
        let pass = found == 0
            && replicas.iter().all(|r| r.error.is_none() && r.unaccounted.is_empty())
            && replicas.iter().any(|r| r.holds_request);
        VerifyReport {
            id,
            replicas,
            sources_scanned: n,
            bytes_scanned: bytes,
            entries_scanned: entries,
            found,
            pass,
        }
    }
}

/// The engine delete ids of request `id` in `db`'s ledger (empty if it has none).
pub fn request_delete_ids(db: &Database, id: u64) -> Vec<u64> {
    db.engine()
        .delete_requests()
        .into_iter()
        .find(|r| r.request.id == id)
        .map(|r| r.delete_ids)
        .unwrap_or_default()
}

/// Scans `db`'s engine (a single node's database) for request `id`.
pub fn audit_database(db: &Database, id: u64, shard: u64, node: u64) -> ReplicaReport {
    let mut r = ReplicaReport::new(shard, node);
    let ids = request_delete_ids(db, id);
    if ids.is_empty() {
        return r;
    }
    r.holds_request = true;
    let engine = db.engine();
    match engine.coverage(&ids).and_then(|c| engine.audit(&c)) {
        Ok(scans) => r.sources = scans.into_iter().map(SourceReport::from).collect(),
        Err(e) => r.error = Some(e.to_string()),
    }
    match engine.account() {
        Ok(accounts) => r.add_accounts("", &accounts),
        Err(e) => r.error = Some(e.to_string()),
    }
    r
}
