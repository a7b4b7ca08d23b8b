//! Range filters never answer "empty" for a range holding a key, and answer it for most empty
//! short ranges.

use std::collections::BTreeSet;
use std::ops::Bound;

use bytes::Bytes;
use proptest::prelude::*;

use super::rosetta::{Rosetta, RosettaBuilder};
use super::{RangeFilterOptions, RangeFilterSpec};

fn build(spec: RangeFilterSpec, keys: &BTreeSet<Vec<u8>>) -> Rosetta {
    let mut b = RosettaBuilder::new(spec).expect("spec");
    for k in keys {
        b.add(k);
        b.add(k); // a second version of the key
    }
    Rosetta::decode(Bytes::from(b.finish().expect("keys"))).expect("decode")
}

fn opts(key_len: usize, bits: f64) -> RangeFilterOptions {
    RangeFilterOptions { key_len, bits_per_key: bits, default_range: 64, range_buckets: 64 }
}

fn u64_key(x: u64) -> Vec<u8> {
    x.to_be_bytes().to_vec()
}

fn holds(keys: &BTreeSet<Vec<u8>>, lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> bool {
    fn key(b: Bound<&[u8]>) -> Option<&[u8]> {
        match b {
            Bound::Included(k) | Bound::Excluded(k) => Some(k),
            Bound::Unbounded => None,
        }
    }
    if let (Some(l), Some(h)) = (key(lo), key(hi)) {
        let open = matches!(lo, Bound::Excluded(_)) || matches!(hi, Bound::Excluded(_));
        if l > h || (l == h && open) {
            return false;
        }
    }
    keys.range::<[u8], _>((lo, hi)).next().is_some()
}

#[test]
fn every_range_of_a_small_domain() {
    for (range, bits) in [(8u64, 12.0), (64, 12.0), (1 << 12, 12.0)] {
        let mut rng = 0x1234_5678u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let keys: BTreeSet<Vec<u8>> = (0..120).map(|_| u64_key(next() % 1024)).collect();
        let spec = RangeFilterSpec::for_range(&opts(8, bits), range);
        let f = build(spec, &keys);
        let (mut empty, mut said_empty) = (0, 0);
        for a in 0..1100u64 {
            for b in a..(a + 80).min(1100) {
                let (la, lb) = (u64_key(a), u64_key(b));
                let (lo, hi) = (Bound::Included(la.as_slice()), Bound::Included(lb.as_slice()));
                let truth = holds(&keys, lo, hi);
                let got = f.may_overlap(lo, hi);
                assert!(got || !truth, "false negative [{a}, {b}] range {range}");
                if !truth {
                    empty += 1;
                    said_empty += usize::from(!got);
                }
            }
        }
        // Buckets wider than the queries cannot tell their empty parts apart.
        if range <= 64 {
            assert!(said_empty * 2 > empty, "range {range}: {said_empty} of {empty} empty found");
        }
    }
}

#[test]
fn empty_short_ranges_are_mostly_filtered() {
    let mut rng = 0x9e37_79b9u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let keys: BTreeSet<Vec<u8>> = (0..100_000).map(|_| u64_key(next())).collect();
    let f = build(RangeFilterSpec::for_range(&opts(8, 16.0), 64), &keys);
    let sorted: Vec<u64> =
        keys.iter().map(|k| u64::from_be_bytes(k[..].try_into().unwrap())).collect();
    for correlated in [false, true] {
        let (mut n, mut fp) = (0u32, 0u32);
        for i in 0..20_000u64 {
            let len = 2 + next() % 63;
            let a = if correlated {
                sorted[(next() % 100_000) as usize].wrapping_add(1)
            } else {
                next()
            };
            let Some(b) = a.checked_add(len - 1) else { continue };
            let (la, lb) = (u64_key(a), u64_key(b));
            let (lo, hi) = (Bound::Included(la.as_slice()), Bound::Included(lb.as_slice()));
            if holds(&keys, lo, hi) {
                assert!(f.may_overlap(lo, hi), "false negative at {i}");
                continue;
            }
            n += 1;
            fp += u32::from(f.may_overlap(lo, hi));
        }
        let rate = f64::from(fp) / f64::from(n);
        assert!(rate < 0.12, "correlated {correlated}: false-positive rate {rate}");
    }
}

fn key12(head: u8, t: u64) -> Vec<u8> {
    let mut k = vec![0, 0, 1, head];
    k.extend_from_slice(&t.to_be_bytes());
    k
}

fn bound(k: &[u8], incl: bool) -> Bound<&[u8]> {
    if incl {
        Bound::Included(k)
    } else {
        Bound::Excluded(k)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Keys with heads, keys of other lengths, any bounds: a range holding a key is never
    /// reported empty.
    #[test]
    fn no_false_negatives(
        rows in prop::collection::vec((0u8..6, 0u64..5000), 1..300),
        foreign in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..16), 0..5),
        range in 1u64..100_000,
        bits in 1.0f64..20.0,
        queries in prop::collection::vec((0u8..6, 0u64..6000, 0u64..3000, any::<bool>(), any::<bool>()), 50),
    ) {
        let mut keys: BTreeSet<Vec<u8>> = rows.iter().map(|&(h, t)| key12(h, t)).collect();
        for f in foreign {
            // Other lengths, some sharing heads with the rows.
            let mut k = vec![0, 0, 1, f.first().copied().unwrap_or(0) % 6];
            k.extend_from_slice(&f);
            keys.insert(k);
        }
        let f = build(RangeFilterSpec::for_range(&opts(12, bits), range), &keys);
        for (h, a, len, li, hi_incl) in queries {
            let (la, lb) = (key12(h, a), key12(h, a + len));
            let (lo, hi) = (bound(&la, li), bound(&lb, hi_incl));
            if holds(&keys, lo, hi) {
                prop_assert!(f.may_overlap(lo, hi), "false negative {h} [{a}, {}]", a + len);
            }
        }
    }

    /// Garbage never panics the decoder or a probe.
    #[test]
    fn garbage_is_refused_or_harmless(data in prop::collection::vec(any::<u8>(), 0..200)) {
        let mut d = data;
        if d.len() > 2 {
            d[0] = b'R';
            d[1] = 1;
        }
        if let Ok(f) = Rosetta::decode(Bytes::from(d)) {
            let (a, b) = (key12(1, 5), key12(1, 500));
            let _ = f.may_overlap(Bound::Included(&a), Bound::Included(&b));
        }
    }
}

#[test]
fn extreme_specs_do_not_overflow() {
    let o = RangeFilterOptions { range_buckets: 1, ..opts(12, 10.0) };
    for range in [0, 1, 2, u64::MAX / 2, u64::MAX - 1, u64::MAX] {
        let spec = RangeFilterSpec::for_range(&o, range);
        assert!(spec.shift < 64, "{spec:?}");
        let keys: BTreeSet<Vec<u8>> = (0..50u64).map(|t| key12(1, t << 40)).collect();
        let f = build(spec, &keys);
        let (lo, hi) = (key12(1, 0), key12(1, u64::MAX));
        assert!(f.may_overlap(Bound::Included(&lo), Bound::Included(&hi)));
    }
    // Every key in one bucket: the bottom level stays small.
    let keys: BTreeSet<Vec<u8>> = (0..10_000u64).map(|t| key12(1, t)).collect();
    let mut b = RosettaBuilder::new(RangeFilterSpec::for_range(&opts(12, 10.0), 1 << 40)).unwrap();
    keys.iter().for_each(|k| b.add(k));
    assert!(b.finish().unwrap().len() < 4096);
}
