//! Group commit of line-protocol writes.
//!
//! Concurrent writes to one database are committed together: each is planned on its own
//! thread, outside the writer lock, and queued; whichever writer next holds the lock takes the
//! queue's head and commits it as one engine batch (on a shard replica: one Raft proposal, one
//! log entry, one apply on every replica), then waits for it after releasing the lock and
//! answers every write in it. Writes that arrive while a group is being proposed form the
//! next group, so groups grow with the load and a lone write waits for nobody.
//!
//! Each write stays all or nothing, and independent of the others in its group:
//! - a write whose plan changes the catalog (new tables, series or columns) is not queued: it is
//!   committed alone, as its catalog records must be applied before later plans read them;
//! - a queued write planned against an older catalog is handed back to be planned again;
//! - a write that would merge with a point an earlier write of the group writes ends the group
//!   (it is read back from the store once that group is applied);
//! - each write of a coordinator (under a write id) leads its part of the batch with its
//!   record, and a replica leaves out the part whose record it holds already
//!   ([`super::admit`]): a retry committed in a group next to its first attempt applies once.
//!
//! A failure of the group's commit that any of its writes would meet (no quorum, a lost
//! leadership, a full disk) fails every write in it. One that a single write causes (the engine
//! refused a row: past the retention horizon by the time it was applied, or too large) sends
//! each write of the group back to be committed alone, so only that write fails. A group that
//! failed leaves the queue to the next; a group whose finishing panics still releases its place
//! in flight.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ebb_storage::WriteBatch;
use parking_lot::{Condvar, Mutex};

use super::apply::Change;
use super::outcome::{forget_old_records, put_written};
use super::write::WriteSummary;
use super::write_plan::{Fields, Prepared};
use super::{Database, Pending, Writer};
use crate::error::{QueryError, Result};
use crate::model::catalog::CatalogDelta;
use crate::model::row::{decode_row, encode_row, merge_rows};

/// Most operations one group's batch holds (a write larger than this is committed alone).
const GROUP_OPS: usize = 100_000;

/// Most bytes of keys and values one group's batch holds (likewise).
const GROUP_BYTES: usize = 16 << 20;

/// Most groups committed and not yet applied (on a single node: not yet durable). Writes that
/// arrive meanwhile wait, and commit as one group when one of them is.
const GROUPS_IN_FLIGHT: usize = 2;

/// Planned writes waiting for the writer lock, oldest first. Only a writer holding the writer
/// lock takes from it.
#[derive(Default)]
pub(super) struct WriteQueue {
    queued: Mutex<VecDeque<Arc<Queued>>>,
    groups: AtomicU64,
    writes: AtomicU64,
    replans: AtomicU64,
}

/// Counts of a database's group commits since it opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupCommits {
    /// Groups committed.
    pub groups: u64,
    /// Writes in them.
    pub writes: u64,
    /// Queued writes handed back to be planned again (the catalog changed meanwhile).
    pub replans: u64,
}

impl std::fmt::Debug for WriteQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteQueue").field("queued", &self.queued.lock().len()).finish()
    }
}

/// A planned write in the queue.
pub(super) struct Queued {
    /// The coordinator's write id, if any.
    once: Option<u64>,
    plan: Mutex<Option<Prepared>>,
    outcome: Mutex<Option<Outcome>>,
    decided: Condvar,
}

/// What became of a queued write.
pub(super) enum Outcome {
    /// Committed: what it wrote.
    Written(WriteSummary),
    /// Failed, with nothing written.
    Failed(QueryError),
    /// The catalog changed since it was planned: plan it again.
    Replan,
    /// Its group was refused for what one of its writes holds: commit it alone.
    Alone,
    /// The write is in this group, committed meanwhile: its writer waits for it and answers
    /// every write in it ([`Group::finish`]), then waits for its own outcome.
    Finish(Group),
}

impl Queued {
    /// Waits until the write is decided.
    pub(super) fn wait(&self) -> Outcome {
        let mut o = self.outcome.lock();
        loop {
            if let Some(o) = o.take() {
                return o;
            }
            self.decided.wait(&mut o);
        }
    }

    fn decide(&self, outcome: Outcome) {
        *self.outcome.lock() = Some(outcome);
        self.decided.notify_all();
    }
}

/// A write taken into a group: failed when dropped undecided (its committer panicked), so
/// that its writer never waits forever.
struct Member {
    queued: Arc<Queued>,
    summary: WriteSummary,
    decided: bool,
}

impl Member {
    fn decide(&mut self, outcome: Outcome) {
        self.decided = true;
        self.queued.decide(outcome);
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if !self.decided {
            self.queued.decide(Outcome::Failed(QueryError::Internal(
                "the write's group commit was abandoned".into(),
            )));
        }
    }
}

/// A group committed under the writer lock, to be waited for after releasing it.
pub(super) struct Group {
    pending: Pending,
    members: Vec<Member>,
}

