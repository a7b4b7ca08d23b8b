//! KiWi+ tuning: the delete-tile size `h_i` of each level from the cost model of note 004 §3.5
//! (Eq. 14, with the paper's `E'_i` replaced by `E''_i`, the share of lookups that pass *through*
//! level `i`, as Q3 and Algorithm 3 have it).
//!
//! `h_i* = sqrt(f_SRD * P * T^i / (phi * (f_EPQ + f_PQ * E''_i) + phi * f_PQ * E_i / 2 + f_SRQ))`,
//! rounded and clamped to `[1, P]`; `h = 1` when there is less than one secondary range delete
//! per epoch. Frequencies are counts per epoch (between two time-window deletes).

/// Operation counts per epoch (between two time-window deletes).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkloadMix {
    /// Point lookups of absent keys.
    pub empty_lookups: f64,
    /// Point lookups of present keys.
    pub lookups: f64,
    /// Short range scans.
    pub short_scans: f64,
    /// Time-window (secondary range) deletes.
    pub window_deletes: f64,
}

/// Tile size per disk level `1..=levels` (index 0 is level 1).
///
/// `pages_per_file` is P, `size_ratio` T, `fpr` the Bloom filter false-positive rate.
pub fn tile_pages(
    mix: &WorkloadMix,
    levels: usize,
    size_ratio: u32,
    pages_per_file: usize,
    fpr: f64,
) -> Vec<usize> {
    let t = f64::from(size_ratio.max(2));
    let p = pages_per_file.max(1) as f64;
    let total: f64 = (0..=levels).map(|j| t.powi(j as i32)).sum();
    (1..=levels)
        .map(|i| {
            if mix.window_deletes < 1.0 {
                return 1;
            }
            let e_i = t.powi(i as i32) / total;
            let e_after: f64 = (i + 1..=levels).map(|j| t.powi(j as i32)).sum::<f64>() / total;
            let q3 = fpr * (mix.empty_lookups + mix.lookups * e_after)
                + fpr * mix.lookups * e_i / 2.0
                + mix.short_scans;
            let q4 = mix.window_deletes * p * t.powi(i as i32);
            let h = if q3 <= 0.0 { p } else { (q4 / q3).sqrt() };
            (h.round() as usize).clamp(1, pages_per_file.max(1))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mix(lookups: f64, scans: f64, srd: f64) -> WorkloadMix {
        WorkloadMix { empty_lookups: lookups, lookups, short_scans: scans, window_deletes: srd }
    }

    #[test]
    fn grows_with_depth_and_stays_in_bounds() {
        let h = tile_pages(&mix(5e7, 1e4, 1.0), 6, 10, 256, 0.0082);
        assert!(h.windows(2).all(|w| w[0] <= w[1]), "{h:?}");
        assert!(h.iter().all(|&x| (1..=256).contains(&x)), "{h:?}");
        assert!(h[5] > h[0], "{h:?}");
    }

    #[test]
    fn responds_to_the_mix() {
        let base = tile_pages(&mix(1e5, 1e3, 1.0), 5, 10, 256, 0.01);
        let more_deletes = tile_pages(&mix(1e5, 1e3, 20.0), 5, 10, 256, 0.01);
        let more_reads = tile_pages(&mix(1e7, 1e5, 1.0), 5, 10, 256, 0.01);
        for i in 0..5 {
            assert!(more_deletes[i] >= base[i] && more_reads[i] <= base[i]);
        }
        assert_eq!(tile_pages(&mix(1e5, 1e3, 0.5), 5, 10, 256, 0.01), vec![1; 5]);
        // No reads at all: the largest tiles.
        assert_eq!(tile_pages(&mix(0.0, 0.0, 1.0), 3, 10, 64, 0.01), vec![64; 3]);
    }
}
