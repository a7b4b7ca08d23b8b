//! The `ebb-bench range-delete --plot` chart: lookup mean latency and throughput against RD%,
//! one line per system, written as SVG.

use std::path::Path;

use plotters::prelude::*;

/// One system's figures: `(rd_percent, lookup_mean_us, ops_per_sec)` per RD%.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend label.
    pub label: String,
    /// Points in RD% order.
    pub points: Vec<(f64, f64, f64)>,
}

/// Picks the plotted figure out of a point.
type Metric = fn(&(f64, f64, f64)) -> f64;

const COLORS: [RGBColor; 3] = [RGBColor(0, 114, 178), RGBColor(230, 159, 0), RGBColor(204, 0, 0)];

/// Writes the two-panel chart to `path`.
pub fn write(path: &Path, series: &[Series]) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("plot {}: {e}", path.display());
    let root = SVGBackend::new(path, (1100, 440)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let panels = root.split_evenly((1, 2));
    let rd_max = series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).fold(1.0, f64::max);
    let pick: [(&str, Metric); 2] =
        [("lookup mean (us, log scale)", |p| p.1), ("throughput (ops/s, log scale)", |p| p.2)];
    for (panel, (title, y)) in panels.iter().zip(pick) {
        let ys: Vec<f64> = series.iter().flat_map(|s| s.points.iter().map(y)).collect();
        let lo = ys.iter().copied().fold(f64::INFINITY, f64::min).max(1e-3) / 1.5;
        let hi = ys.iter().copied().fold(0.0, f64::max).max(lo * 2.0) * 1.5;
        let mut chart = ChartBuilder::on(panel)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..rd_max, (lo..hi).log_scale())
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("range deletes, % of operations")
            .y_label_formatter(&|v| format!("{v:.0}"))
            .draw()
            .map_err(|e| err(&e))?;
        for (i, s) in series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let pts: Vec<(f64, f64)> = s.points.iter().map(|p| (p.0, y(p))).collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(s.label.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart
                .draw_series(pts.into_iter().map(|p| Circle::new(p, 4, color.filled())))
                .map_err(|e| err(&e))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn writes_an_svg_with_every_series() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.svg");
        let series = vec![
            Series { label: "alpha".into(), points: vec![(0.0, 8.0, 1.5e5), (10.0, 9.0, 1.3e5)] },
            Series { label: "beta".into(), points: vec![(0.0, 12.0, 7e4), (10.0, 170.0, 1e4)] },
        ];
        write(&path, &series).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("alpha") && svg.contains("beta"));
        assert_eq!(svg.matches("<circle").count(), 8);
    }
}
