//! GRF (Wang et al., SIGMOD 2024), adapted: one range filter per engine instead of one per
//! run, so a one-series range scan probes one structure to learn which runs (level-0 files and
//! deeper levels) may hold keys in its range, whatever the number of runs.
//!
//! A *cell* is `(head hash, tail >> shift)`: a series and a time bucket. The filter maps every
//! cell holding a key to the runs holding it — a bit per level-0 file (its slot) and a 4-bit
//! count of files per deeper level — stored run-length encoded: a sorted array of *segments*,
//! maximal spans of consecutive buckets of one head with the same runs. A series' points in
//! one file are one segment, however many buckets they span, so the filter grows with series
//! times runs, not with keys. A range probe is one binary search and a walk over the segments
//! its buckets meet.
//!
//! Where this differs from the paper, and why:
//! - **No shape encoding.** Shape encoding stores, once at flush, every run a key will ever
//!   occupy, which holds only under a deterministic full-merge schedule (lazy leveling); the
//!   paper states that partial merges are not supported. EbbDB's levels below 0 compact file by
//!   file, so a key's future level is not known at flush. Instead every [`crate::version::Version`]
//!   carries its own filter, derived from its predecessor by the edit that made it (files added
//!   count up, files removed count down), so a reader — snapshot or not — always probes the
//!   filter of exactly the files it reads. That is the paper's correctness goal (no false
//!   negative for any snapshot, §2.1) reached by versioning rather than by encoding.
//! - **Exact segments instead of a learned SNARF.** Time-series keys are monotone per series,
//!   the learned model's worst case (a few blocks take every insert); cells keyed by series hash
//!   and time bucket are a designed monotone map, the note's recommendation. False positives
//!   come from bucket granularity and head-hash collisions only.
//! - **Cost of an edit.** A new version's filter is one sweep of the old segments with the
//!   edit's (sorted) segment changes: `O(segments)` per flush or compaction, done before the
//!   new version is installed, outside the state lock. The paper updates one compressed block
//!   per key instead.
//!
//! A file whose cells are unknown (its keys could not be read) and level-0 files beyond the
//! 64 slots are *unindexed*: every probe keeps them, so they cost reads, never correctness.

use std::ops::Bound;
use std::sync::Arc;

use super::rosetta::{head_hash, tail};

/// Level-0 files with a slot; more are read on every range scan.
const SLOTS: usize = 64;
/// Deeper levels with a count (the engine allows at most 16 levels).
const LEVELS: usize = 16;

/// What the cells of a filter are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GlobalSpec {
    pub key_len: usize,
    /// Tail bits dropped: a bucket is `tail >> shift`.
    pub shift: u32,
}

impl GlobalSpec {
    /// The spec an engine's options ask for (`None`: no global filter).
    pub fn of(opts: &crate::Options) -> Option<GlobalSpec> {
        let f = opts.range_filter.as_ref().filter(|_| opts.global_range_filter)?;
        let shift = super::RangeFilterSpec::for_range(f, f.default_range).shift;
        Some(GlobalSpec { key_len: f.key_len, shift })
    }

    fn head_len(&self) -> usize {
        self.key_len - 8
    }
}

/// Consecutive buckets `lo..=hi` of one head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Span {
    head: u64,
    lo: u64,
    hi: u64,
}

/// The cells of one file as spans of consecutive buckets: sorted, disjoint, not adjacent.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Cells {
    spans: Vec<Span>,
    /// Head hashes of keys of another length (they may fall inside a one-head range).
    foreign: Vec<u64>,
    /// A key of another length exists and keys have no head (`key_len == 8`).
    foreign_any: bool,
}

impl Cells {
    /// Memory held, in bytes.
    pub fn memory_bytes(&self) -> usize {
        self.spans.len() * std::mem::size_of::<Span>() + self.foreign.len() * 8
    }
}

/// Collects the cells of the keys of one file, in key order.
#[derive(Debug)]
pub(crate) struct CellCollector {
    spec: GlobalSpec,
    last: Option<(Vec<u8>, u64)>,
    cells: Cells,
}

impl CellCollector {
    pub fn new(spec: GlobalSpec) -> Self {
        CellCollector { spec, last: None, cells: Cells::default() }
    }

