//! The engine state machine: sequence numbers from the log index, applied state across
//! restarts, entries refused alike on every replica, and snapshots that carry data and the
//! deletion ledger between replicas and refuse damage.

#![allow(clippy::unwrap_used)] // tests: a failed step should fail the test

use std::collections::BTreeSet;

use ebb_raft::sm::{entry_seq, Descriptor};
use ebb_raft::{Command, Replica, ShardSnapshot, TypeConfig};
use ebb_storage::{Engine, Options, WriteBatch};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Membership};

fn opts() -> Options {
    Options { write_buffer_size: 32 << 10, ..Options::default() }
}

fn log_id(index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(1, 1), index)
}

fn batch_entry(index: u64, b: &WriteBatch) -> Entry<TypeConfig> {
    Entry { log_id: log_id(index), payload: EntryPayload::Normal(Command::Batch(b.to_bytes())) }
}

fn key(series: u64, t: u64) -> Vec<u8> {
    let mut k = 7u32.to_be_bytes().to_vec();
    k.extend_from_slice(&series.to_be_bytes());
    k.extend_from_slice(&t.to_be_bytes());
    k
}

/// Every user key and value with its sequence number (the replication keys left out).
fn contents(e: &Engine) -> Vec<(Vec<u8>, Vec<u8>)> {
    e.scan::<&[u8]>(.., None)
        .unwrap()
        .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())).unwrap())
        .filter(|(k, _)| !k.starts_with(ebb_raft::sm::applied::RESERVED_PREFIX))
        .collect()
}

/// Entries 1..=n: 20 puts each, a range delete in entry 5 and a point delete in entry 8.
fn workload(n: u64) -> Vec<Entry<TypeConfig>> {
    let mut out = vec![Entry {
        log_id: log_id(0),
        payload: EntryPayload::Membership(Membership::new(vec![BTreeSet::from([1, 2, 3])], None)),
    }];
    for i in 1..=n {
        let mut b = WriteBatch::new();
        for s in 0..20u64 {
            b.put(key(s, i), format!("v{i}-{s}"));
        }
        if i == 5 {
            b.delete_range(key(3, 0), key(6, 0)).set_issued_at(1_700_000_000_000);
        }
        if i == 8 {
            b.delete(key(0, 1)).set_issued_at(1_700_000_001_000);
        }
        out.push(batch_entry(i, &b));
    }
    out
}

#[test]
fn entries_apply_at_sequence_numbers_derived_from_the_log_index() {
    let d = tempfile::tempdir().unwrap();
    let r = Replica::open(d.path(), opts()).unwrap();
    let replies = r.apply(workload(10)).unwrap();
    assert_eq!(replies.len(), 11);
    for (i, reply) in replies.iter().enumerate() {
        assert_eq!(reply.seq, entry_seq(i as u64).unwrap());
        assert_eq!(reply.error, None);
    }
    let (applied, membership) = r.applied_state().unwrap();
    assert_eq!(applied, Some(log_id(10)));
    assert_eq!(membership.log_id(), &Some(log_id(0)));
    // Series 3..6 lost entries 1..=5 (the range delete is the last operation of entry 5, so
    // it covers that entry's own puts too) and kept 6..=10; key(0, 1) is gone.
    let rows = contents(&r.engine());
    assert_eq!(rows.len(), 10 * 20 - 3 * 5 - 1);
    assert!(rows.iter().any(|(k, _)| *k == key(3, 6)));
    assert!(!rows.iter().any(|(k, _)| *k == key(3, 5) || *k == key(0, 1)));
    let deletions = r.engine().deletions();
    assert_eq!(deletions.len(), 2);
    assert_eq!(deletions[0].id, entry_seq(5).unwrap() + 20);
    assert_eq!(deletions[0].issued_at_ms, 1_700_000_000_000);
}

