//! The Raft log against openraft's own storage test suite, and across reopenings.
//!
//! The suite runs the log next to the engine state machine (a shard replica), so it also
//! checks applying, applied state and snapshot transfer between two replicas.

use ebb_raft::{Command, LogOptions, LogStore, NodeId, Replica, ShardStateMachine, TypeConfig};
use openraft::storage::RaftLogStorage;
use openraft::testing::{StoreBuilder, Suite};
use openraft::{Entry, EntryPayload, LogId, RaftLogReader, StorageError, StorageIOError};

fn engine_opts() -> ebb_storage::Options {
    ebb_storage::Options { write_buffer_size: 64 << 10, ..Default::default() }
}

struct Builder {
    opts: LogOptions,
}

impl StoreBuilder<TypeConfig, LogStore, ShardStateMachine, tempfile::TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, ShardStateMachine), StorageError<NodeId>> {
        let dir = tempfile::tempdir().map_err(|e| StorageIOError::write_logs(&e))?;
        let log = LogStore::open(dir.path().join("log"), self.opts.clone())
            .map_err(|e| StorageIOError::write_logs(&e))?;
        let replica = Replica::open(dir.path().join("shard"), engine_opts())
            .map_err(|e| StorageIOError::write_state_machine(&e))?;
        Ok((dir, log, ShardStateMachine::new(replica)))
    }
}

#[test]
fn passes_the_openraft_storage_suite() {
    Suite::test_all(Builder { opts: LogOptions::default() }).expect("suite");
}

#[test]
fn passes_the_suite_with_tiny_segments() {
    // A new segment every few entries: appends, truncation and purge cross segment boundaries.
    Suite::test_all(Builder { opts: LogOptions { segment_bytes: 200, ..Default::default() } })
        .expect("suite");
}

fn entry(term: u64, index: u64) -> Entry<TypeConfig> {
    Entry {
        log_id: LogId::new(openraft::CommittedLeaderId::new(term, 1), index),
        payload: EntryPayload::Normal(Command::Batch(vec![index as u8; 50])),
    }
}

async fn append(log: &mut LogStore, entries: Vec<Entry<TypeConfig>>) {
    use openraft::storage::RaftLogStorageExt;
    log.blocking_append(entries).await.expect("append");
}

async fn indexes(log: &mut LogStore) -> Vec<(u64, u64)> {
    log.try_get_log_entries(..)
        .await
        .expect("read")
        .iter()
        .map(|e| (e.log_id.leader_id.term, e.log_id.index))
        .collect()
}

#[tokio::test]
async fn the_log_survives_reopening_after_truncate_and_purge() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = LogOptions { segment_bytes: 300, ..Default::default() };
    {
        let mut log = LogStore::open(dir.path(), opts.clone()).expect("open");
        append(&mut log, (1..=20).map(|i| entry(1, i)).collect()).await;
        log.truncate(LogId::new(openraft::CommittedLeaderId::new(1, 1), 15))
            .await
            .expect("truncate");
        append(&mut log, (15..=18).map(|i| entry(2, i)).collect()).await;
        log.purge(LogId::new(openraft::CommittedLeaderId::new(1, 1), 6)).await.expect("purge");
        log.save_vote(&openraft::Vote::new(2, 1)).await.expect("vote");
    }
    let mut log = LogStore::open(dir.path(), opts.clone()).expect("reopen");
    let want: Vec<(u64, u64)> = (7..=14).map(|i| (1, i)).chain((15..=18).map(|i| (2, i))).collect();
    assert_eq!(indexes(&mut log).await, want);
    let state = log.get_log_state().await.expect("state");
    assert_eq!(state.last_purged_log_id.map(|l| l.index), Some(6));
    assert_eq!(state.last_log_id.map(|l| (l.leader_id.term, l.index)), Some((2, 18)));
    assert_eq!(log.read_vote().await.expect("vote"), Some(openraft::Vote::new(2, 1)));
    // Purging past the end leaves an empty log that continues after the purged id.
    log.purge(LogId::new(openraft::CommittedLeaderId::new(2, 1), 30)).await.expect("purge");
    append(&mut log, (31..=33).map(|i| entry(3, i)).collect()).await;
    drop(log);
    let mut log = LogStore::open(dir.path(), opts).expect("reopen");
    assert_eq!(indexes(&mut log).await, vec![(3, 31), (3, 32), (3, 33)]);
}

#[tokio::test]
async fn a_torn_append_is_cut_off_and_damage_is_reported() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let mut log = LogStore::open(dir.path(), LogOptions::default()).expect("open");
        append(&mut log, (1..=5).map(|i| entry(1, i)).collect()).await;
    }
    let seg = dir.path().join("00000000000000000001.log");
    let len = std::fs::metadata(&seg).expect("meta").len();
    let f = std::fs::OpenOptions::new().write(true).open(&seg).expect("open");
    f.set_len(len - 10).expect("tear");
    drop(f);
    let segments = std::fs::read_dir(dir.path()).expect("dir").count();
    assert_eq!(segments, 1, "one append of five entries goes to one segment");
    let mut log = LogStore::open(dir.path(), LogOptions::default()).expect("reopen");
    assert_eq!(indexes(&mut log).await, (1..=4).map(|i| (1, i)).collect::<Vec<_>>());
    append(&mut log, vec![entry(1, 5)]).await;
    drop(log);
    // In the newest segment, whose tail may never have been fsynced, a bad record ends the log
    // even with valid records after it (a power cut leaves holes anywhere past the last fsync).
    let clean = std::fs::read(&seg).expect("read");
    let mut data = clean.clone();
    data[40] ^= 0x10;
    std::fs::write(&seg, &data).expect("write");
    let mut log = LogStore::open(dir.path(), LogOptions::default()).expect("reopen");
    assert_eq!(indexes(&mut log).await, vec![]);
    drop(log);
    // A segment is fsynced whole before the next starts: a bad record in an older one is
    // corruption, and opening refuses.
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let mut log =
            LogStore::open(dir.path(), LogOptions { segment_bytes: 200, ..Default::default() })
                .expect("open");
        for i in 1..=6 {
            append(&mut log, vec![entry(1, i)]).await;
        }
    }
    let seg = dir.path().join("00000000000000000001.log");
    let mut data = std::fs::read(&seg).expect("read");
    data[40] ^= 0x10;
    std::fs::write(&seg, &data).expect("write");
    match LogStore::open(dir.path(), LogOptions { segment_bytes: 200, ..Default::default() }) {
        Err(e) => assert!(e.to_string().contains("corrupt"), "{e}"),
        Ok(_) => panic!("a damaged record in an older segment must not be cut off as torn"),
    }
}

