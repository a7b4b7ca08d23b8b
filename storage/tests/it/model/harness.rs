//! The harness of the model test: the engine under test beside the oracle, with every
//! operation, crash and check.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ebb_storage::durable::{Loss, PowerCut};
use ebb_storage::failpoint::points;
use ebb_storage::{Clock, Engine, Error, ManualClock, Options, Snapshot, WriteBatch};

use super::*;

pub(super) struct Harness {
    /// Declared before the directory: the watch ends before the directory goes.
    power: PowerCut,
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    opts: Options,
    engine: Option<Engine>,
    oracle: Oracle,
    log: Vec<(u64, Vec<W>)>,
    batch_ends: std::collections::BTreeSet<u64>,
    /// Time-window deletes already checked after persistence.
    verified_windows: std::collections::BTreeSet<u64>,
    snaps: Vec<Option<(Snapshot, u64)>>,
    executed: Arc<AtomicU64>,
    clock: ManualClock,
}

fn batch_of(ops: &[W], seq: u64) -> WriteBatch {
    let mut b = WriteBatch::new();
    for (i, op) in ops.iter().enumerate() {
        match *op {
            W::Put(k) => b.put(key(k), value(k, seq + i as u64)),
            W::Delete(k) => b.delete(key(k)),
            W::Range(lo, len) => {
                let (lo, hi) = range_bounds(lo, len);
                b.delete_range(lo, hi)
            }
            W::Window(t, len, r) => {
                let (t_lo, t_hi, lo, hi) = window_bounds(t, len, r);
                b.delete_time_range(t_lo, t_hi, lo, hi)
            }
        };
    }
    b
}

impl Harness {
    pub(super) fn new(mut opts: Options, executed: Arc<AtomicU64>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let clock = ManualClock::new(CLOCK_START);
        opts.clock = Clock::manual(&clock);
        let power = PowerCut::watch(dir.path()).unwrap();
        let engine = Engine::open(&path, opts.clone()).unwrap();
        Harness {
            power,
            _dir: dir,
            path,
            opts,
            engine: Some(engine),
            oracle: Oracle { now: CLOCK_START, ..Oracle::default() },
            log: Vec::new(),
            batch_ends: Default::default(),
            verified_windows: Default::default(),
            snaps: Vec::new(),
            executed,
            clock,
        }
    }

    fn engine(&self) -> &Engine {
        self.engine.as_ref().unwrap()
    }

    fn write(&mut self, ops: &[W]) {
        let seq = self.oracle.last_seq + 1;
        let refused = ops.iter().any(|w| matches!(w, W::Put(k) if self.oracle.expired(&key(*k))));
        let res = self.engine().write(&batch_of(ops, seq), seq);
        if refused {
            assert!(matches!(res, Err(Error::BeyondRetention { .. })), "{res:?}");
            return;
        }
        res.unwrap();
        self.oracle.apply(seq, ops);
        self.log.push((seq, ops.to_vec()));
        self.batch_ends.insert(self.oracle.last_seq);
    }

    fn check_scan(&self, lo: u16, hi: u16, snap: Option<usize>) {
        let (klo, khi) = (key(lo), key(hi));
        let (lo_b, hi_b) = if klo <= khi { (klo, khi) } else { (khi, klo) };
        self.check_scan_keys(lo_b, hi_b, snap);
    }

