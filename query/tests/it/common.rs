//! Helpers the SQL tests share.

/// A deterministic stream of numbers in `0..m` (xorshift from `seed`).
pub fn numbers(mut seed: u64) -> impl FnMut(i64) -> i64 {
    move |m| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        i64::try_from(seed % u64::try_from(m).expect("m")).expect("small")
    }
}
