//! Storage keys.
//!
//! A row's key is `(table_id u32, series_id u64, time i64)`, big-endian, with the sign bit of
//! `time` flipped so byte order is tuple order (20 bytes). Series-major: one series over a time
//! window is one contiguous key range. The trailing 8 bytes are the engine's delete key, so the
//! engine's default `nanos_sign_flipped` time mapping makes retention and time-window deletes
//! work in nanoseconds.
//!
//! Table id 0 is the catalog: table definitions and the series index live under it (see
//! [`crate::model::catalog`]).

/// Length of a row key.
pub const ROW_KEY_LEN: usize = 20;

/// The table id reserved for the catalog.
pub const CATALOG_TABLE: u32 = 0;

/// `time` with the sign bit flipped, so unsigned order is signed order.
pub fn time_to_u64(t: i64) -> u64 {
    (t as u64) ^ (1 << 63)
}

/// Inverse of [`time_to_u64`].
pub fn u64_to_time(u: u64) -> i64 {
    (u ^ (1 << 63)) as i64
}

/// The key of a row.
pub fn row_key(table: u32, series: u64, time: i64) -> [u8; ROW_KEY_LEN] {
    let mut k = [0u8; ROW_KEY_LEN];
    k[..4].copy_from_slice(&table.to_be_bytes());
    k[4..12].copy_from_slice(&series.to_be_bytes());
    k[12..].copy_from_slice(&time_to_u64(time).to_be_bytes());
    k
}

/// Splits a row key into `(table, series, time)`; `None` if it is not a row key.
pub fn parse_row_key(k: &[u8]) -> Option<(u32, u64, i64)> {
    if k.len() != ROW_KEY_LEN {
        return None;
    }
    let table = u32::from_be_bytes(k[..4].try_into().ok()?);
    let series = u64::from_be_bytes(k[4..12].try_into().ok()?);
    let time = u64_to_time(u64::from_be_bytes(k[12..].try_into().ok()?));
    Some((table, series, time))
}

/// The key prefix of every row of a table.
pub fn table_prefix(table: u32) -> [u8; 4] {
    table.to_be_bytes()
}

/// `[lo, hi)` keys of a whole table.
pub fn table_range(table: u32) -> (Vec<u8>, Vec<u8>) {
    let lo = table_prefix(table).to_vec();
    let hi = match table.checked_add(1) {
        Some(next) => table_prefix(next).to_vec(),
        None => Vec::new(), // unbounded
    };
    (lo, hi)
}

/// `[lo, hi)` keys of one series with `time` in `[t_lo, t_hi)` (`t_hi = None`: unbounded).
pub fn series_range(table: u32, series: u64, t_lo: i64, t_hi: Option<i64>) -> (Vec<u8>, Vec<u8>) {
    let lo = row_key(table, series, t_lo).to_vec();
    let hi = match t_hi {
        Some(t) => row_key(table, series, t).to_vec(),
        None => match series.checked_add(1) {
            Some(next) => row_key(table, next, i64::MIN).to_vec(),
            None => table_range(table).1,
        },
    };
    (lo, hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_order_is_tuple_order() {
        let keys = [
            (1u32, 0u64, i64::MIN),
            (1, 0, -1),
            (1, 0, 0),
            (1, 0, 5),
            (1, 1, -7),
            (2, 0, i64::MIN),
        ];
        let enc: Vec<_> = keys.iter().map(|&(t, s, ts)| row_key(t, s, ts)).collect();
        assert!(enc.windows(2).all(|w| w[0] < w[1]));
        for (k, want) in enc.iter().zip(keys) {
            assert_eq!(parse_row_key(k), Some(want));
        }
        assert_eq!(u64_to_time(time_to_u64(-42)), -42);
        let (lo, hi) = series_range(3, 9, 10, Some(20));
        assert!(lo.as_slice() <= row_key(3, 9, 10).as_slice());
        assert!(row_key(3, 9, 19).as_slice() < hi.as_slice());
        assert!(row_key(3, 9, 20).as_slice() >= hi.as_slice());
        let (_, hi) = series_range(3, 9, 10, None);
        assert!(row_key(3, 9, i64::MAX).as_slice() < hi.as_slice());
        assert!(row_key(3, 10, i64::MIN).as_slice() >= hi.as_slice());
    }
}
