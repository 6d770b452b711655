//! Charts of predicted breakdowns: one stacked bar per run (drawn by boost-plot).

use anyhow::Result;
use boost_perf::predict::Breakdown;
use boost_plot::bars::{Bar, Segment, StackedBars};
use boost_plot::{Output, RGBColor};
use std::path::Path;

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

/// Draw one horizontal stacked bar per `(label, breakdown, scale)` to a PNG or SVG (by the
/// extension; an existing file is refused unless `force`, then replaced atomically); each
/// segment is multiplied by `scale` (1 for seconds, 1/t_ref for time relative to a reference).
pub fn draw_breakdown(
    path: &Path,
    force: bool,
    title: &str,
    x_label: &str,
    bars: &[(String, Breakdown, f64)],
) -> Result<()> {
    let segments: Vec<Segment> = SEGMENTS.iter().map(|&(n, color)| Segment { name: n.to_string(), color }).collect();
    let bars: Vec<Bar> = bars
        .iter()
        .map(|(label, b, k)| Bar { label: label.clone(), values: values(b).iter().map(|v| v * k).collect() })
        .collect();
    let fig = StackedBars { title, x_label, segments: &segments, bars: &bars, headroom: 1.35 };
    Output::new(path, force).write(&fig)
}