impl WriteQueue {
    /// Queues `plan` (which changes no catalog record), written under write id `once` if any.
    pub(super) fn push(&self, plan: Prepared, once: Option<u64>) -> Arc<Queued> {
        let queued = Arc::new(Queued {
            once,
            plan: Mutex::new(Some(plan)),
            outcome: Mutex::new(None),
            decided: Condvar::new(),
        });
        self.queued.lock().push_back(queued.clone());
        queued
    }

    /// What the queue has committed so far.
    pub(super) fn counts(&self) -> GroupCommits {
        GroupCommits {
            groups: self.groups.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            replans: self.replans.load(Ordering::Relaxed),
        }
    }

    fn pop(&self) -> Option<Arc<Queued>> {
        self.queued.lock().pop_front()
    }

    fn push_front(&self, queued: Arc<Queued>) {
        self.queued.lock().push_front(queued);
    }
}

impl Database {
    /// Commits the writes at the head of the queue as one batch, unless the queue is empty or
    /// [`GROUPS_IN_FLIGHT`] groups are in flight (the one that finishes first commits them).
    /// Call with the writer lock held; finish the returned group after releasing it.
    pub(super) fn commit_queued(&self, w: &mut Writer) -> Option<Group> {
        // A group that fails to commit leaves the rest of the queue to the next.
        while w.groups_in_flight < GROUPS_IN_FLIGHT {
            let (batch, members, newest) = self.take_group(w)?;
            self.queue.groups.fetch_add(1, Ordering::Relaxed);
            self.queue.writes.fetch_add(members.len() as u64, Ordering::Relaxed);
            let change = Change {
                batch: &batch,
                delta: CatalogDelta::default(),
                newest: Cow::Borrowed(&newest),
            };
            match self.commit_staged(w, change) {
                Ok(pending) => {
                    if self.replication.is_some() {
                        // Later writes to these points wait for the proposal before merging
                        // with stored rows (`existing_rows`).
                        self.catalog.note_times(&newest);
                    }
                    w.groups_in_flight += 1;
                    return Some(Group { pending, members });
                }
                Err(e) => fail(members, &e),
            }
        }
        None
    }

    /// Takes the writes at the head of the queue that commit together, and builds their batch:
    /// the batch, its writes and the newest time each series gets (none if the queue is empty).
    #[allow(clippy::type_complexity)]
    fn take_group(
        &self,
        w: &mut Writer,
    ) -> Option<(WriteBatch, Vec<Member>, Vec<(u32, u64, i64)>)> {
        let mut batch = WriteBatch::new();
        let mut members = Vec::new();
        let mut newest = Vec::new();
        // The points the group writes, to find writes that merge with it.
        let mut written = Points::default();
        let mut bytes = 0;
        while let Some(queued) = self.queue.pop() {
            let Some(plan) = queued.plan.lock().take() else {
                // Never queued without a plan; answered rather than left waiting.
                queued.decide(Outcome::Failed(QueryError::Internal(
                    "a write queued unplanned".into(),
                )));
                continue;
            };
            if plan.generation != self.catalog.generation() {
                self.queue.replans.fetch_add(1, Ordering::Relaxed);
                queued.decide(Outcome::Replan);
                continue;
            }
            let size: usize = plan.keys.iter().chain(&plan.values).map(|b| b.len()).sum();
            let fits = members.is_empty()
                || (batch.len() + plan.keys.len() < GROUP_OPS && bytes + size < GROUP_BYTES);
            let same_kind = members
                .first()
                .is_none_or(|m: &Member| m.queued.once.is_some() == queued.once.is_some());
            if !fits || !same_kind || merges_with(&plan, &written) {
                *queued.plan.lock() = Some(plan);
                self.queue.push_front(queued);
                break;
            }
            match self.add_to_group(w, &mut batch, &plan, queued.once) {
                Ok(()) => {}
                Err(e) => {
                    queued.decide(Outcome::Failed(e));
                    continue;
                }
            }
            bytes += size;
            written.extend(plan.points.iter().copied());
            newest.extend_from_slice(&plan.newest);
            members.push(Member { queued, summary: plan.summary, decided: false });
        }
        (!members.is_empty()).then_some((batch, members, newest))
    }

    /// Adds the planned write `p` (under write id `once`) to the group's `batch`: its record,
    /// then its rows merged with the stored rows they overwrite.
    fn add_to_group(
        &self,
        w: &mut Writer,
        batch: &mut WriteBatch,
        p: &Prepared,
        once: Option<u64>,
    ) -> Result<()> {
        let existing = self.existing_rows(p)?;
        let start = batch.len();
        let added = self.add_rows(w, batch, p, once, &existing);
        if added.is_err() {
            batch.truncate(start);
        }
        added
    }

