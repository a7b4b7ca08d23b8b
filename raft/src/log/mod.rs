//! The on-disk Raft log of one Raft group.
//!
//! Entries live in segment files ([`segment`]) of checksummed records; the vote and the last
//! purged log id live in a small atomically replaced file ([`meta`]). An append writes its
//! records at once (readable when `append` returns) and hands the fsync to a flush thread
//! ([`flusher`]) that syncs once for every append queued meanwhile. Truncation cuts the newest
//! segments back; purging records the purged id first and then deletes whole segments.

mod erasure;
mod flusher;
mod meta;
mod segment;

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{Entry, LogId, OptionalSend, StorageError, StorageIOError, Vote};
use parking_lot::Mutex;

use crate::error::LogError;
use crate::types::{NodeId, TypeConfig};
use flusher::{FlushJob, Flusher};
use meta::{sync_dir, Meta};
use segment::{encode_record, Segment};

/// Options of a [`LogStore`].
#[derive(Debug, Clone)]
pub struct LogOptions {
    /// A new segment starts once the newest one holds this many bytes.
    pub segment_bytes: u64,
    /// Most bytes of entries the leader reads for one AppendEntries to a follower (at least
    /// one entry: one larger than this goes alone). Openraft gives an AppendEntries one
    /// heartbeat interval to complete; a follower catching up on large entries gets them in
    /// pieces that fit, not in requests of `max_payload_entries` that time out every time and
    /// are sent again.
    pub send_bytes: usize,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions { segment_bytes: 64 << 20, send_bytes: 1 << 20 }
    }
}

/// The Raft log of one group, in its own directory. Cheap to clone: clones share the log (openraft
/// reads through clones while it appends).
#[derive(Debug, Clone)]
pub struct LogStore {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    dir: PathBuf,
    opts: LogOptions,
    state: Mutex<State>,
    poisoned: Arc<AtomicBool>,
    flusher: Flusher,
}

#[derive(Debug)]
struct State {
    /// Oldest first; the last one takes appends.
    segments: Vec<Segment>,
    meta: Meta,
    /// Id of the newest entry present (`None` if there is none beyond the purged ones).
    last: Option<LogId<NodeId>>,
    /// The next append starts a new segment.
    rotate_next: bool,
}

/// Writes the durable state of a new, empty log in `dir` that starts after `purged`, with
/// `vote` cast: the log of a group forked from another at `purged` (a shard split), whose
/// first entry follows the parent's entry `purged` and whose terms continue the parent's.
pub fn seed(dir: &Path, vote: Vote<NodeId>, purged: LogId<NodeId>) -> Result<(), LogError> {
    ebb_storage::durable::create_dir_all(dir).map_err(LogError::io(dir))?;
    Meta { vote: Some(vote), purged: Some(purged) }.store(dir)
}

impl LogStore {
    /// Opens (or creates) the log in `dir`, validating every segment and cutting off a torn
    /// append at the end.
    pub fn open(dir: impl AsRef<Path>, opts: LogOptions) -> Result<LogStore, LogError> {
        let dir = dir.as_ref().to_path_buf();
        ebb_storage::durable::create_dir_all(&dir).map_err(LogError::io(&dir))?;
        let meta = Meta::load(&dir)?;
        let mut firsts = Vec::new();
        for e in std::fs::read_dir(&dir).map_err(LogError::io(&dir))? {
            let e = e.map_err(LogError::io(&dir))?;
            if let Some(first) = e.file_name().to_str().and_then(Segment::parse_name) {
                firsts.push((first, e.path()));
            }
        }
        firsts.sort();
        let purged = meta.purged.map(|l| l.index);
        let n = firsts.len();
        let mut segments: Vec<Segment> = Vec::with_capacity(n);
        for (i, (first, path)) in firsts.into_iter().enumerate() {
            let seg = Segment::open(path, first, i + 1 == n)?;
            if let Some(prev) = segments.last() {
                // Consecutive, except for a gap that lies wholly below the purged id.
                let gap_purged = purged.is_some_and(|p| seg.first <= p + 1);
                if seg.first != prev.next_index() && !gap_purged {
                    return Err(LogError::Corrupt(format!(
                        "segment {} starts at {} but the one before ends at {}",
                        seg.path.display(),
                        seg.first,
                        prev.next_index()
                    )));
                }
            }
            segments.push(seg);
        }
        let mut state = State { segments, meta, last: None, rotate_next: false };
        state.last = state.newest_id()?;
        let poisoned = Arc::new(AtomicBool::new(false));
        let flusher = Flusher::start(poisoned.clone());
        Ok(LogStore {
            shared: Arc::new(Shared { dir, opts, state: Mutex::new(state), poisoned, flusher }),
        })
    }

