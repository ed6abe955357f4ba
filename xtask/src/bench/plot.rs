//! `--plot FILE.svg`: the rows as bar charts, one panel per measurement, one bar per format.

use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::prelude::*;

use super::Row;

/// A panel: its title and the value it shows of a row.
type Panel = (&'static str, fn(&Row) -> f64);

/// The panels.
const PANELS: [Panel; 6] = [
    ("file MB", |r| r.file_bytes as f64 / 1e6),
    ("open, cold ms", |r| r.open_cold_ms),
    ("first token ms", |r| r.first_token_ms),
    ("prefill tok/s", |r| r.prefill_tok_s),
    ("decode tok/s", |r| r.decode_tok_s),
    ("peak RSS / copied MB", |r| r.peak_rss_bytes as f64 / 1e6),
];

const COLORS: [RGBColor; 3] = [RGBColor(31, 119, 180), RGBColor(255, 127, 14), RGBColor(44, 160, 44)];

/// Draws `rows` into `path`.
pub fn svg(path: &Path, title: &str, rows: &[Row]) -> Result<()> {
    let err = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
    let root = SVGBackend::new(path, (1200, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let root = root.titled(title, ("sans-serif", 22)).map_err(|e| err(&e))?;
    let panels = root.split_evenly((2, 3));
    for ((name, value), area) in PANELS.iter().zip(&panels) {
        let top = rows.iter().map(value).fold(0.0f64, f64::max).max(1e-9) * 1.15;
        let mut chart = ChartBuilder::on(area)
            .caption(*name, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(24)
            .y_label_area_size(56)
            .build_cartesian_2d(0.0..rows.len() as f64, 0.0..top)
            .map_err(|e| err(&e))?;
        let labels: Vec<String> = rows.iter().map(|r| r.format.clone()).collect();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(rows.len().max(1) * 2 + 1)
            .x_label_formatter(&|x| {
                let i = x.floor() as usize;
                if (x - i as f64 - 0.5).abs() < 0.26 {
                    labels.get(i).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .draw()
            .map_err(|e| err(&e))?;
        let bars = rows.iter().enumerate().map(|(i, r)| {
            let color = COLORS[i % COLORS.len()];
            Rectangle::new([(i as f64 + 0.15, 0.0), (i as f64 + 0.85, value(r))], color.filled())
        });
        chart.draw_series(bars).map_err(|e| err(&e))?;
        if *name == "peak RSS / copied MB" {
            // The copied part of the peak, darker, inside each bar.
            let copied = rows.iter().enumerate().map(|(i, r)| {
                Rectangle::new(
                    [(i as f64 + 0.3, 0.0), (i as f64 + 0.7, r.copied_bytes as f64 / 1e6)],
                    BLACK.mix(0.6).filled(),
                )
            });
            chart.draw_series(copied).map_err(|e| err(&e))?;
        }
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
