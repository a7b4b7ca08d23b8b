//! A write budget shared by engines bounds their memtables together: two engines whose
//! memtables alone would each grow to 64 MiB stay near the budget's limit, with every write
//! readable; the same load without a budget grows past it.

use std::sync::Arc;

use ebb_storage::{Engine, Options, SyncMode, WriteBudget};

const LIMIT: usize = 4 << 20;
const VALUE: usize = 4096;
const KEYS: u64 = 3_000; // 12 MiB of values per engine

/// Writes the load to two engines sharing `budget` and returns the most memtable bytes (active
/// and sealed) the budget saw them hold at once.
fn peak(dirs: &[tempfile::TempDir; 2], budget: &Arc<WriteBudget>) -> usize {
    let opts = Options {
        sync: SyncMode::None,
        write_budget: Some(budget.clone()),
        memtable_max_age: None,
        ..Options::default()
    };
    let engines: Vec<Engine> =
        dirs.iter().map(|d| Engine::open(d.path(), opts.clone()).expect("open")).collect();
    let mut peak = 0;
    for i in 0..KEYS {
        for (n, e) in engines.iter().enumerate() {
            let value = vec![(i % 251) as u8 ^ n as u8; VALUE];
            e.put(i.to_be_bytes().to_vec(), value, i + 1).expect("put");
        }
        peak = peak.max(budget.used());
    }
    for (n, e) in engines.iter().enumerate() {
        for i in (0..KEYS).step_by(97) {
            let v = e.get(&i.to_be_bytes(), None).expect("get").expect("written");
            assert_eq!(v.as_ref(), vec![(i % 251) as u8 ^ n as u8; VALUE].as_slice());
        }
    }
    peak
}

#[test]
fn a_shared_budget_bounds_memtables_together() {
    let budget = WriteBudget::new(LIMIT);
    let dirs = || [tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir")];
    let with = peak(&dirs(), &budget);
    // A budget never spent: the engines' memtables alone bound them.
    let unbounded = WriteBudget::new(usize::MAX);
    let without = peak(&dirs(), &unbounded);
    assert!(without > 20 << 20, "without a budget the memtables grow: {without}");
    assert_eq!(unbounded.used(), 0, "closed engines return their share");
    // The limit, plus what each engine writes before it sees the budget spent, plus sealed
    // memtables waiting for their flush.
    assert!(with < 3 * LIMIT, "with a budget of {LIMIT}: peak {with}");
    assert_eq!(budget.used(), 0, "closed engines return their share");
}
