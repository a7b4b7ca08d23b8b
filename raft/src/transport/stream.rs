//! Snapshot streaming: the sender reads the snapshot's files in chunks after a header holding
//! the leader's vote and the snapshot descriptor; the receiver writes them into a fresh
//! directory of the group's replica and validates every file before the snapshot is
//! installed.

use std::path::PathBuf;

use openraft::{Snapshot, Vote};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_stream::wrappers::ReceiverStream;

use super::proto::snapshot_chunk::Kind;
use super::proto::{FileChunk, SnapshotChunk, SnapshotHeader};
use super::{encode, SNAPSHOT_CHUNK_BYTES};
use crate::sm::snapshot::{write_atomic, Descriptor, DESCRIPTOR};
use crate::sm::{Replica, ShardSnapshot};
use crate::types::{NodeId, TypeConfig};

/// The chunks of `snapshot` for `target`, read by a background task as the stream is consumed,
/// and the bytes of its files.
pub(crate) async fn send(
    group: u64,
    target: NodeId,
    vote: &Vote<NodeId>,
    snapshot: &Snapshot<TypeConfig>,
    pacer: std::sync::Arc<super::Pacer>,
) -> Result<(ReceiverStream<SnapshotChunk>, u64), String> {
    let snap = (*snapshot.snapshot).clone();
    let d = tokio::task::spawn_blocking(move || snap.descriptor())
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    let header = SnapshotHeader {
        group,
        target,
        vote: encode(vote).map_err(|e| e.to_string())?,
        descriptor: d.encode().map_err(|e| e.to_string())?.into(),
    };
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

/// Receives the files after `header` into a fresh incoming directory of `replica`, then
/// validates them against the descriptor.
pub(crate) async fn receive(
    replica: &Replica,
    header: SnapshotHeader,
    mut stream: tonic::Streaming<SnapshotChunk>,
) -> Result<Received, String> {
    let vote: Vote<NodeId> = postcard::from_bytes(&header.vote).map_err(|e| e.to_string())?;
    let d = Descriptor::decode(&header.descriptor, replica.root()).map_err(|e| e.to_string())?;
    let dir = replica.incoming_dir(&d.meta.snapshot_id).map_err(|e| e.to_string())?;
    let mut current: Option<(usize, tokio::fs::File, u64)> = None;
    let mut next_file = 0usize;
    while let Some(chunk) = stream.message().await.map_err(|e| e.to_string())? {
        let Some(Kind::Data(c)) = chunk.kind else {
            return Err("a second snapshot header".into());
        };
        let idx = c.file as usize;
        let open_new = match &current {
            Some((i, _, _)) => *i != idx,
            None => true,
        };
        if open_new {
            if let Some((_, f, _)) = current.take() {
                f.sync_all().await.map_err(|e| e.to_string())?;
            }
            if idx < next_file || idx >= d.files.len() {
                return Err(format!("file {idx} out of order"));
            }
            for skipped in &d.files[next_file..idx] {
                if skipped.len != 0 {
                    return Err(format!("no data received for {}", skipped.name));
                }
                create(&dir.join(&skipped.name)).await?;
            }
            let f = create(&dir.join(&d.files[idx].name)).await?;
            current = Some((idx, f, 0));
            next_file = idx + 1;
        }
        let Some((_, f, written)) = current.as_mut() else { continue };
        if c.offset != *written {
            return Err(format!("chunk at {} of file {idx}, expected {written}", c.offset));
        }
        f.write_all(&c.data).await.map_err(|e| e.to_string())?;
        *written += c.data.len() as u64;
    }
    if let Some((_, f, _)) = current.take() {
        f.sync_all().await.map_err(|e| e.to_string())?;
    }
    for rest in &d.files[next_file..] {
        if rest.len != 0 {
            return Err(format!("stream ended before {}", rest.name));
        }
        create(&dir.join(&rest.name)).await?;
    }
    let encoded = d.encode().map_err(|e| e.to_string())?;
    let snapshot = ShardSnapshot::at(dir.clone());
    let check = snapshot.clone();
    tokio::task::spawn_blocking(move || {
        write_atomic(&check.dir().join(DESCRIPTOR), &encoded)?;
        check.validate()
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| {
        let _ = std::fs::remove_dir_all(&dir);
        e.to_string()
    })?;
    Ok(Received { vote, descriptor: d, snapshot })
}

async fn create(path: &PathBuf) -> Result<tokio::fs::File, String> {
    tokio::fs::File::create(path).await.map_err(|e| format!("{}: {e}", path.display()))
}
