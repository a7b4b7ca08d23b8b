//! A cluster's backups: the node that runs `BACKUP TO` holds the destination's shared lock and
//! asks each shard's leader (and the metadata group's) for its part (`BackupPart`); the leader
//! waits until its replica applied everything its group committed (a read barrier), so every
//! write and delete acknowledged before the backup started is in the part, checkpoints the
//! replica with the last log entry it holds, uploads the files the destination lacks and
//! answers with the part. A part whose leader changes midway is taken again from the new one.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ebb_backup::crypto::{Key, KeyDir, ObjectKeys};
use ebb_backup::transfer::{private_dir, upload_part, Encrypting, HashCache, PartSource};
use ebb_backup::{
    BackupError, BackupStore, Destination, LockKind, LogPosition, Part, Progress, SetKind, Throttle,
};
use ebb_query::QueryError;
use ebb_raft::sm::Replica;
use serde::{Deserialize, Serialize};
use tonic::Status;

use super::proto::cluster_client::ClusterClient;
use super::proto::{BackupPartReply, ShardCall};
use super::router::Router;
use crate::backup::{Job, PartTaker};

/// What a part is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PartGroup {
    /// A shard (the call's `shard`).
    Shard,
    /// The metadata group.
    Meta,
}

/// A `BackupPart` call's body.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PartRequest {
    /// The set the part is for.
    pub set_id: String,
    /// The destination (a URI without secrets: the leader's own environment or credentials
    /// file gives the keys).
    pub to: String,
    /// Bytes a second the upload may go at.
    pub rate: Option<u64>,
    /// What the part is of.
    pub group: PartGroup,
    /// For an encrypted set: the objects sealed before that the part may name again, with
    /// their keys (every other file is sealed with a key of its own).
    #[serde(default)]
    pub encrypt: Option<ObjectKeys>,
}

/// How long one part may take before it is asked again.
const PART_TIMEOUT: Duration = Duration::from_secs(6 * 3600);

/// How long a part is retried while its group has no leader.
const PART_RETRY: Duration = Duration::from_secs(60);

/// How often the coordinator renews its lock while a part is taken elsewhere.
const RENEW_WHILE_WAITING: Duration = Duration::from_secs(60);

/// The parts of a cluster, taken on each group's leader.
#[derive(Debug)]
pub struct ClusterParts {
    /// Weak: the router holds the backups that hold this.
    router: std::sync::Weak<Router>,
}

impl ClusterParts {
    /// Parts of the cluster `router` reaches.
    pub fn new(router: &Arc<Router>) -> ClusterParts {
        ClusterParts { router: Arc::downgrade(router) }
    }

    fn router(&self) -> Result<Arc<Router>, Status> {
        self.router.upgrade().ok_or_else(|| Status::unavailable("the node is stopping"))
    }