    pub fn add(&mut self, key: &[u8]) {
        let head_len = self.spec.head_len();
        if key.len() != self.spec.key_len {
            if key.len() >= head_len {
                if head_len == 0 {
                    self.cells.foreign_any = true;
                } else {
                    self.cells.foreign.push(head_hash(&key[..head_len]));
                }
            }
            return;
        }
        let head = &key[..head_len];
        let hh = match &self.last {
            Some((h, hh)) if h.as_slice() == head => *hh,
            _ => {
                let hh = head_hash(head);
                self.last = Some((head.to_vec(), hh));
                hh
            }
        };
        let b = tail(key) >> self.spec.shift;
        match self.cells.spans.last_mut() {
            Some(s) if s.head == hh && s.lo <= b && b <= s.hi.saturating_add(1) => {
                s.hi = s.hi.max(b)
            }
            _ => self.cells.spans.push(Span { head: hh, lo: b, hi: b }),
        }
    }

    pub fn finish(mut self) -> Cells {
        // Heads of equal hash may interleave: sort, then join what overlaps or touches.
        let mut spans = std::mem::take(&mut self.cells.spans);
        spans.sort_unstable();
        let mut out: Vec<Span> = Vec::with_capacity(spans.len());
        for s in spans {
            match out.last_mut() {
                Some(o) if o.head == s.head && s.lo <= o.hi.saturating_add(1) => {
                    o.hi = o.hi.max(s.hi)
                }
                _ => out.push(s),
            }
        }
        self.cells.spans = out;
        self.cells.foreign.sort_unstable();
        self.cells.foreign.dedup();
        self.cells
    }
}

/// The runs that hold keys of a cell.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Runs {
    /// Bit `s`: the level-0 file in slot `s`.
    pub l0: u64,
    /// 4 bits per level `1..=16` (level `l` at bits `4 * (l - 1)`): files of that level holding
    /// the cell. A count that reached 15 stays there (a false positive at worst).
    counts: u64,
}

impl Runs {
    fn is_empty(&self) -> bool {
        self.l0 == 0 && self.counts == 0
    }

    /// True if a file of `level >= 1` may hold keys.
    pub fn has_level(&self, level: usize) -> bool {
        (1..=LEVELS).contains(&level) && (self.counts >> (4 * (level - 1))) & 0xF != 0
    }

    fn union(&mut self, o: Runs) {
        self.l0 |= o.l0;
        // Only "non-zero" matters in a union.
        self.counts |= o.counts;
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::RemoveSlot(s) => self.l0 &= !(1 << s),
            Op::AddSlot(s) => self.l0 |= 1 << s,
            Op::Remove(l) | Op::Add(l) => {
                let at = 4 * (l - 1);
                let n = (self.counts >> at) & 0xF;
                let m = match op {
                    Op::Add(_) => (n + 1).min(15),
                    _ if n == 15 => 15,
                    _ => n.saturating_sub(1),
                };
                self.counts = (self.counts & !(0xF << at)) | (m << at);
            }
        }
    }
}

/// One change of a cell's runs. Removals sort before additions (a file moved between levels
/// in one edit is removed from its old level first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Op {
    RemoveSlot(u8),
    Remove(usize),
    AddSlot(u8),
    Add(usize),
}

/// The runs a range scan must read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Candidates {
    runs: Runs,
    /// The level-0 files of the slots in `runs.l0`.
    l0_ids: Vec<u64>,
}

/// A file a version edit adds or removes: level, id and cells (`None`: unknown).
pub(crate) type FileCells = (usize, u64, Option<Arc<Cells>>);

/// One engine's global range filter, as of one version.
#[derive(Debug, Clone)]
pub(crate) struct GlobalFilter {
    spec: GlobalSpec,
    /// Sorted by `(head, lo)`, disjoint; touching segments of one head differ in runs.
    segs: Vec<(Span, Runs)>,
    foreign: Vec<(u64, Runs)>,
    foreign_any: Runs,
    /// Level-0 file id per slot.
    slots: [Option<u64>; SLOTS],
    /// Files every probe keeps: cells unknown, or level 0 with every slot taken.
    unindexed: Vec<u64>,
}

impl GlobalFilter {
    pub fn new(spec: GlobalSpec) -> Self {
        GlobalFilter {
            spec,
            segs: Vec::new(),
            foreign: Vec::new(),
            foreign_any: Runs::default(),
            slots: [None; SLOTS],
            unindexed: Vec::new(),
        }
    }

    pub fn spec(&self) -> GlobalSpec {
        self.spec
    }

    /// Segments and foreign heads held (tests and statistics).
    pub fn len(&self) -> usize {
        self.segs.len() + self.foreign.len()
    }

