//! PNG charts of predicted breakdowns: one stacked bar per run.

use crate::predict::Breakdown;
use anyhow::{Result, anyhow};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;
use std::sync::Once;

/// The one font family charts use, embedded (DejaVu Sans) so text needs no system fonts.
const FONT: &str = "sans-serif";

fn register_fonts() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The embedded TTF parses (it ships with the `dejavu` crate); a failure here is a bug.
        plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular())
            .unwrap_or_else(|_| panic!("embedded DejaVu Sans did not parse"));
    });
}

const SEGMENTS: [(&str, RGBColor); 8] = [
    ("GEMM", RGBColor(31, 119, 180)),
    ("attention", RGBColor(174, 199, 232)),
    ("elementwise", RGBColor(152, 223, 138)),
    ("TP comm", RGBColor(214, 39, 40)),
    ("PP comm", RGBColor(255, 152, 150)),
    ("DP comm", RGBColor(148, 103, 189)),
    ("bubble", RGBColor(127, 127, 127)),
    ("optimizer", RGBColor(255, 187, 120)),
];

fn values(b: &Breakdown) -> [f64; 8] {
    [b.gemm_s, b.attention_s, b.elementwise_s, b.tp_comm_s, b.pp_comm_s, b.dp_comm_s, b.bubble_s, b.optimizer_s]
}

/// Draw one horizontal stacked bar per `(label, breakdown, scale)` to a PNG; each segment is
/// multiplied by `scale` (1 for seconds, 1/t_ref for time relative to a reference).
pub fn draw_breakdown(path: &Path, title: &str, x_label: &str, bars: &[(String, Breakdown, f64)]) -> Result<()> {
    register_fonts();
    let err = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
    let n = bars.len().max(1);
    let height = (140 + 34 * n as u32).max(360);
    let root = BitMapBackend::new(path, (1200, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let xmax = bars.iter().map(|(_, b, k)| values(b).iter().sum::<f64>() * k).fold(0.0, f64::max) * 1.35;
    let label_width = 330;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 20))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(label_width)
        .build_cartesian_2d(0.0..xmax.max(1e-12), -0.6..(n as f64 - 0.4))
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_desc(x_label)
        .label_style((FONT, 14))
        .draw()
        .map_err(|e| err(&e))?;
    // Bar i is drawn at y = n − 1 − i so that the first bar is on top.
    let y_of = |i: usize| (n - 1 - i) as f64;
    for (si, (name, color)) in SEGMENTS.iter().enumerate() {
        let rects: Vec<Rectangle<(f64, f64)>> = bars
            .iter()
            .enumerate()
            .map(|(i, (_, b, k))| {
                let v = values(b);
                let x0: f64 = v[..si].iter().sum::<f64>() * k;
                let x1 = x0 + v[si] * k;
                let y = y_of(i);
                Rectangle::new([(x0, y - 0.36), (x1, y + 0.36)], color.filled())
            })
            .collect();
        let c = *color;
        chart
            .draw_series(rects)
            .map_err(|e| err(&e))?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
    }
    let style = TextStyle::from((FONT, 14).into_font()).pos(Pos::new(HPos::Right, VPos::Center));
    for (i, (label, b, k)) in bars.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(0.0, y_of(i)));
        root.draw(&Text::new(label.clone(), (px - 8, py), style.clone())).map_err(|e| err(&e))?;
        let total: f64 = values(b).iter().sum::<f64>() * k;
        let (ex, ey) = chart.backend_coord(&(total, y_of(i)));
        let tstyle = TextStyle::from((FONT, 13).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
        root.draw(&Text::new(format!("{total:.3}"), (ex + 6, ey), tstyle)).map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT, 13))
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
