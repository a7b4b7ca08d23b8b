//! A linearizability checker for registers (Wing & Gong's search with Lowe's memoization, as
//! Porcupine does it): each key's history of writes, deletes and reads must be explainable by
//! one order of its operations that respects real time (an operation that returned before
//! another was invoked comes first) and register semantics (a read returns the last value
//! written, `None` after a delete). An operation whose outcome is unknown (its request failed
//! or timed out) may have taken effect at any point after its invocation, or never. [`Run`]
//! records such histories.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::AtomicI64;
use std::time::Instant;

use parking_lot::Mutex;

/// What an operation did to (or saw of) its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Wrote a value (`None`: deleted the key).
    Write(Option<i64>),
    /// Read a value (`None`: the key was absent).
    Read(Option<i64>),
}

/// One operation on one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Op {
    /// When it was invoked (ns since the run started).
    pub call: u64,
    /// When it returned, if it returned with a known outcome; `None`: unknown (a write that
    /// may or may not have happened). Reads with unknown outcomes are left out of histories.
    pub ret: Option<u64>,
    /// What it did.
    pub action: Action,
}

/// True if `ops` (one key's history, starting from an absent key) are linearizable.
pub fn linearizable(ops: &[Op]) -> bool {
    // A write whose outcome is unknown and whose value nobody read may as well never have
    // happened: leaving it out only removes constraints.
    let read: HashSet<i64> = ops
        .iter()
        .filter_map(|o| match o.action {
            Action::Read(Some(v)) => Some(v),
            _ => None,
        })
        .collect();
    let ops: Vec<Op> = ops
        .iter()
        .copied()
        .filter(
            |o| !matches!((o.ret, o.action), (None, Action::Write(Some(v))) if !read.contains(&v)),
        )
        .collect();
    let mut done = vec![0u64; ops.len().div_ceil(64)];
    let mut seen = HashSet::new();
    search(&ops, &mut done, None, &mut seen)
}

fn is_done(done: &[u64], i: usize) -> bool {
    done[i / 64] & (1 << (i % 64)) != 0
}

fn flip(done: &mut [u64], i: usize) {
    done[i / 64] ^= 1 << (i % 64);
}

/// Depth-first search: `done` is the set of operations already placed (or dropped), `state`
/// the register after them.
fn search(
    ops: &[Op],
    done: &mut Vec<u64>,
    state: Option<i64>,
    seen: &mut HashSet<(Vec<u64>, Option<i64>)>,
) -> bool {
    // Finished once every operation with a known outcome is placed (unknown writes left over
    // never took effect).
    let left: Vec<usize> = (0..ops.len()).filter(|&i| !is_done(done, i)).collect();
    if !left.iter().any(|&i| ops[i].ret.is_some()) {
        return true;
    }
    if !seen.insert((done.clone(), state)) {
        return false;
    }
    // The earliest return among the operations left: whatever goes next was invoked before it.
    let horizon = left.iter().filter_map(|&i| ops[i].ret).min().unwrap_or(u64::MAX);
    let read_left = |v: Option<i64>| left.iter().any(|&j| ops[j].action == Action::Read(v));
    // Unknown operations of one value already tried here: any of them does what another does
    // (none ever returns, so each stays placeable from its invocation on).
    let mut unknown_tried: Vec<Option<i64>> = Vec::new();
    for &i in left.iter().filter(|&&i| ops[i].call <= horizon) {
        let next = match (ops[i].action, ops[i].ret) {
            (Action::Read(v), _) if v == state => state,
            (Action::Read(_), _) => continue,
            (Action::Write(v), Some(_)) => v,
            // An unknown write or delete is placed only where it changes the value and a read
            // left may see what it leaves. Nothing else need be tried: dropping an unknown
            // operation nobody saw the effect of from a linearization leaves one (it only
            // removes constraints), and one left unplaced never took effect.
            (Action::Write(v), None)
                if v != state && read_left(v) && !unknown_tried.contains(&v) =>
            {
                unknown_tried.push(v);
                v
            }
            (Action::Write(_), None) => continue,
        };
        flip(done, i);
        let found = search(ops, done, next, seen);
        flip(done, i);
        if found {
            return true;
        }
    }
    false
}

/// A small deterministic generator (xorshift64*), so a seed replays the same choices.
pub struct Rng(pub u64);

impl Rng {
    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// A client history being recorded: every operation on every key, timed from the start.
pub struct Run {
    /// When the run started.
    pub start: Instant,
    /// Operations by key.
    pub history: Mutex<BTreeMap<usize, Vec<Op>>>,
    /// The next value a write writes (every value is written once).
    pub next_value: AtomicI64,
}

impl Run {
    /// A new run, starting now.
    pub fn new() -> Run {
        Run { start: Instant::now(), history: Default::default(), next_value: AtomicI64::new(1) }
    }

