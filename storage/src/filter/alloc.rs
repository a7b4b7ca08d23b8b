//! Memory of a Rosetta instance split across its levels.
//!
//! The paper's Eq. 3 minimises `sum_r g(r) * eps_r`, the expected false-positive *probes*; but a
//! query is answered wrongly only when a chain of positives reaches the bottom level, so that
//! objective spends too much on upper levels (at 16 bits per key it leaves the bottom level
//! with a 14% false-positive rate on uniform keys). Instead, as the paper's own analysis
//! suggests (note 002 §2.6), the split is chosen numerically: for each candidate (how many
//! levels above the bottom get a filter, and at what false-positive rate), the expected
//! false-positive rate and probe count of a typical range are computed with the recurrences
//! `F_0 = eps_0`, `F_j = phi_j * (1 - (1 - F_{j-1})^2)` and `P_0 = 1`,
//! `P_j = 1 + phi_j * (2 - F_{j-1}) * P_{j-1}` over the range's dyadic pieces, and the
//! candidate with the lowest `rate + probes / 100` (a probe touches one cache line; opening a
//! file for an empty range costs about a hundred of them) within the probe budget wins. Zero upper levels is the paper's single-level filter,
//! every level at `phi = 1 / (2 - eps)` its first-cut equilibrium. Each level costs its true
//! number of distinct prefixes, so upper levels are cheap where keys cluster (time series).

/// Bits and probe count of one level's Bloom filter (`bits == 0`: no filter, always "maybe").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LevelSize {
    pub bits: u64,
    pub k: u32,
}

const LN2_SQ: f64 = std::f64::consts::LN_2 * std::f64::consts::LN_2;

/// Cost of one probe relative to a file opened for a range that turns out empty.
const PROBE_COST: f64 = 0.01;

/// Heights of the dyadic pieces of `[start, start + len)`, pieces above `top` split into
/// pieces at height `top`.
fn pieces(start: u64, len: u64, top: u32, out: &mut Vec<u32>) {
    out.clear();
    let (mut lo, hi) = (u128::from(start), u128::from(start) + u128::from(len.max(1)) - 1);
    while lo <= hi && out.len() < 4096 {
        let align = if lo == 0 { 127 } else { lo.trailing_zeros() };
        let j = align.min(127 - (hi - lo + 1).leading_zeros());
        let jj = j.min(top);
        for _ in 0..(1u64 << (j - jj).min(12)) {
            out.push(jj);
        }
        lo += 1u128 << j;
    }
}

/// Expected (false-positive rate, probes) of an empty range of `len` buckets with per-level
/// false-positive rates `phi` (level 0 first).
pub(crate) fn predict(phi: &[f64], len: u64) -> (f64, f64) {
    let top = phi.len() as u32 - 1;
    let (mut f, mut p) = (vec![phi[0]], vec![1.0]);
    for j in 1..phi.len() {
        let (fp, pp) = (f[j - 1], p[j - 1]);
        f.push(phi[j] * (1.0 - (1.0 - fp) * (1.0 - fp)));
        p.push(1.0 + phi[j] * (2.0 - fp) * pp);
    }
    let (mut fpr, mut probes, mut hs) = (0.0, 0.0, Vec::new());
    const STARTS: u64 = 16;
    for i in 0..STARTS {
        pieces(i.wrapping_mul(0x9e37_79b1) % (1 << 20), len, top, &mut hs);
        let miss: f64 = hs.iter().map(|&h| 1.0 - f[h as usize]).product();
        fpr += 1.0 - miss;
        probes += hs.iter().map(|&h| p[h as usize]).sum::<f64>();
    }
    (fpr / STARTS as f64, probes / STARTS as f64)
}