    fn add_rows(
        &self,
        w: &mut Writer,
        batch: &mut WriteBatch,
        p: &Prepared,
        once: Option<u64>,
        existing: &HashMap<(u32, u64, i64), Fields>,
    ) -> Result<()> {
        if let Some(id) = once {
            // A replica leaves out a write whose record it already holds.
            put_written(batch, id, &p.summary);
            let now_ms = crate::now_ms();
            if now_ms.saturating_sub(w.written_forgotten_ms) >= 60_000 {
                w.written_forgotten_ms = now_ms;
                forget_old_records(batch, now_ms);
            }
        }
        self.mark_written(&p.points, batch);
        batch.reserve(p.points.len());
        let mut merged = Vec::new();
        for (i, (key, value)) in p.keys.iter().zip(&p.values).enumerate() {
            match existing.get(&p.points[i]) {
                Some(old) => {
                    let fields = merge_rows(old.clone(), decode_row(value)?);
                    merged.clear();
                    encode_row(fields.iter().map(|(i, v)| (*i, v)), &mut merged);
                    batch.put(key.clone(), merged.clone());
                }
                None => {
                    batch.put(key.clone(), value.clone());
                }
            }
        }
        Ok(())
    }
}

impl Group {
    /// Waits for the group's commit (call after releasing the writer lock) and answers every
    /// write in it: a coordinator's write from its record (a replica may have applied an
    /// earlier attempt at it instead), any other with what it planned. Then commits the writes
    /// queued meanwhile, and hands that group to one of its writers to finish.
    pub(super) fn finish(self, db: &Database) {
        // Released however this ends: the next group is committed even if this one's answer
        // panics.
        let _release = Release(db);
        let Group { pending, mut members } = self;
        match pending.wait() {
            // `Completed`: every write in it had been applied by earlier attempts.
            Ok(_) | Err(QueryError::Completed) => {}
            Err(e) => return fail(members, &e),
        }
        for m in &mut members {
            let outcome = match m.queued.once {
                None => Outcome::Written(m.summary),
                Some(id) => match db.written(id) {
                    Ok(Some(s)) => Outcome::Written(s),
                    Ok(None) => Outcome::Failed(QueryError::Internal(format!(
                        "write {id} was committed without its record"
                    ))),
                    Err(e) => Outcome::Failed(e),
                },
            };
            m.decide(outcome);
        }
    }
}

/// Ends a group's time in flight: commits the writes queued meanwhile, and hands that group to
/// one of its writers to finish.
struct Release<'a>(&'a Database);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        let db = self.0;
        let next = {
            let mut w = db.writer.lock();
            w.groups_in_flight = w.groups_in_flight.saturating_sub(1);
            db.commit_queued(&mut w)
        };
        if let Some(next) = next {
            if let Some(first) = next.members.first() {
                let queued = first.queued.clone();
                queued.decide(Outcome::Finish(next));
            }
        }
    }
}

/// Answers the writes of a group whose commit failed with `e`. A failure only one write can
/// cause (the engine refused a row: beyond retention by the time it was applied, too large)
/// sends every write of a group of several back to be committed alone, so that it fails that
/// write alone; any other (no quorum, a lost leadership, a full disk) fails them all.
fn fail(mut members: Vec<Member>, e: &QueryError) {
    let alone = members.len() > 1 && e.is_client_error();
    for m in &mut members {
        m.decide(match alone {
            true => Outcome::Alone,
            false => Outcome::Failed(copy_failure(e)),
        });
    }
}

/// Points `(table, series, time)`, hashed with a random seed (they come from the network).
type Points = HashSet<(u32, u64, i64), ahash::RandomState>;

/// True if `p` writes a point the group writes: it merges with that row, so it waits for the
/// next group.
fn merges_with(p: &Prepared, written: &Points) -> bool {
    !written.is_empty() && p.points.iter().any(|point| written.contains(point))
}

/// The failure of a group's commit, for one of its writes.
fn copy_failure(e: &QueryError) -> QueryError {
    match e {
        QueryError::NotLeader(l) => QueryError::NotLeader(*l),
        QueryError::Replication(s) => QueryError::Replication(s.clone()),
        QueryError::Unavailable(s) => QueryError::Unavailable(s.clone()),
        QueryError::Invalid(s) => QueryError::Invalid(s.clone()),
        QueryError::BeyondRetention { message, line } => {
            QueryError::BeyondRetention { message: message.clone(), line: *line }
        }
        QueryError::DiskFull(s) => QueryError::DiskFull(s.clone()),
        QueryError::Corrupt(s) => QueryError::Corrupt(s.clone()),
        QueryError::Storage(e) => QueryError::Storage(e.clone()),
        QueryError::Internal(s) => QueryError::Internal(s.clone()),
        e => QueryError::Internal(e.to_string()),
    }
}

#[cfg(test)]
mod tests;