#[test]
fn applied_state_survives_restarts_and_is_never_applied_twice() {
    let d = tempfile::tempdir().unwrap();
    {
        let r = Replica::open(d.path(), opts()).unwrap();
        r.apply(workload(6)).unwrap();
    }
    // The engine keeps no WAL (the Raft log is the log): a crash forgets what was not flushed,
    // and the entries are applied again from the log.
    let r = Replica::open(d.path(), opts()).unwrap();
    assert_eq!(r.applied_state().unwrap().0, None);
    r.apply(workload(6)).unwrap();
    r.engine().flush().unwrap();
    drop(r);
    let r = Replica::open(d.path(), opts()).unwrap();
    assert_eq!(r.applied_state().unwrap().0, Some(log_id(6)));
    // Re-applying an applied entry is refused by the engine (its sequence numbers are taken),
    // which is what keeps a replica from applying anything twice.
    let again = workload(6).pop().unwrap();
    assert!(r.apply([again]).is_err());
    let more: Vec<_> = workload(9).into_iter().skip(7).collect();
    r.apply(more).unwrap();
    assert_eq!(r.applied_state().unwrap().0, Some(log_id(9)));
}

/// A batch with an operation this build does not know (a newer build proposed it) is not applied
/// as a no-op, which would leave this replica without what newer replicas apply: the replica
/// stops at it, naming the entry, and applies it once a build that reads it takes over.
#[test]
fn a_batch_of_a_newer_format_stops_the_replica_instead_of_diverging() {
    let d = tempfile::tempdir().unwrap();
    let r = Replica::open(d.path(), opts()).unwrap();
    let mut first = WriteBatch::new();
    first.put(key(1, 1), "a");
    r.apply(vec![batch_entry(1, &first)]).unwrap();
    let mut newer = WriteBatch::new();
    newer.put(key(2, 1), "b");
    let mut bytes = newer.to_bytes();
    bytes[20] = 9; // the first operation's tag: unknown here
    let entry = Entry { log_id: log_id(2), payload: EntryPayload::Normal(Command::Batch(bytes)) };
    let err = r.apply(vec![entry]).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, ebb_raft::ReplicaError::NewerFormat { index: 2, .. }), "{text}");
    assert!(text.contains("log entry 2: write batch operation 9 is unknown"), "{text}");
    assert_eq!(
        r.applied_state().unwrap().0,
        Some(log_id(1)),
        "the entry must not count as applied"
    );
    assert_eq!(contents(&r.engine()).len(), 1);
}

#[test]
fn refused_entries_are_no_ops_with_an_error_on_every_replica() {
    let d = tempfile::tempdir().unwrap();
    let r = Replica::open(d.path(), opts()).unwrap();
    let mut reserved = WriteBatch::new();
    reserved.put(ebb_raft::sm::applied::APPLIED_KEY.to_vec(), "x");
    let mut everything = WriteBatch::new();
    everything.delete_range(key(0, 0), Vec::<u8>::new());
    let entries = vec![
        Entry { log_id: log_id(1), payload: EntryPayload::Normal(Command::Batch(vec![1, 2, 3])) },
        batch_entry(2, &reserved),
        batch_entry(3, &everything),
        Entry { log_id: log_id(4), payload: EntryPayload::Blank },
    ];
    let replies = r.apply(entries).unwrap();
    assert!(replies[0].error.as_deref().unwrap().contains("malformed"));
    assert!(replies[1].error.as_deref().unwrap().contains("reserved"));
    assert!(replies[2].error.as_deref().unwrap().contains("reserved"));
    assert_eq!(replies[3].error, None);
    assert_eq!(r.applied_state().unwrap().0, Some(log_id(4)));
    assert!(contents(&r.engine()).is_empty());
}