    /// The directory of the log.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    fn check_writable(&self) -> Result<(), LogError> {
        if self.shared.poisoned.load(Ordering::Acquire) {
            return Err(LogError::Poisoned);
        }
        Ok(())
    }

    /// Entries with indexes in `[start, end)` that are present; with `budget`, only as many as
    /// fit in `budget` encoded bytes (at least one: an entry larger than the budget goes alone).
    fn read_range(
        &self,
        start: u64,
        end: u64,
        budget: Option<usize>,
    ) -> Result<Vec<Entry<TypeConfig>>, LogError> {
        let st = self.shared.state.lock();
        let start = match st.meta.purged {
            Some(p) => start.max(p.index + 1),
            None => start,
        };
        let mut out = Vec::with_capacity(end.saturating_sub(start).min(4096) as usize);
        let (mut index, mut bytes) = (start, 0usize);
        while index < end {
            let Some(seg) = st.segment_of(index) else {
                index += 1;
                continue;
            };
            let stop = end.min(seg.next_index());
            for i in index..stop {
                bytes = bytes.saturating_add(seg.record_len(i) as usize);
                if budget.is_some_and(|b| bytes > b) && !out.is_empty() {
                    return Ok(out);
                }
                out.push(decode(&seg.read(i)?)?);
            }
            index = stop;
        }
        Ok(out)
    }

    fn do_append(
        &self,
        entries: Vec<Entry<TypeConfig>>,
    ) -> Result<Vec<Arc<std::fs::File>>, LogError> {
        self.check_writable()?;
        let mut st = self.shared.state.lock();
        let mut files: Vec<Arc<std::fs::File>> = Vec::new();
        let mut buf = Vec::new();
        let mut lens = Vec::new();
        for e in &entries {
            let index = e.log_id.index;
            // Records of this call not yet written to the newest segment count as in it.
            let pending = lens.len() as u64;
            let rotate = match st.segments.last() {
                None => true,
                Some(s) if st.rotate_next && s.count() > 0 && lens.is_empty() => true,
                Some(s) if s.next_index() + pending > index => {
                    return Err(LogError::Corrupt(format!(
                        "append of entry {index} over existing entries up to {}",
                        s.next_index() + pending - 1
                    )))
                }
                Some(s) => {
                    s.next_index() + pending != index
                        || s.bytes() + buf.len() as u64 >= self.shared.opts.segment_bytes
                }
            };
            if rotate {
                if let Some(s) = st.segments.last_mut() {
                    if !buf.is_empty() {
                        s.append(&buf, &lens)?;
                        buf.clear();
                        lens.clear();
                    }
                    // Only the newest segment may have an unsynced tail (see `segment`).
                    segment::sync(&s.file, &s.path)?;
                }
                st.segments.push(Segment::create(&self.shared.dir, index)?);
                st.rotate_next = false;
                sync_dir(&self.shared.dir)?;
            }
            let payload =
                postcard::to_stdvec(e).map_err(|e| LogError::Corrupt(format!("encode: {e}")))?;
            lens.push(encode_record(index, &payload, &mut buf));
            if let Some(s) = st.segments.last() {
                if !files.iter().any(|f| Arc::ptr_eq(f, &s.file)) {
                    files.push(s.file.clone());
                }
            }
        }
        if let Some(s) = st.segments.last_mut() {
            if !buf.is_empty() {
                s.append(&buf, &lens)?;
            }
        }
        if let Some(e) = entries.last() {
            st.last = Some(e.log_id);
        }
        Ok(files)
    }

    fn do_truncate(&self, log_id: LogId<NodeId>) -> Result<(), LogError> {
        self.check_writable()?;
        let mut st = self.shared.state.lock();
        let index = log_id.index;
        // Newest first, so a crash midway leaves no hole.
        while st.segments.last().is_some_and(|s| s.first >= index) {
            if let Some(s) = st.segments.pop() {
                std::fs::remove_file(&s.path).map_err(LogError::io(&s.path))?;
            }
        }
        if let Some(s) = st.segments.last_mut() {
            s.truncate(index)?;
        }
        sync_dir(&self.shared.dir)?;
        st.last = st.newest_id()?;
        Ok(())
    }

    fn do_purge(&self, log_id: LogId<NodeId>) -> Result<(), LogError> {
        self.check_writable()?;
        let mut st = self.shared.state.lock();
        if st.meta.purged.is_some_and(|p| p.index >= log_id.index) {
            return Ok(());
        }
        // The purged id is durable before any entry disappears.
        let mut meta = st.meta.clone();
        meta.purged = Some(log_id);
        meta.store(&self.shared.dir)?;
        st.meta = meta;
        while st.segments.first().is_some_and(|s| s.next_index() <= log_id.index + 1) {
            let s = st.segments.remove(0);
            std::fs::remove_file(&s.path).map_err(LogError::io(&s.path))?;
        }
        sync_dir(&self.shared.dir)?;
        if st.last.is_none_or(|l| l.index <= log_id.index) {
            st.last = None;
        }
        Ok(())
    }

    fn do_save_vote(&self, vote: &Vote<NodeId>) -> Result<(), LogError> {
        self.check_writable()?;
        let mut st = self.shared.state.lock();
        let mut meta = st.meta.clone();
        meta.vote = Some(*vote);
        meta.store(&self.shared.dir)?;
        st.meta = meta;
        Ok(())
    }
}