    /// Asks the leader of `shard` (or of the metadata group) for its part of `job`, retrying
    /// while the group has no leader; renews `job`'s lock while it waits.
    async fn ask(&self, shard: u64, group: PartGroup, job: &mut Job) -> Result<Part, BackupError> {
        let req = PartRequest {
            set_id: job.set_id.clone(),
            to: job.store.destination().to_string(),
            rate: job.rate,
            group,
            encrypt: job.encrypting.as_ref().map(Encrypting::known),
        };
        let body = ebb_query::sql::shard::request::encode(&req);
        let deadline = tokio::time::Instant::now() + PART_RETRY;
        let reply = loop {
            let call = self.call(shard, group, body.clone());
            tokio::pin!(call);
            let answer = loop {
                tokio::select! {
                    r = &mut call => break r,
                    _ = tokio::time::sleep(RENEW_WHILE_WAITING) => job.store.keep(&job.lock).await?,
                }
            };
            match answer {
                Ok(reply) => break reply,
                // No leader, or the leader went away mid-call (its node stopped: the call is
                // cancelled or its connection reset): asked again, of the leader then.
                Err(s)
                    if matches!(
                        s.code(),
                        tonic::Code::Unavailable | tonic::Code::Cancelled | tonic::Code::Unknown
                    ) && tokio::time::Instant::now() < deadline =>
                {
                    tracing::debug!(shard, ?group, why = %s.message(), "asking for a part again");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(s) => {
                    return Err(BackupError::Source(
                        format!("{}: {}", describe(shard, group), s.message()).into(),
                    ))
                }
            }
        };
        let part: Part = serde_json::from_slice(&reply.part)
            .map_err(|e| BackupError::Source(format!("{}: {e}", describe(shard, group)).into()))?;
        match (&mut job.encrypting, reply.keys.is_empty()) {
            (None, true) => {}
            (Some(enc), false) => {
                let keys: ObjectKeys = serde_json::from_slice(&reply.keys).map_err(|e| {
                    BackupError::Source(format!("{}'s keys: {e}", describe(shard, group)).into())
                })?;
                enc.adopt(&keys);
            }
            // A leader of a build that cannot seal a part answers without keys.
            (Some(_), true) => {
                return Err(BackupError::Source(
                    format!("{}: its leader did not encrypt it", describe(shard, group)).into(),
                ))
            }
            (None, false) => {
                return Err(BackupError::Source(
                    format!("{}: sealed, though not asked to be", describe(shard, group)).into(),
                ))
            }
        }
        job.progress.add_done(reply.files, reply.bytes, reply.bytes_copied, reply.objects_copied);
        Ok(part)
    }

    /// One `BackupPart` call to the node this one takes for the group's leader.
    async fn call(
        &self,
        shard: u64,
        group: PartGroup,
        body: Vec<u8>,
    ) -> Result<BackupPartReply, Status> {
        let router = self.router()?;
        let addr = match group {
            PartGroup::Shard => router.leader_addr(shard).map_err(|e| {
                Status::unavailable(format!("no leader known for shard {shard}: {e}"))
            })?,
            PartGroup::Meta => match router.meta().leader() {
                Some((_, addr)) => addr,
                None => return Err(Status::unavailable("the metadata group has no leader")),
            },
        };
        let ch = router
            .conns()
            .channel(&addr)
            .map_err(|e| Status::unavailable(format!("{addr}: {e}")))?;
        let mut client = ClusterClient::new(ch).max_decoding_message_size(super::MAX_MESSAGE_BYTES);
        let call = ShardCall {
            shard,
            hops: super::router::MAX_HOPS,
            hashes: None,
            version: ebb_query::sql::shard::request::WIRE_VERSION,
            body,
        };
        match tokio::time::timeout(PART_TIMEOUT, client.backup_part(call)).await {
            Ok(r) => r.map(tonic::Response::into_inner),
            Err(_) => {
                Err(Status::deadline_exceeded(format!("{addr}: no part in {PART_TIMEOUT:?}")))
            }
        }
    }
}

fn describe(shard: u64, group: PartGroup) -> String {
    match group {
        PartGroup::Shard => format!("shard {shard}'s part"),
        PartGroup::Meta => "the metadata part".to_string(),
    }
}

#[async_trait]
impl PartTaker for ClusterParts {
    fn kind(&self) -> SetKind {
        SetKind::Cluster
    }

    async fn shards(&self) -> Result<Vec<u64>, QueryError> {
        let router = self.router().map_err(|s| QueryError::Unavailable(s.message().into()))?;
        let view = router.meta().view();
        // A shard splitting (or not yet trimmed after a split) holds rows its span will not:
        // parts taken now could miss rows or overlap.
        if let Some(s) = view.shards.values().find(|s| s.split_from.is_some() || s.untrimmed) {
            return Err(QueryError::Unavailable(format!(
                "shard {} is being split; back up once the split is done (see system.shards)",
                s.id
            )));
        }
        Ok(view.shards.keys().copied().collect())
    }

    async fn take(&self, shard: u64, job: &mut Job) -> Result<Part, BackupError> {
        self.ask(shard, PartGroup::Shard, job).await
    }

