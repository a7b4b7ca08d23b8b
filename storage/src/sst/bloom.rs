//! Per-page Bloom filters on the sort key.
//!
//! A key is hashed once per lookup (`xxh3`); every page filter probed during that lookup derives
//! its k bit positions from the same 64-bit hash by double hashing.

/// Hash of a key, computed once per lookup.
#[inline]
pub fn key_hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

/// Builds one filter from key hashes. Layout: bit array, then one byte holding k.
pub fn build(hashes: &[u64], bits_per_key: u32, out: &mut Vec<u8>) {
    if bits_per_key == 0 || hashes.is_empty() {
        return;
    }
    let bits = (hashes.len() * bits_per_key as usize).max(64);
    let bytes = bits.div_ceil(8);
    let bits = bytes * 8;
    let k = ((bits_per_key as f64 * std::f64::consts::LN_2).round() as u32).clamp(1, 30);
    let start = out.len();
    out.resize(start + bytes, 0);
    let arr = &mut out[start..];
    for &h in hashes {
        let (mut h1, h2) = split(h);
        for _ in 0..k {
            let bit = (h1 as usize) % bits;
            arr[bit / 8] |= 1 << (bit % 8);
            h1 = h1.wrapping_add(h2);
        }
    }
    out.push(k as u8);
}

#[inline]
fn split(h: u64) -> (u32, u32) {
    (h as u32, ((h >> 32) as u32) | 1)
}

/// True if the filter may contain the key with hash `h`. An empty filter matches everything.
#[inline]
pub fn may_contain(filter: &[u8], h: u64) -> bool {
    let Some((&k, arr)) = filter.split_last() else {
        return true;
    };
    if arr.is_empty() || k == 0 || k > 30 {
        return true; // malformed filters degrade to "maybe", never to a false negative
    }
    let bits = arr.len() * 8;
    let (mut h1, h2) = split(h);
    for _ in 0..k {
        let bit = (h1 as usize) % bits;
        if arr[bit / 8] & (1 << (bit % 8)) == 0 {
            return false;
        }
        h1 = h1.wrapping_add(h2);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_false_negatives_and_low_fpr() {
        let keys: Vec<u64> = (0..1000u64).map(|i| key_hash(&i.to_be_bytes())).collect();
        let mut f = Vec::new();
        build(&keys, 10, &mut f);
        assert!(keys.iter().all(|&h| may_contain(&f, h)));
        let fp = (1000..101_000u64).filter(|i| may_contain(&f, key_hash(&i.to_be_bytes()))).count();
        let rate = fp as f64 / 100_000.0;
        assert!(rate < 0.02, "false-positive rate {rate}");
    }
}
