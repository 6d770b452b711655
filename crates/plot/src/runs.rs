//! The figure of `boost plot`: runs overlaid, so architectures or settings can be compared.
//! Four panels: training and validation loss, learning rate and throughput against tokens,
//! and each run's mean time split per step.

use crate::bars::{Bar, Segment, StackedBars};
use crate::canvas::{AXIS_LIMIT, FONT, Figure, drawable, plot_err};
use crate::metrics::{Point, Run, SPLIT};
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;

/// Distinct colours for up to ten runs (then they repeat).
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

const SPLIT_COLORS: [RGBColor; 5] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(255, 152, 150),
    RGBColor(148, 103, 189),
    RGBColor(127, 127, 127),
];

/// Runs drawn together.
pub struct RunsFigure<'a> {
    pub runs: &'a [Run],
}

impl Figure for RunsFigure<'_> {
    fn size(&self) -> (u32, u32) {
        (1400, 1000)
    }

    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<()> {
        let panels = area.split_evenly((2, 2));
        let loss = |p: &Point| p.loss;
        self.curves(&panels[0], "loss (nats): training (line), validation (dots)", loss, true)?;
        self.curves(&panels[1], "learning rate", |p| p.lr, false)?;
        self.curves(&panels[2], "throughput (tokens/s)", |p| p.tokens_per_sec, false)?;
        self.split(&panels[3])
    }
}

impl RunsFigure<'_> {
    /// One panel of `value` against tokens (millions), a line per run; with `val`, each run's
    /// validation losses as dots of the same colour.
    fn curves<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        title: &str,
        value: impl Fn(&Point) -> Option<f64>,
        val: bool,
    ) -> Result<()> {
        let series: Vec<Vec<(f64, f64)>> = self
            .runs
            .iter()
            .map(|r| r.points.iter().filter_map(|p| Some((p.tokens / 1e6, value(p)?))).collect())
            .collect();
        let vals: Vec<Vec<(f64, f64)>> = self
            .runs
            .iter()
            .map(|r| r.points.iter().filter_map(|p| Some((p.tokens / 1e6, p.val_loss.filter(|_| val)?))).collect())
            .collect();
        let all = series.iter().chain(&vals).flatten();
        let (mut x1, mut y0, mut y1) = (0.0f64, f64::INFINITY, f64::NEG_INFINITY);
        for &(x, y) in all {
            x1 = x1.max(x);
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
        if !y0.is_finite() {
            area.titled(&format!("{title}: no values"), (FONT, 18)).map_err(plot_err)?;
            return Ok(());
        }
        if !drawable(y0, y1) || !drawable(0.0, x1) {
            let text = format!(
                "{title}: values beyond ±{AXIS_LIMIT:e} (from {y0:e} to {y1:e}, tokens to {x1:e} M), not drawn"
            );
            area.titled(&text, (FONT, 18)).map_err(plot_err)?;
            return Ok(());
        }
        let pad = ((y1 - y0) * 0.05).max(y1.abs() * 1e-3).max(1e-12);
        let mut chart = ChartBuilder::on(area)
            .caption(title, (FONT, 18))
            .margin(14)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..x1.max(1e-9), (y0 - pad)..(y1 + pad))
            .map_err(plot_err)?;
        chart.configure_mesh().x_desc("training tokens (millions)").label_style((FONT, 13)).draw().map_err(plot_err)?;
        for (i, (run, pts)) in self.runs.iter().zip(&series).enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
                .map_err(plot_err)?
                .label(run.name.as_str())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2)));
            if val {
                chart.draw_series(vals[i].iter().map(|&p| Circle::new(p, 4, color.filled()))).map_err(plot_err)?;
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font((FONT, 13))
            .draw()
            .map_err(plot_err)?;
        Ok(())
    }

    /// Each run's mean seconds per step split into compute and communication (parallel runs
    /// log it; single-rank runs are all compute).
    fn split<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<()> {
        let segments: Vec<Segment> =
            SPLIT.iter().zip(SPLIT_COLORS).map(|(n, color)| Segment { name: n.to_string(), color }).collect();
        let bars: Vec<Bar> = self
            .runs
            .iter()
            .map(|r| Bar { label: r.name.clone(), values: r.mean_split().map(Vec::from).unwrap_or_default() })
            .collect();
        let title = "mean step time split";
        StackedBars { title, x_label: "seconds per step", segments: &segments, bars: &bars, headroom: 1.9 }.draw_into(
            area,
            160,
            SeriesLabelPosition::UpperRight,
        )
    }
}