    async fn meta(&self, job: &mut Job) -> Result<Option<Part>, BackupError> {
        // Shard 0 names the metadata group in the part (shards are numbered from 1).
        self.ask(0, PartGroup::Meta, job).await.map(Some)
    }
}

/// The data directory of the node holding `replica` (`<data>/<group>/shard`).
fn data_dir_of(replica: &Replica) -> PathBuf {
    replica.root().parent().and_then(Path::parent).map(Path::to_path_buf).unwrap_or_default()
}

/// Takes the part `req` asks for from `replica` (this node leads its group, and has applied
/// everything the group committed): checkpoint, upload, the reply.
pub(super) async fn take_here(
    replica: Arc<Replica>,
    shard: u64,
    req: PartRequest,
) -> Result<BackupPartReply, BackupError> {
    // The id names local directories: only the form a coordinator makes is taken.
    if ebb_backup::set::set_id_ms(&req.set_id).is_none() {
        return Err(BackupError::Uri {
            uri: req.to.clone(),
            why: format!("{:?} is not a backup set id", req.set_id),
        });
    }
    let data = data_dir_of(&replica);
    let backup_dir = data.join("backup");
    let name_of_group = match req.group {
        PartGroup::Shard => shard.to_string(),
        PartGroup::Meta => "meta".to_string(),
    };
    let name = format!("{}-{name_of_group}", req.set_id);
    let dest = Destination::parse(&req.to)?;
    let store = BackupStore::open(&dest, Throttle::new(req.rate)).await?;
    let lock = store.lock(LockKind::Shared, &name).await?;
    // A directory of this take's own: a coordinator that asks again (its call failed in
    // transit) while an earlier take of the same part still runs here must not have either
    // take remove the other's checkpoint.
    let take = TAKES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let staging = backup_dir.join("staging").join(format!("{name}.{take}"));
    // A cache per group: each part's files are of its own engine.
    let cache_path = backup_dir.join(format!("hashes-{name_of_group}"));
    let taken = async {
        private_dir(&backup_dir.join("staging"))?;
        let _ = tokio::fs::remove_dir_all(&staging).await;
        let (r, dir) = (replica.clone(), staging.clone());
        let (seq, applied) = tokio::task::spawn_blocking(move || r.checkpoint(&dir))
            .await
            .map_err(|e| BackupError::Source(Box::new(e)))?
            .map_err(|e| BackupError::Source(Box::new(e)))?;
        let mut stored = store.object_sizes().await?;
        let mut cache = HashCache::load(&cache_path);
        let progress = Progress::default();
        let src = PartSource {
            shard,
            dir: &staging,
            seq,
            applied: applied.map(|(term, index)| LogPosition { term, index }),
        };
        let mut encrypting = req.encrypt.as_ref().map(|known| {
            let mut e = Encrypting::default();
            e.learn(known);
            e
        });
        let part = upload_part(
            &store,
            &lock,
            src,
            &mut stored,
            &mut cache,
            &progress,
            encrypting.as_mut(),
        )
        .await;
        if let Err(e) = cache.save(&cache_path) {
            tracing::warn!(error = %e, "keeping the backup hash cache");
        }
        let part = part?;
        let p = progress.snapshot();
        let body = serde_json::to_vec(&part).map_err(|e| BackupError::Source(Box::new(e)))?;
        let keys = match &encrypting {
            Some(e) => serde_json::to_vec(&e.used).map_err(|e| BackupError::Source(Box::new(e)))?,
            None => Vec::new(),
        };
        Ok(BackupPartReply {
            keys,
            part: body,
            files: p.files_total,
            bytes: p.bytes_total,
            bytes_copied: p.bytes_copied,
            objects_copied: p.objects_copied,
        })
    };
    let reply = taken.await;
    store.unlock(&lock).await;
    let _ = tokio::fs::remove_dir_all(&staging).await;
    reply
}

/// Takes of parts started on this node, numbering their staging directories.
static TAKES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The gRPC status of a part that could not be taken.
pub(super) fn part_status(e: BackupError) -> Status {
    match e {
        e @ (BackupError::Uri { .. } | BackupError::NoSuchSet(_)) => {
            Status::invalid_argument(e.to_string())
        }
        e @ BackupError::Busy(_) => Status::failed_precondition(e.to_string()),
        e => Status::internal(e.to_string()),
    }
}

/// Where the node holding `replica` keeps the keys of encrypted sets.
pub(super) fn key_dir_of(replica: &Replica) -> KeyDir {
    crate::backup::key_dir(&data_dir_of(replica).join("backup"))
}

/// Answers a `BackupKeys` call with the keys in `keys`: keeps those the call gives, and
/// answers with those it asks for that are kept here.
pub(super) fn keys_here(
    keys: &KeyDir,
    req: super::proto::BackupKeysRequest,
) -> Result<super::proto::BackupKeysReply, BackupError> {
    for k in req.keep.into_iter().take(MAX_KEYS_ASKED) {
        let key = Key::from_hex(&k.key)
            .ok_or_else(|| BackupError::Source(format!("key {} is not a key", k.id).into()))?;
        keys.keep(&k.id, &key)?;
    }
    let mut reply = super::proto::BackupKeysReply::default();
    for id in req.get.iter().take(MAX_KEYS_ASKED) {
        match keys.get(id, "") {
            Ok(key) => {
                reply.keys.push(super::proto::BackupKey { id: id.clone(), key: key.to_hex() })
            }
            // Not kept here, not a key id, or unreadable: the others are still answered.
            Err(e) => tracing::debug!(key = %id, error = %e, "a backup key asked for"),
        }
    }
    Ok(reply)
}

/// The most keys one `BackupKeys` call keeps, and is answered with.
const MAX_KEYS_ASKED: usize = 4096;