    /// Approximate memory held, in bytes.
    pub fn memory_bytes(&self) -> usize {
        self.segs.len() * std::mem::size_of::<(Span, Runs)>()
            + self.foreign.len() * std::mem::size_of::<(u64, Runs)>()
    }

    /// The filter after an edit removed and added files. A file in both lists moved levels.
    pub fn apply(&self, removed: &[FileCells], added: &[FileCells]) -> GlobalFilter {
        // The segments are rebuilt below: copy only the slot and file bookkeeping.
        let mut next = GlobalFilter {
            spec: self.spec,
            segs: Vec::new(),
            foreign: Vec::new(),
            foreign_any: self.foreign_any,
            slots: self.slots,
            unindexed: self.unindexed.clone(),
        };
        let mut ops: Vec<(Span, Op)> = Vec::new();
        let mut fops: Vec<(u64, Op)> = Vec::new();
        let mut any_ops: Vec<Op> = Vec::new();
        let mut push = |cells: &Cells, op: Op| {
            ops.extend(cells.spans.iter().map(|&c| (c, op)));
            fops.extend(cells.foreign.iter().map(|&h| (h, op)));
            if cells.foreign_any {
                any_ops.push(op);
            }
        };
        for (level, id, cells) in removed {
            if let Some(i) = next.unindexed.iter().position(|u| u == id) {
                next.unindexed.swap_remove(i);
                continue;
            }
            let Some(cells) = cells else { continue };
            let op = if *level == 0 {
                let Some(s) = next.slots.iter().position(|s| *s == Some(*id)) else { continue };
                next.slots[s] = None;
                Op::RemoveSlot(s as u8)
            } else {
                Op::Remove(*level)
            };
            push(cells, op);
        }
        for (level, id, cells) in added {
            let op = match cells {
                Some(_) if *level == 0 => match next.slots.iter().position(Option::is_none) {
                    Some(s) => {
                        next.slots[s] = Some(*id);
                        Some(Op::AddSlot(s as u8))
                    }
                    None => None,
                },
                Some(_) if (1..=LEVELS).contains(level) => Some(Op::Add(*level)),
                _ => None,
            };
            match (op, cells) {
                (Some(op), Some(cells)) => push(cells, op),
                _ => next.unindexed.push(*id),
            }
        }
        ops.sort_unstable();
        fops.sort_unstable();
        next.segs = sweep(&self.segs, &ops);
        next.foreign = merge(&self.foreign, &fops);
        any_ops.sort_unstable();
        for op in any_ops {
            next.foreign_any.apply(op);
        }
        next
    }