    /// Now, in ns since the start.
    pub fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Records one operation on `key`.
    pub fn record(&self, key: usize, call: u64, ret: Option<u64>, action: Action) {
        self.history.lock().entry(key).or_default().push(Op { call, ret, action });
    }
}

/// A fault campaign: how many faults, the most time it may take, and its seed.
#[derive(Debug, Clone, Copy)]
pub struct Campaign {
    /// Faults injected, one after another (`EBB_NEMESIS_FAULTS`; the test gives a default).
    pub faults: u64,
    /// An upper limit on the campaign's time, not its length (`EBB_NEMESIS_SECS`, 300).
    pub limit: std::time::Duration,
    /// The seed of every random choice (`EBB_NEMESIS_SEED`; from the clock by default).
    pub seed: u64,
}

/// The campaign the environment asks for. A campaign is as long as its count of faults, so a
/// slow machine runs the same one more slowly; the time limit only stops one that hangs.
pub fn campaign(default_faults: u64) -> Campaign {
    let env = |name: &str| std::env::var(name).ok().and_then(|s| s.parse::<u64>().ok());
    let seed = env("EBB_NEMESIS_SEED").unwrap_or_else(|| {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        now.map_or(1, |d| d.as_nanos() as u64 | 1)
    });
    Campaign {
        faults: env("EBB_NEMESIS_FAULTS").unwrap_or(default_faults),
        limit: std::time::Duration::from_secs(env("EBB_NEMESIS_SECS").unwrap_or(300)),
        seed,
    }
}

/// True once `history` holds what [`assert_not_vacuous`] asks for.
pub fn not_vacuous(history: &BTreeMap<usize, Vec<Op>>) -> bool {
    vacuity(history).is_ok()
}

/// What `history` exercised: acknowledged writes and deletes, and whether a read found a key
/// absent after an acknowledged delete of it; an error naming what is missing.
fn vacuity(history: &BTreeMap<usize, Vec<Op>>) -> Result<(), String> {
    let all: Vec<&Op> = history.values().flatten().collect();
    let acked = |a: Action| all.iter().filter(|o| o.ret.is_some() && o.action == a).count();
    let writes = all
        .iter()
        .filter(|o| o.ret.is_some() && matches!(o.action, Action::Write(Some(_))))
        .count();
    let deletes = acked(Action::Write(None));
    let absent_after_delete = history.values().any(|ops| {
        ops.iter().any(|d| {
            d.action == Action::Write(None)
                && d.ret.is_some_and(|r| {
                    ops.iter().any(|o| o.action == Action::Read(None) && o.call > r)
                })
        })
    });
    if writes > 0 && deletes > 0 && absent_after_delete {
        return Ok(());
    }
    Err(format!(
        "the campaign acknowledged {writes} writes and {deletes} deletes, absent read after a \
         delete: {absent_after_delete}"
    ))
}

/// Asserts that `history` exercised what it is meant to check: acknowledged writes and deletes,
/// and a read that found a key absent after an acknowledged delete of it.
pub fn assert_not_vacuous(history: &BTreeMap<usize, Vec<Op>>) {
    if let Err(e) = vacuity(history) {
        panic!("{e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(call: u64, ret: Option<u64>, action: Action) -> Op {
        Op { call, ret, action }
    }

    #[test]
    fn register_histories_are_judged_right() {
        use Action::{Read, Write};
        // Sequential: write 1, read 1, delete, read none.
        let ok = [
            op(0, Some(1), Write(Some(1))),
            op(2, Some(3), Read(Some(1))),
            op(4, Some(5), Write(None)),
            op(6, Some(7), Read(None)),
        ];
        assert!(linearizable(&ok));
        // A deleted value seen again after the delete returned: not linearizable.
        let back = [
            op(0, Some(1), Write(Some(1))),
            op(4, Some(5), Write(None)),
            op(6, Some(7), Read(Some(1))),
        ];
        assert!(!linearizable(&back));
        // Concurrent write and read: the read may see either value.
        let concurrent = [
            op(0, Some(1), Write(Some(1))),
            op(2, Some(6), Write(Some(2))),
            op(3, Some(4), Read(Some(1))),
            op(5, Some(7), Read(Some(2))),
        ];
        assert!(linearizable(&concurrent));
        // Reads going back in time: 2 then 1 after the write of 2 returned.
        let stale = [
            op(0, Some(1), Write(Some(1))),
            op(2, Some(3), Write(Some(2))),
            op(4, Some(5), Read(Some(2))),
            op(6, Some(7), Read(Some(1))),
        ];
        assert!(!linearizable(&stale));
        // An unknown write may have happened (seen later) or not (never seen).
        let maybe = [op(0, None, Write(Some(9))), op(5, Some(6), Read(Some(9)))];
        assert!(linearizable(&maybe));
        let never = [op(0, None, Write(Some(9))), op(5, Some(6), Read(None))];
        assert!(linearizable(&never));
        // ...but not both at once in contradicting order.
        let flip = [
            op(0, None, Write(Some(9))),
            op(5, Some(6), Read(Some(9))),
            op(7, Some(8), Read(None)),
        ];
        assert!(!linearizable(&flip));
        // Many deletes and writes of unknown outcome, all concurrent with what follows: judged
        // at once, whether the rest is linearizable or not.
        let unknown = |n: u64| {
            (0..n).flat_map(|k| {
                [op(k, None, Write(None)), op(k, None, Write(Some(1_000 + k as i64)))]
            })
        };
        let mut stale: Vec<Op> = unknown(40).collect();
        stale.extend([
            op(100, Some(101), Write(Some(1))),
            op(102, Some(103), Read(None)),
            op(104, Some(105), Write(Some(2))),
            op(106, Some(107), Read(Some(1))),
        ]);
        assert!(!linearizable(&stale));
        stale.pop();
        stale.push(op(106, Some(107), Read(Some(1_007))));
        assert!(linearizable(&stale));
    }
}
