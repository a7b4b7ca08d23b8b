//! `RESULT` lines.

/// Whether a larger value of a metric is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    /// Throughput-like: ratio = ebb / baseline.
    Higher,
    /// Latency- or size-like: ratio = baseline / ebb.
    Lower,
}

/// One compared figure.
#[derive(Debug, Clone)]
pub struct Comparison {
    /// Benchmark name (`engine`).
    pub bench: String,
    /// Metric name (`fillrandom`).
    pub metric: String,
    /// Extra `key=value` parameters.
    pub params: Vec<(String, String)>,
    /// EbbDB's value.
    pub ebb: f64,
    /// Baseline name (`rocksdb`).
    pub baseline: String,
    /// Baseline value.
    pub base: f64,
    /// Direction.
    pub better: Better,
}

impl Comparison {
    /// How many times better EbbDB is.
    pub fn ratio(&self) -> f64 {
        match self.better {
            Better::Higher => self.ebb / self.base,
            Better::Lower => self.base / self.ebb,
        }
    }

    /// The `RESULT` line.
    pub fn line(&self) -> String {
        let mut s = format!("RESULT {} {}", self.bench, self.metric);
        for (k, v) in &self.params {
            s.push_str(&format!(" {k}={v}"));
        }
        s.push_str(&format!(
            " ebb={} {}={} ratio={:.3}",
            fmt(self.ebb),
            self.baseline,
            fmt(self.base),
            self.ratio()
        ));
        s
    }
}

fn fmt(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

/// The median of `v` (the upper one of an even count); `v` must not be empty.
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_direction() {
        let mut c = Comparison {
            bench: "engine".into(),
            metric: "fillrandom".into(),
            params: vec![],
            ebb: 200.0,
            baseline: "rocksdb".into(),
            base: 100.0,
            better: Better::Higher,
        };
        assert_eq!(c.line(), "RESULT engine fillrandom ebb=200 rocksdb=100 ratio=2.000");
        c.better = Better::Lower;
        assert!((c.ratio() - 0.5).abs() < 1e-12);
    }
}