#[test]
fn snapshots_carry_data_and_the_deletion_ledger_to_another_replica() {
    let d = tempfile::tempdir().unwrap();
    let leader = Replica::open(d.path().join("a"), opts()).unwrap();
    leader.apply(workload(12)).unwrap();
    let (desc, snap) = leader.build_snapshot().unwrap();
    assert_eq!(desc.meta.last_log_id, Some(log_id(12)));
    assert!(desc.files.iter().any(|f| f.name.ends_with(".ledger")));
    assert!(desc.total_bytes() > 0);
    // Writes after the snapshot are not in it.
    let mut b = WriteBatch::new();
    b.put(key(99, 99), "late");
    leader.apply([batch_entry(13, &b)]).unwrap();

    let follower = Replica::open(d.path().join("b"), opts()).unwrap();
    follower.apply(workload(2)).unwrap(); // stale state the snapshot replaces
    let old_engine = follower.engine();
    follower.install(&snap, &desc.meta).unwrap();
    assert_eq!(follower.applied_state().unwrap(), leader_state_at(&desc));
    let want: Vec<_> =
        contents(&leader.engine()).into_iter().filter(|(k, _)| *k != key(99, 99)).collect();
    assert_eq!(contents(&follower.engine()), want);
    let (da, db) = (leader.engine().deletions(), follower.engine().deletions());
    assert_eq!(da.len(), 2);
    assert_eq!(
        da.iter().map(|x| (x.id, x.issued_at_ms)).collect::<Vec<_>>(),
        db.iter().map(|x| (x.id, x.issued_at_ms)).collect::<Vec<_>>(),
        "deletion ids and original issue times must survive the move"
    );
    assert_eq!(follower.current_snapshot().unwrap().0.meta, desc.meta);
    drop(old_engine);

    // The follower goes on applying after the snapshot. A crash loses what was not flushed
    // (the log holds it: applied again), and a restart keeps the rest.
    follower.apply([batch_entry(13, &b)]).unwrap();
    let after = contents(&follower.engine());
    drop(follower);
    let follower = Replica::open(d.path().join("b"), opts()).unwrap();
    assert_eq!(follower.applied_state().unwrap(), leader_state_at(&desc));
    follower.apply([batch_entry(13, &b)]).unwrap();
    follower.engine().flush().unwrap();
    drop(follower);
    let follower = Replica::open(d.path().join("b"), opts()).unwrap();
    assert_eq!(contents(&follower.engine()), after);
    assert_eq!(contents(&follower.engine()), contents(&leader.engine()));
    assert_eq!(follower.applied_state().unwrap().0, Some(log_id(13)));
    assert_eq!(follower.current_snapshot().unwrap().0.meta, desc.meta);
}

fn leader_state_at(d: &Descriptor) -> (Option<LogId<u64>>, ebb_raft::sm::Membership) {
    (d.meta.last_log_id, d.meta.last_membership.clone())
}

#[test]
fn damaged_or_incomplete_snapshots_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let leader = Replica::open(d.path().join("a"), opts()).unwrap();
    leader.apply(workload(12)).unwrap();
    leader.engine().flush().unwrap();
    let (desc, snap) = leader.build_snapshot().unwrap();
    let follower = Replica::open(d.path().join("b"), opts()).unwrap();
    follower.apply(workload(3)).unwrap();
    let before = contents(&follower.engine());

    // A flipped bit in one file.
    let bad = ShardSnapshot::at(d.path().join("flipped"));
    snap.copy_to(bad.dir()).unwrap();
    let victim = desc.files.iter().find(|f| f.name.ends_with(".sst")).unwrap();
    let path = bad.dir().join(&victim.name);
    let mut bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap(); // break the hard link before editing
    bytes[10] ^= 1;
    std::fs::write(&path, bytes).unwrap();
    let err = follower.install(&bad, &desc.meta).unwrap_err().to_string();
    assert!(err.contains("crc"), "{err}");

    // A missing file.
    let short = ShardSnapshot::at(d.path().join("short"));
    snap.copy_to(short.dir()).unwrap();
    std::fs::remove_file(short.dir().join(&victim.name)).unwrap();
    assert!(follower.install(&short, &desc.meta).is_err());

    // Meta that does not match the snapshot.
    let mut other = desc.meta.clone();
    other.last_log_id = Some(log_id(11));
    assert!(follower.install(&snap, &other).is_err());

    assert_eq!(contents(&follower.engine()), before, "a refused snapshot changes nothing");
    assert_eq!(follower.applied_state().unwrap().0, Some(log_id(3)));
}