    fn check_scan_keys(&self, lo_b: Vec<u8>, hi_b: Vec<u8>, snap: Option<usize>) {
        let (s, at) = match snap.and_then(|i| self.snaps.get(i)).and_then(|s| s.as_ref()) {
            Some((s, at)) => (Some(s), *at),
            None => (None, self.oracle.last_seq),
        };
        let got: Vec<(Vec<u8>, Vec<u8>)> = self
            .engine()
            .scan(lo_b.clone()..hi_b.clone(), s)
            .unwrap()
            .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())))
            .collect::<Result<_, _>>()
            .unwrap();
        let want = self.oracle.scan(&lo_b, &hi_b, at);
        if got != want {
            panic!("scan at {at} diverges: {}", self.explain(&got, &want));
        }
        // The lending form must see exactly the same pairs.
        let mut iter = self.engine().scan(lo_b.clone()..hi_b.clone(), s).unwrap();
        let mut lent = Vec::new();
        while let Some(r) = iter.next_ref() {
            let (k, v) = r.unwrap();
            lent.push((k.to_vec(), v.to_vec()));
        }
        if lent != want {
            panic!("borrowed scan at {at} diverges: {}", self.explain(&lent, &want));
        }
    }

    fn verify_all(&self) {
        let got: Vec<(Vec<u8>, Vec<u8>)> = self
            .engine()
            .scan::<&[u8]>(.., None)
            .unwrap()
            .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())))
            .collect::<Result<_, _>>()
            .unwrap();
        let want = self.oracle.scan(&[], &[0xff; 17], self.oracle.last_seq);
        if got != want {
            panic!("full scan diverges after recovery: {}", self.explain(&got, &want));
        }
        for k in (0..KEYS).step_by(7) {
            assert_eq!(
                self.engine().get(&key(k), None).unwrap().map(|v| v.to_vec()),
                self.oracle.get(&key(k), self.oracle.last_seq),
                "get {k}"
            );
        }
    }

    /// Describes the first key on which the engine and the oracle disagree.
    fn explain(&self, got: &[(Vec<u8>, Vec<u8>)], want: &[(Vec<u8>, Vec<u8>)]) -> String {
        let g: BTreeMap<_, _> = got.iter().cloned().collect();
        let w: BTreeMap<_, _> = want.iter().cloned().collect();
        let k =
            g.keys().chain(w.keys()).find(|k| g.get(*k) != w.get(*k)).cloned().unwrap_or_default();
        let history: Vec<_> = self
            .oracle
            .versions
            .get(&k)
            .map(|vs| vs.iter().map(|(s, v)| (*s, v.is_some())).collect())
            .unwrap_or_default();
        let covering: Vec<u64> = self
            .oracle
            .ranges
            .iter()
            .filter(|(lo, hi, _)| lo <= &k && (hi.is_empty() || &k < hi))
            .map(|r| r.2)
            .collect();
        let d = dkey(&k);
        let windows: Vec<String> = self
            .oracle
            .windows
            .iter()
            .filter(|(a, b, lo, hi, _)| {
                (*a..*b).contains(&d) && lo <= &k && (hi.is_empty() || &k < hi)
            })
            .map(|w| {
                let status = self.engine().deletion(w.4).map(|x| x.persisted_at_ms);
                format!("{}: persisted {status:?}", w.4)
            })
            .collect();
        let stats = self.engine().stats();
        eprintln!("covering windows {windows:?}; window stats {stats:?}");
        format!(
            "{} live vs {} expected; key {:?}: engine {:?}, oracle {:?}; history (seq, put) {:?}; \
             covering range deletes {:?}; index levels {:?}, eve {}; \
             persisted_seq {}, last_seq {}; stats {:?}",
            got.len(),
            want.len(),
            k,
            g.get(&k).map(|v| String::from_utf8_lossy(v).into_owned()),
            w.get(&k).map(|v| String::from_utf8_lossy(v).into_owned()),
            history,
            covering,
            stats.range_index_levels,
            stats.eve_estimators,
            self.engine().persisted_seq(),
            self.oracle.last_seq,
            self.engine().stats().levels,
        )
    }

    pub(super) fn reopen(&mut self, clean: bool) {
        self.reopen_after(clean, None);
    }

    /// Reopens the engine; after a crash (`!clean`), perhaps a power cut with `loss`.
    fn reopen_after(&mut self, clean: bool, loss: Option<Loss>) {
        self.snaps.clear();
        let e = self.engine.take().unwrap();
        if clean {
            e.close().unwrap();
        } else {
            drop(e);
        }
        if let Some(loss) = loss {
            self.power.cut(loss).unwrap();
        }
        self.opts.fail_points.clear();
        let e = Engine::open(&self.path, self.opts.clone()).expect("recovery must succeed");
        if self.opts.wal || clean {
            assert_eq!(e.last_seq(), self.oracle.last_seq, "acknowledged writes lost");
        } else {
            // Raft-style: the caller replays every batch above the persisted sequence number.
            let p = e.persisted_seq();
            assert_eq!(e.last_seq(), p);
            assert!(p <= self.oracle.last_seq);
            assert!(p == 0 || self.batch_ends.contains(&p), "persisted {p} splits a batch");
            for (seq, ops) in self.log.iter().filter(|(s, _)| *s > p) {
                e.write(&batch_of(ops, *seq), *seq).unwrap();
            }
        }
        self.log.retain(|(s, _)| *s > e.persisted_seq());
        self.engine = Some(e);
        self.verify_all();
    }

    /// A time-window delete the ledger calls persisted leaves no covered entry in any file or
    /// memtable (checked once, when first seen persisted; `op` is about to run).
    fn check_persisted_windows(&mut self, op: &Op) {
        for w in &self.oracle.windows {
            if self.verified_windows.contains(&w.4) {
                continue;
            }
            let Some(d) = self.engine().deletion(w.4) else { continue };
            if d.persisted_at_ms.is_none() {
                continue;
            }
            let c = self.engine().verify_deletion(w.4).unwrap();
            assert!(
                c.remaining.is_empty(),
                "window {} persisted but {:?} remain (before {op:?})",
                w.4,
                c.remaining
            );
            self.verified_windows.insert(w.4);
        }
    }

    /// Writes one entry no retention refuses (so a flush has something to write).
    fn write_unexpired(&mut self) {
        let k = (0..=u16::MAX).find(|k| !self.oracle.expired(&key(*k))).expect("a live key");
        self.write(&[W::Put(k)]);
    }

    /// Runs `attempt` (which arms `point`) until `point` fires, at most eight times: an
    /// injected crash that never fired would make the campaign vacuous.
    fn until_fired(&mut self, point: &'static str, attempt: impl Fn(&mut Self)) {
        let fp = self.opts.fail_points.clone();
        for _ in 0..8 {
            attempt(self);
            let _ = self.engine().wait_for_background();
            if !fp.is_armed(point) {
                return;
            }
            fp.clear();
        }
        panic!("crash point {point} did not fire in eight attempts");
    }

    fn crash(&mut self, c: &Crash) {
        let fp = self.opts.fail_points.clone();
        match c {
            Crash::Drop => {}
            Crash::PowerCut(seed) => {
                // Every write was acknowledged after its fsync (`SyncMode::Always`), or lives in
                // the caller's log: nothing may be lost.
                let loss = if seed.is_multiple_of(2) { Loss::Unsynced } else { Loss::Torn(*seed) };
                return self.reopen_after(false, Some(loss));
            }
            Crash::Flush | Crash::TornManifest => {
                let point = match c {
                    Crash::Flush => points::FLUSH_BEFORE_COMMIT,
                    _ => points::MANIFEST_TORN_WRITE,
                };
                // A background flush may take the memtable between the write and the arming;
                // then the explicit flush has nothing to do, so try again.
                self.until_fired(point, |h| {
                    h.write_unexpired();
                    let _ = h.engine().wait_for_background();
                    h.opts.fail_points.arm(point, 0);
                    let _ = h.engine().flush();
                });
            }
            _ => {
                let point = match c {
                    Crash::CompactionMid => points::COMPACTION_MID_OUTPUT,
                    Crash::CompactionBeforeCommit => points::COMPACTION_BEFORE_COMMIT,
                    _ => points::COMPACTION_AFTER_COMMIT,
                };
                let attempt = |h: &mut Self| {
                    // Two overlapping files: the compaction merges (a lone file may only move).
                    // A background compaction may merge them before the arming: try again.
                    for _ in 0..2 {
                        h.write_unexpired();
                        h.engine().flush().unwrap();
                    }
                    let _ = h.engine().wait_for_background();
                    h.opts.fail_points.arm(point, 0);
                    let _ = h.engine().compact_range(None, None);
                };
                if point == points::COMPACTION_MID_OUTPUT {
                    // A compaction writing one output never reaches the point between outputs.
                    attempt(self);
                    let _ = self.engine().wait_for_background();
                    fp.clear();
                } else {
                    self.until_fired(point, attempt);
                }
            }
        }
        self.reopen(false);
    }

    pub(super) fn run(&mut self, op: &Op) {
        self.executed.fetch_add(1, Ordering::Relaxed);
        self.check_persisted_windows(op);
        match op {
            Op::Write(ops) => self.write(ops),
            Op::Get(k) => assert_eq!(
                self.engine().get(&key(*k), None).unwrap().map(|v| v.to_vec()),
                self.oracle.get(&key(*k), self.oracle.last_seq),
                "get {k}"
            ),
            Op::Scan(a, b) => self.check_scan(*a, *b, None),
            Op::ScanTime(a, b, t, len) => {
                let (lo, hi) = (key(*a).min(key(*b)), key(*a).max(key(*b)));
                let (t_lo, t_hi) = (*t as u64, *t as u64 + *len as u64);
                let got: Vec<(Vec<u8>, Vec<u8>)> = self
                    .engine()
                    .scan_time(lo.clone()..hi.clone(), t_lo, t_hi, None)
                    .unwrap()
                    .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())))
                    .collect::<Result<_, _>>()
                    .unwrap();
                let mut want = self.oracle.scan(&lo, &hi, self.oracle.last_seq);
                want.retain(|(k, _)| (t_lo..t_hi).contains(&dkey(k)));
                if got != want {
                    panic!("time scan diverges: {}", self.explain(&got, &want));
                }
            }
            Op::Snapshot => {
                let s = self.engine().snapshot();
                assert_eq!(s.seq(), self.oracle.last_seq);
                let seq = s.seq();
                if self.snaps.len() < 8 {
                    self.snaps.push(Some((s, seq)));
                }
            }
            Op::GetAt(i, k) => {
                if let Some(Some((s, at))) = self.snaps.get(*i) {
                    assert_eq!(
                        self.engine().get(&key(*k), Some(s)).unwrap().map(|v| v.to_vec()),
                        self.oracle.get(&key(*k), *at),
                        "get {k} at snapshot {at}"
                    );
                }
            }
            Op::ScanAt(i, a, b) => self.check_scan(*a, *b, Some(*i)),
            Op::SeriesScan(s, t, len, at) => {
                let (t, len) = (u64::from(*t), u64::from(*len));
                self.check_scan_keys(series_time_key(*s, t), series_time_key(*s, t + len), *at);
            }
            Op::Release(i) => {
                if let Some(s) = self.snaps.get_mut(*i) {
                    *s = None;
                }
            }
            Op::Flush => self.engine().flush().unwrap(),
            Op::Compact(a, b) => {
                let (ka, kb) = (a.map(key), b.map(key));
                self.engine().compact_range(ka.as_deref(), kb.as_deref()).unwrap()
            }
            Op::WaitBackground => self.engine().wait_for_background().unwrap(),
            Op::Reopen => self.reopen(true),
            Op::Crash(c) => self.crash(c),
            Op::Retention(s, r) => {
                if self.opts.wal && !self.oracle.retention.contains_key(s) {
                    let d = std::time::Duration::from_millis(*r as u64);
                    self.engine().set_retention(series_key(*s)[..8].to_vec(), Some(d)).unwrap();
                    self.oracle.retention.insert(*s, *r as u64);
                }
            }
            Op::Tick(ms) => {
                self.clock.advance(*ms as u64);
                self.oracle.now += *ms as u64;
            }
            Op::Purge => {
                if self.opts.wal {
                    let seq = self.oracle.last_seq + 1;
                    let n = self.engine().purge_expired(seq).unwrap();
                    assert_eq!(n, self.oracle.retention.len() as u64);
                    let now = self.oracle.now;
                    for (i, (s, r)) in self.oracle.retention.iter().enumerate() {
                        let (lo, hi) = (series_key(*s), series_key(*s + 1));
                        let horizon = now.saturating_sub(*r);
                        self.oracle.windows.push((0, horizon, lo, hi, seq + i as u64));
                    }
                    if n > 0 {
                        self.oracle.last_seq = seq + n - 1;
                        self.batch_ends.insert(self.oracle.last_seq);
                    }
                }
            }
        }
    }
}