/// Bytes of the records of `entries` as the log writes them (after the segment header).
async fn records(entries: Vec<Entry<TypeConfig>>) -> Vec<u8> {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = entries[0].log_id.index;
    let mut log = LogStore::open(dir.path(), LogOptions::default()).expect("open");
    append(&mut log, entries).await;
    drop(log);
    let seg = dir.path().join(format!("{first:020}.log"));
    std::fs::read(seg).expect("read")[8..].to_vec()
}

#[tokio::test]
async fn a_power_cut_keeps_every_flushed_entry_and_the_log_opens() {
    use ebb_storage::durable::{Loss, PowerCut};
    use std::io::Write;
    let opts = LogOptions { segment_bytes: 1500, ..Default::default() };
    let unacked = records((41..=70).map(|i| entry(1, i)).collect()).await;
    let mut extra_kept = std::collections::BTreeSet::new();
    for seed in 0..12u64 {
        let dir = tempfile::tempdir().expect("tempdir");
        let power = PowerCut::watch(dir.path()).expect("watch");
        let path = dir.path().join("log");
        let mut log = LogStore::open(&path, opts.clone()).expect("open");
        for i in (1..=40).step_by(4) {
            append(&mut log, (i..i + 4).map(|i| entry(1, i)).collect()).await;
        }
        log.save_vote(&openraft::Vote::new(3, 1)).await.expect("vote");
        drop(log);
        // Appends past the last fsync: written, never acknowledged.
        let newest = std::fs::read_dir(&path)
            .expect("dir")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "log"))
            .max()
            .expect("a segment");
        let mut f = std::fs::OpenOptions::new().append(true).open(&newest).expect("open");
        f.write_all(&unacked).expect("write");
        drop(f);
        let loss = if seed.is_multiple_of(3) { Loss::Unsynced } else { Loss::Torn(seed) };
        power.cut(loss).expect("cut");
        let mut log = LogStore::open(&path, opts.clone()).expect("the log opens after a power cut");
        let got = indexes(&mut log).await;
        assert!(got.len() >= 40, "{loss:?}: flushed entries lost: {got:?}");
        let want: Vec<(u64, u64)> = (1..=got.len() as u64).map(|i| (1, i)).collect();
        assert_eq!(got, want, "{loss:?}: not a prefix");
        extra_kept.insert(got.len() - 40);
        assert_eq!(log.read_vote().await.expect("vote"), Some(openraft::Vote::new(3, 1)));
        let next = got.len() as u64 + 1;
        append(&mut log, vec![entry(2, next)]).await;
        assert_eq!(indexes(&mut log).await.last(), Some(&(2, next)));
    }
    assert!(extra_kept.len() > 2, "torn cuts keep varying prefixes: {extra_kept:?}");
}

#[tokio::test]
async fn a_follower_is_sent_its_entries_in_pieces_of_the_send_budget() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = LogOptions { send_bytes: 1000, ..Default::default() };
    let mut log = LogStore::open(dir.path(), opts).expect("open");
    let sized = |index: u64, bytes: usize| Entry {
        log_id: LogId::new(openraft::CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(Command::Batch(vec![7; bytes])),
    };
    // Entries 1-3 of about 300 bytes, 4 of 5000, 5-10 of 50.
    let mut entries: Vec<_> = (1..=3).map(|i| sized(i, 300)).collect();
    entries.push(sized(4, 5000));
    entries.extend((5..=10).map(|i| sized(i, 50)));
    append(&mut log, entries).await;
    let got = |v: Vec<Entry<TypeConfig>>| v.iter().map(|e| e.log_id.index).collect::<Vec<_>>();
    // As many as fit in the budget: the large entry that would pass it waits for the next.
    let first = log.limited_get_log_entries(1, 11).await.expect("read");
    assert_eq!(got(first), vec![1, 2, 3]);
    // An entry larger than the budget goes alone.
    assert_eq!(got(log.limited_get_log_entries(4, 11).await.expect("read")), vec![4]);
    // Small entries go together, up to the end asked for.
    assert_eq!(
        got(log.limited_get_log_entries(5, 11).await.expect("read")),
        (5..=10).collect::<Vec<_>>()
    );
    assert_eq!(got(log.limited_get_log_entries(5, 8).await.expect("read")), vec![5, 6, 7]);
    // Reads for anything else are not limited.
    assert_eq!(got(log.try_get_log_entries(1..11).await.expect("read")).len(), 10);
}
