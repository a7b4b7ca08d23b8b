//! Helpers the deadline tests share: small files on a manual clock, and series-like keys.

use std::time::Duration;

use ebb_storage::{Clock, ManualClock, Options};

/// 2023-11-14T22:13:20Z in milliseconds: where the tests' manual clocks start.
pub const START_MS: u64 = 1_700_000_000_000;

/// Tiny memtables and files (so a few thousand writes make several levels), size ratio 4, time
/// from `clock`, and delete deadline `deadline`.
pub fn small_on_clock(clock: &ManualClock, deadline: Option<Duration>) -> Options {
    Options {
        write_buffer_size: 8 << 10,
        page_size: 512,
        target_file_size: 8 << 10,
        base_level_size: 16 << 10,
        level0_compaction_trigger: 2,
        size_ratio: 4,
        memtable_max_age: None,
        delete_deadline: deadline,
        clock: Clock::manual(clock),
        ..Options::default()
    }
}

/// `series-` followed by `i` big-endian: keys in `i` order.
pub fn series_key(i: u64) -> Vec<u8> {
    let mut key = b"series-".to_vec();
    key.extend_from_slice(&i.to_be_bytes());
    key
}