impl State {
    fn segment_of(&self, index: u64) -> Option<&Segment> {
        let i = self.segments.partition_point(|s| s.first <= index);
        let s = self.segments.get(i.checked_sub(1)?)?;
        s.contains(index).then_some(s)
    }

    /// The id of the newest entry present above the purged id.
    fn newest_id(&self) -> Result<Option<LogId<NodeId>>, LogError> {
        let Some(seg) = self.segments.iter().rev().find(|s| s.count() > 0) else { return Ok(None) };
        let index = seg.next_index() - 1;
        if self.meta.purged.is_some_and(|p| p.index >= index) {
            return Ok(None);
        }
        Ok(Some(decode(&seg.read(index)?)?.log_id))
    }
}

fn decode(payload: &[u8]) -> Result<Entry<TypeConfig>, LogError> {
    // A command variant this build does not know fails here (a newer build proposed it).
    ebb_storage::decode_exact(payload).map_err(|e| {
        LogError::Corrupt(format!(
            "entry {e} (this build, ebb {}, may not know its command)",
            env!("CARGO_PKG_VERSION")
        ))
    })
}

fn bounds(range: &impl RangeBounds<u64>) -> (u64, u64) {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.saturating_add(1),
        Bound::Excluded(&e) => e,
        Bound::Unbounded => u64::MAX,
    };
    (start, end)
}

fn read_err(e: LogError) -> StorageError<NodeId> {
    StorageIOError::read_logs(&e).into()
}

fn write_err(e: LogError) -> StorageError<NodeId> {
    StorageIOError::write_logs(&e).into()
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        let (start, mut end) = bounds(&range);
        if end == u64::MAX {
            end = self.shared.state.lock().last.map_or(0, |l| l.index + 1);
        }
        self.read_range(start, end, None).map_err(read_err)
    }

    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        let budget = self.shared.opts.send_bytes;
        self.read_range(start, end, Some(budget)).map_err(read_err)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let st = self.shared.state.lock();
        let purged = st.meta.purged;
        Ok(LogState { last_purged_log_id: purged, last_log_id: st.last.or(purged) })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.do_save_vote(vote).map_err(|e| StorageIOError::write_vote(&e).into())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        Ok(self.shared.state.lock().meta.vote)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<_> = entries.into_iter().collect();
        match self.do_append(entries) {
            Ok(files) => {
                self.shared.flusher.submit(FlushJob { files, done: callback });
                Ok(())
            }
            Err(e) => {
                let err = write_err(e);
                callback.log_io_completed(Err(std::io::Error::other(err.to_string())));
                Err(err)
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.do_truncate(log_id).map_err(write_err)
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.do_purge(log_id).map_err(write_err)
    }
}
