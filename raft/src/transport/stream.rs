//! Snapshot streaming: the sender reads the snapshot's files in chunks after a header holding
//! the leader's vote and the snapshot descriptor; the receiver writes them into a fresh
//! directory of the group's replica and validates every file before the snapshot is
//! installed. A receive that fails or is dropped part way removes its directory at once: a
//! partial copy of the leader's files may hold values of any delete, and would keep every
//! delete on the replica from being persisted until it was cleared away.

use std::path::PathBuf;

use futures::{Stream, StreamExt};

use openraft::{Snapshot, Vote};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_stream::wrappers::ReceiverStream;

use super::proto::snapshot_chunk::Kind;
use super::proto::{FileChunk, SnapshotChunk, SnapshotHeader};
use super::{encode, SNAPSHOT_CHUNK_BYTES};
use crate::error::ReplicaError;
use crate::sm::snapshot::{write_atomic, Descriptor, DESCRIPTOR};
use crate::sm::{Replica, ShardSnapshot};
use crate::types::{NodeId, TypeConfig};

/// Why a snapshot could not be sent.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    /// The snapshot's descriptor could not be read or encoded.
    #[error(transparent)]
    Replica(#[from] ReplicaError),
    /// The vote could not be encoded.
    #[error(transparent)]
    Encoding(#[from] postcard::Error),
    /// Reading the descriptor panicked or was cancelled.
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
}

/// Why a snapshot stream was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReceiveError {
    /// The header's vote does not decode.
    #[error(transparent)]
    Vote(#[from] postcard::Error),
    /// The descriptor is invalid, the files fail validation, or the replica could not make
    /// room for them.
    #[error(transparent)]
    Replica(#[from] ReplicaError),
    /// The sender's call failed.
    #[error(transparent)]
    Call(Box<tonic::Status>),
    /// Writing a received file failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A received file could not be created.
    #[error("{}: {source}", path.display())]
    Create {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A header after the first chunk.
    #[error("a second snapshot header")]
    SecondHeader,
    /// Data for a file before the last one, or for no file of the descriptor.
    #[error("file {0} out of order")]
    FileOutOfOrder(usize),
    /// A file of the descriptor that is not empty, skipped.
    #[error("no data received for {0}")]
    NoData(String),
    /// A chunk that does not continue its file.
    #[error("chunk at {offset} of file {file}, expected {expected}")]
    Gap {
        /// Where the chunk starts.
        offset: u64,
        /// The file's index in the descriptor.
        file: usize,
        /// The bytes of the file received so far.
        expected: u64,
    },
    /// The stream ended before a file that is not empty.
    #[error("stream ended before {0}")]
    EndedBefore(String),
    /// Validating the files panicked or was cancelled.
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
}

impl From<tonic::Status> for ReceiveError {
    fn from(s: tonic::Status) -> Self {
        ReceiveError::Call(Box::new(s))
    }
}

/// The chunks of `snapshot` for `target`, read by a background task as the stream is consumed,
/// and the bytes of its files.
pub(crate) async fn send(
    group: u64,
    target: NodeId,
    vote: &Vote<NodeId>,
    snapshot: &Snapshot<TypeConfig>,
    pacer: std::sync::Arc<super::Pacer>,
) -> Result<(ReceiverStream<SnapshotChunk>, u64), SendError> {
    let snap = (*snapshot.snapshot).clone();
    let d = tokio::task::spawn_blocking(move || snap.descriptor()).await??;
    let header =
        SnapshotHeader { group, target, vote: encode(vote)?, descriptor: d.encode()?.into() };
    let bytes = d.total_bytes();
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let dir = snapshot.snapshot.dir().to_path_buf();
    tokio::spawn(async move {
        if tx.send(SnapshotChunk { kind: Some(Kind::Header(header)) }).await.is_err() {
            return;
        }
        if let Err(e) = send_files(&dir, &d, &tx, &pacer).await {
            // The stream ends early; the receiver finds files short and refuses the snapshot.
            tracing::warn!(dir = %dir.display(), %e, "reading a snapshot to send");
        }
    });
    Ok((ReceiverStream::new(rx), bytes))
}

async fn send_files(
    dir: &std::path::Path,
    d: &Descriptor,
    tx: &tokio::sync::mpsc::Sender<SnapshotChunk>,
    pacer: &super::Pacer,
) -> std::io::Result<()> {
    for (i, f) in d.files.iter().enumerate() {
        let mut file = tokio::fs::File::open(dir.join(&f.name)).await?;
        let mut offset = 0u64;
        loop {
            let mut buf = vec![0u8; SNAPSHOT_CHUNK_BYTES];
            let n = file.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            buf.truncate(n);
            pacer.take(n as u64).await;
            let chunk = FileChunk { file: i as u32, offset, data: buf.into() };
            offset += n as u64;
            if tx.send(SnapshotChunk { kind: Some(Kind::Data(chunk)) }).await.is_err() {
                return Ok(()); // the call was cancelled
            }
        }
    }
    Ok(())
}

/// A snapshot received in full and validated: the leader's vote, and the snapshot.
pub(crate) struct Received {
    pub vote: Vote<NodeId>,
    pub descriptor: Descriptor,
    pub snapshot: ShardSnapshot,
}

/// A directory being received into: removed when dropped unless [`Partial::keep`] was called
/// (a receive that fails, or whose call is dropped, leaves nothing behind).
struct Partial {
    dir: PathBuf,
    kept: bool,
}

impl Partial {
    fn keep(mut self) -> PathBuf {
        self.kept = true;
        std::mem::take(&mut self.dir)
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(dir = %self.dir.display(), %e, "removing a partly received snapshot");
            }
        }
    }
}

/// Receives the files after `header` into a fresh incoming directory of `replica`, then
/// validates them against the descriptor. On failure, or if the returned future is dropped,
/// the directory is removed.
pub(crate) async fn receive<S>(
    replica: &Replica,
    header: SnapshotHeader,
    mut stream: S,
) -> Result<Received, ReceiveError>
where
    S: Stream<Item = Result<SnapshotChunk, tonic::Status>> + Unpin,
{
    let vote: Vote<NodeId> = postcard::from_bytes(&header.vote)?;
    let d = Descriptor::decode(&header.descriptor, replica.root())?;
    let dir = replica.incoming_dir(&d.meta.snapshot_id)?;
    let partial = Partial { dir, kept: false };
    let dir = partial.dir.as_path();
    let mut current: Option<(usize, tokio::fs::File, u64)> = None;
    let mut next_file = 0usize;
    while let Some(chunk) = stream.next().await.transpose()? {
        let Some(Kind::Data(c)) = chunk.kind else {
            return Err(ReceiveError::SecondHeader);
        };
        let idx = c.file as usize;
        let open_new = match &current {
            Some((i, _, _)) => *i != idx,
            None => true,
        };
        if open_new {
            if let Some((_, f, _)) = current.take() {
                f.sync_all().await?;
            }
            if idx < next_file || idx >= d.files.len() {
                return Err(ReceiveError::FileOutOfOrder(idx));
            }
            for skipped in &d.files[next_file..idx] {
                if skipped.len != 0 {
                    return Err(ReceiveError::NoData(skipped.name.clone()));
                }
                create(&dir.join(&skipped.name)).await?;
            }
            let f = create(&dir.join(&d.files[idx].name)).await?;
            current = Some((idx, f, 0));
            next_file = idx + 1;
        }
        let Some((_, f, written)) = current.as_mut() else { continue };
        if c.offset != *written {
            return Err(ReceiveError::Gap { offset: c.offset, file: idx, expected: *written });
        }
        f.write_all(&c.data).await?;
        *written += c.data.len() as u64;
    }
    if let Some((_, f, _)) = current.take() {
        f.sync_all().await?;
    }
    for rest in &d.files[next_file..] {
        if rest.len != 0 {
            return Err(ReceiveError::EndedBefore(rest.name.clone()));
        }
        create(&dir.join(&rest.name)).await?;
    }
    let encoded = d.encode()?;
    let check = ShardSnapshot::at(dir.to_path_buf());
    tokio::task::spawn_blocking(move || {
        write_atomic(&check.dir().join(DESCRIPTOR), &encoded)?;
        check.validate()
    })
    .await??;
    Ok(Received { vote, descriptor: d, snapshot: ShardSnapshot::at(partial.keep()) })
}

async fn create(path: &PathBuf) -> Result<tokio::fs::File, ReceiveError> {
    tokio::fs::File::create(path)
        .await
        .map_err(|source| ReceiveError::Create { path: path.clone(), source })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::path::Path;
    use std::sync::Arc;
    use std::time::Duration;

    use ebb_storage::{Options, WriteBatch};
    use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Membership};

    use super::*;
    use crate::types::Command;

    /// A replica with a few applied entries, flushed, and one of its snapshots.
    fn source(dir: &Path) -> (Arc<Replica>, Snapshot<TypeConfig>) {
        let r = Replica::open(dir, Options::default()).unwrap();
        let id = |i| LogId::new(CommittedLeaderId::new(1, 1), i);
        let mut entries = vec![Entry {
            log_id: id(0),
            payload: EntryPayload::Membership(Membership::new(vec![[1, 2].into()], None)),
        }];
        for i in 1..=4u64 {
            let mut b = WriteBatch::new();
            for s in 0..50u64 {
                b.put(
                    [7, 0, 0, 0].iter().chain(&s.to_be_bytes()).copied().collect::<Vec<_>>(),
                    i.to_string(),
                );
            }
            entries.push(Entry {
                log_id: id(i),
                payload: EntryPayload::Normal(Command::Batch(b.to_bytes())),
            });
            r.apply(entries.drain(..)).unwrap();
            r.engine().flush().unwrap();
        }
        let (d, snap) = r.build_snapshot().unwrap();
        (r, Snapshot { meta: d.meta, snapshot: Box::new(snap) })
    }

    /// The header and the data chunks of `snapshot` as sent.
    async fn chunks(snapshot: &Snapshot<TypeConfig>) -> (SnapshotHeader, Vec<SnapshotChunk>) {
        let vote = Vote::new_committed(1, 1);
        let (stream, _) = send(1, 2, &vote, snapshot, Arc::default()).await.unwrap();
        let mut all: Vec<SnapshotChunk> = stream.collect().await;
        let Some(Kind::Header(h)) = all.remove(0).kind else { panic!("no header first") };
        (h, all)
    }

    fn incoming(r: &Replica) -> usize {
        std::fs::read_dir(r.root().join("incoming")).map_or(0, |d| d.count())
    }

    #[tokio::test]
    async fn a_receive_that_fails_or_is_dropped_part_way_leaves_no_files() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (_src, snapshot) = source(a.path());
        let (header, data) = chunks(&snapshot).await;
        assert!(data.len() > 1, "the test needs a snapshot of several chunks");
        let dest = Replica::open(b.path(), Options::default()).unwrap();

        // The sender's call ends with an error after the first chunk.
        let cut =
            futures::stream::iter([Ok(data[0].clone()), Err(tonic::Status::cancelled("gone"))]);
        assert!(receive(&dest, header.clone(), cut).await.is_err());
        assert_eq!(incoming(&dest), 0);

        // The call is dropped while the receive waits for more.
        let stalled =
            futures::stream::iter([Ok(data[0].clone())]).chain(futures::stream::pending());
        let late = tokio::time::timeout(
            Duration::from_millis(200),
            receive(&dest, header.clone(), stalled),
        );
        assert!(late.await.is_err());
        assert_eq!(incoming(&dest), 0);

        // A stream that ends early is refused, with nothing left either.
        let short = futures::stream::iter(data[..1].iter().cloned().map(Ok));
        assert!(receive(&dest, header.clone(), short).await.is_err());
        assert_eq!(incoming(&dest), 0);

        // The whole stream is received and kept for the install.
        let whole = futures::stream::iter(data.into_iter().map(Ok));
        let got = receive(&dest, header, whole).await.unwrap();
        assert_eq!(incoming(&dest), 1);
        assert_eq!(got.descriptor.meta, snapshot.meta);
        got.snapshot.validate().unwrap();
    }
}