    /// The runs that may hold keys in `[lo, hi]`; `None` if the filter cannot answer (the
    /// bounds are not keys of one head, or the range spans too many buckets).
    pub fn candidates(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> Option<Candidates> {
        let Some((head, a, b)) = one_head(self.spec.key_len, lo, hi)? else {
            return Some(Candidates { runs: Runs::default(), l0_ids: Vec::new() });
        };
        let (b_lo, b_hi) = (a >> self.spec.shift, b >> self.spec.shift);
        let hh = head_hash(head);
        let mut runs = self.foreign_any;
        if let Ok(i) = self.foreign.binary_search_by_key(&hh, |e| e.0) {
            runs.union(self.foreign[i].1);
        }
        let start = self.segs.partition_point(|(s, _)| (s.head, s.hi) < (hh, b_lo));
        for (seg, r) in &self.segs[start..] {
            if seg.head != hh || seg.lo > b_hi {
                break;
            }
            runs.union(*r);
        }
        let l0_ids = (0..SLOTS).filter(|s| runs.l0 & (1 << s) != 0).filter_map(|s| self.slots[s]);
        Some(Candidates { runs, l0_ids: l0_ids.collect() })
    }

    /// Whether a scan with candidates `c` must read file `id` of `level`: `None` if the
    /// filter does not index that file (ask the file's own filter).
    pub fn keeps(&self, c: &Candidates, level: usize, id: u64) -> Option<bool> {
        if level == 0 && c.l0_ids.contains(&id) {
            return Some(true);
        }
        if self.unindexed.contains(&id) {
            return None;
        }
        Some(level > 0 && c.runs.has_level(level))
    }
}

/// `old` with the `ops` (sorted by span) applied to every bucket of their spans; buckets left
/// without runs are dropped and touching buckets of one head with equal runs joined.
fn sweep(old: &[(Span, Runs)], ops: &[(Span, Op)]) -> Vec<(Span, Runs)> {
    let mut out: Vec<(Span, Runs)> = Vec::with_capacity(old.len() + ops.len());
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < ops.len() {
        let head = match (old.get(i), ops.get(j)) {
            (Some(o), Some(p)) => o.0.head.min(p.0.head),
            (Some(o), None) => o.0.head,
            (None, Some(p)) => p.0.head,
            (None, None) => break,
        };
        let (i0, j0) = (i, j);
        while old.get(i).is_some_and(|o| o.0.head == head) {
            i += 1;
        }
        while ops.get(j).is_some_and(|p| p.0.head == head) {
            j += 1;
        }
        if j == j0 {
            out.extend_from_slice(&old[i0..i]);
        } else {
            sweep_head(head, &old[i0..i], &ops[j0..j], &mut out);
        }
    }
    out
}

/// `sweep` for the segments and ops of one head.
fn sweep_head(head: u64, old: &[(Span, Runs)], ops: &[(Span, Op)], out: &mut Vec<(Span, Runs)>) {
    // Elementary pieces: between consecutive boundaries every segment and op covers all or none.
    let mut bounds: Vec<u128> = Vec::with_capacity(2 * (old.len() + ops.len()));
    for s in old.iter().map(|o| o.0).chain(ops.iter().map(|p| p.0)) {
        bounds.push(u128::from(s.lo));
        bounds.push(u128::from(s.hi) + 1);
    }
    bounds.sort_unstable();
    bounds.dedup();
    let (mut k, mut next_op) = (0, 0);
    let mut active: Vec<(Span, Op)> = Vec::new();
    let mut applied: Vec<Op> = Vec::new();
    for w in bounds.windows(2) {
        let (lo, hi) = (w[0] as u64, (w[1] - 1) as u64);
        while old.get(k).is_some_and(|o| o.0.hi < lo) {
            k += 1;
        }
        let mut runs = match old.get(k) {
            Some(o) if o.0.lo <= lo => o.1,
            _ => Runs::default(),
        };
        active.retain(|p| p.0.hi >= lo);
        while ops.get(next_op).is_some_and(|p| p.0.lo <= lo) {
            if ops[next_op].0.hi >= lo {
                active.push(ops[next_op]);
            }
            next_op += 1;
        }
        applied.clear();
        applied.extend(active.iter().map(|p| p.1));
        applied.sort_unstable();
        for &op in &applied {
            runs.apply(op);
        }
        if runs.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some((s, r))
                if s.head == head && u128::from(s.hi) + 1 == u128::from(lo) && *r == runs =>
            {
                s.hi = hi;
            }
            _ => out.push((Span { head, lo, hi }, runs)),
        }
    }
}

/// `old` with the sorted `ops` applied; keys left without runs are dropped.
fn merge<K: Ord + Copy>(old: &[(K, Runs)], ops: &[(K, Op)]) -> Vec<(K, Runs)> {
    let mut out = Vec::with_capacity(old.len() + ops.len() / 4);
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < ops.len() {
        let key = match (old.get(i), ops.get(j)) {
            (Some(o), Some(p)) => o.0.min(p.0),
            (Some(o), None) => o.0,
            (None, Some(p)) => p.0,
            (None, None) => break,
        };
        let mut runs = Runs::default();
        if old.get(i).is_some_and(|o| o.0 == key) {
            runs = old[i].1;
            i += 1;
        }
        while ops.get(j).is_some_and(|p| p.0 == key) {
            runs.apply(ops[j].1);
            j += 1;
        }
        if !runs.is_empty() {
            out.push((key, runs));
        }
    }
    out
}

/// The head and tail range `[a, b]` of a range inside one head of `key_len` keys:
/// `None` if the bounds are not such keys, `Some(None)` if the range is empty.
pub(crate) fn one_head<'a>(
    key_len: usize,
    lo: Bound<&'a [u8]>,
    hi: Bound<&'a [u8]>,
) -> Option<Option<(&'a [u8], u64, u64)>> {
    let (Bound::Included(l) | Bound::Excluded(l)) = lo else { return None };
    let (Bound::Included(h) | Bound::Excluded(h)) = hi else { return None };
    let k = key_len;
    if l.len() != k || h.len() != k || l[..k - 8] != h[..k - 8] {
        return None;
    }
    let a = match lo {
        Bound::Excluded(_) => tail(l).checked_add(1),
        _ => Some(tail(l)),
    };
    let b = match hi {
        Bound::Excluded(_) => tail(h).checked_sub(1),
        _ => Some(tail(h)),
    };
    Some(match (a, b) {
        (Some(a), Some(b)) if a <= b => Some((&l[..k - 8], a, b)),
        _ => None,
    })
}