/// Sizes for levels with `n[j]` distinct prefixes (level 0 = the bucket), for ranges of about
/// `range` buckets, within `budget` bits and about `max_probes` probes per range.
pub(crate) fn allocate(n: &[u64], range: u64, budget: f64, max_probes: f64) -> Vec<LevelSize> {
    let empty = vec![LevelSize { bits: 0, k: 0 }; n.len()];
    let Some(&n0) = n.first() else { return empty };
    if n0 == 0 || budget < 64.0 {
        return empty;
    }
    let bits_for = |phi: f64| -phi.ln() / LN2_SQ;
    let mut best: Option<(f64, Vec<f64>)> = None; // (cost, bits per prefix)
    for t in 0..n.len() {
        for phi_u in [0.5, 0.35, 0.2, 0.1, 0.05, 0.02] {
            let upper: f64 = n[1..=t].iter().map(|&x| x as f64 * bits_for(phi_u)).sum();
            // Past 32 bits per prefix a Bloom filter gains nothing measurable: keys that
            // cluster in few buckets leave the rest of the budget unspent.
            let b0 = ((budget - upper) / n0 as f64).min(32.0);
            if b0 < 1.0 {
                continue;
            }
            let mut phi = vec![(-b0 * LN2_SQ).exp()];
            phi.extend((1..n.len()).map(|j| if j <= t { phi_u } else { 1.0 }));
            let (fpr, probes) = predict(&phi, range);
            if probes > max_probes {
                continue;
            }
            // A probe (one cache line) costs about a hundredth of opening a file for nothing.
            let cost = fpr + PROBE_COST * probes;
            if best.as_ref().is_none_or(|(c, _)| cost < *c) {
                let mut per = vec![b0];
                per.extend((1..n.len()).map(|j| if j <= t { bits_for(phi_u) } else { 0.0 }));
                best = Some((cost, per));
            }
        }
    }
    let Some((_, per)) = best else { return empty };
    n.iter()
        .zip(per)
        .map(|(&n, b)| {
            if n == 0 || b <= 0.0 {
                return LevelSize { bits: 0, k: 0 };
            }
            let bits = ((n as f64 * b).ceil() as u64).next_multiple_of(512);
            let k = (b * std::f64::consts::LN_2).round().clamp(1.0, 16.0) as u32;
            LevelSize { bits, k }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_budget_and_single_level_for_tiny_ranges() {
        let n = [1000u64, 1000, 1000, 1000, 1000, 1000, 1000, 1000];
        for range in [2u64, 16, 64] {
            let got = allocate(&n, range, 16_000.0, 256.0);
            let total: u64 = got.iter().map(|l| l.bits).sum();
            assert!(total as f64 <= 16_000.0 * 1.01 + 512.0 * 8.0, "{got:?}");
            assert!(total as f64 >= 16_000.0 * 0.95, "{got:?}");
            assert!(got[0].bits >= got[1].bits, "{got:?}");
            assert!(got.iter().all(|l| l.bits == 0 || l.k >= 1));
        }
        // Two-key ranges: nearly everything on the bottom level, nothing above height 1.
        let tiny = allocate(&n, 2, 16_000.0, 256.0);
        assert!(tiny[0].bits > 3 * tiny[1].bits, "{tiny:?}");
        assert!(tiny[2..].iter().all(|l| l.bits == 0), "{tiny:?}");
        assert!(allocate(&n, 64, 0.0, 256.0).iter().all(|l| l.bits == 0));
        assert!(allocate(&[0, 0], 8, 1e6, 256.0).iter().all(|l| l.bits == 0));
    }

    #[test]
    fn cheap_upper_levels_are_used_for_long_ranges() {
        // Clustered keys: few distinct prefixes above the bottom; long ranges.
        let n = [10_000u64, 5000, 2500, 1250, 625, 312, 156, 78, 39];
        let got = allocate(&n, 200, 10.0 * 10_000.0, 256.0);
        assert!(got[3].bits > 0, "{got:?}");
        let (fpr, probes) = predict(&[0.01, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5], 64);
        assert!(fpr < 0.15 && probes < 100.0, "{fpr} {probes}");
        // More memory never predicts worse.
        let phi = |b: f64| (-b * LN2_SQ).exp();
        assert!(predict(&[phi(20.0), 1.0], 8).0 < predict(&[phi(10.0), 1.0], 8).0);
    }
}
