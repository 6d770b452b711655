//! Horizontal stacked bars: one bar per item, one coloured segment per component (a step's
//! time split into GEMM, attention, communication, …), the total printed at the bar's end.

use crate::canvas::{AXIS_LIMIT, FONT, Figure, drawable, plot_err};
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// One component of every bar: its legend name and colour.
#[derive(Debug, Clone)]
pub struct Segment {
    pub name: String,
    pub color: RGBColor,
}

/// One bar: its label and one value per [`Segment`].
#[derive(Debug, Clone)]
pub struct Bar {
    pub label: String,
    pub values: Vec<f64>,
}

/// A chart of stacked bars, the first bar on top.
pub struct StackedBars<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub segments: &'a [Segment],
    pub bars: &'a [Bar],
    /// The x axis runs to this multiple of the longest bar (room for totals and the legend).
    pub headroom: f64,
}

impl StackedBars<'_> {
    /// Draw into `area` (a whole figure or one panel of it), the legend at `legend`.
    pub fn draw_into<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        label_width: u32,
        legend: SeriesLabelPosition,
    ) -> Result<()> {
        let n = self.bars.len().max(1);
        let total = |b: &Bar| b.values.iter().sum::<f64>();
        let xmax = self.bars.iter().map(total).fold(0.0, f64::max) * self.headroom;
        let lowest = self.bars.iter().flat_map(|b| &b.values).fold(0.0, |m: f64, v| m.min(*v));
        if !drawable(lowest, xmax) {
            let text = format!("{}: values beyond ±{AXIS_LIMIT:e} (up to {xmax:e}), not drawn", self.title);
            area.titled(&text, (FONT, 20)).map_err(plot_err)?;
            return Ok(());
        }
        let mut chart = ChartBuilder::on(area)
            .caption(self.title, (FONT, 20))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(label_width)
            .build_cartesian_2d(0.0..xmax.max(1e-12), -0.6..(n as f64 - 0.4))
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .x_desc(self.x_label)
            .label_style((FONT, 14))
            .draw()
            .map_err(plot_err)?;
        // Bar i is drawn at y = n − 1 − i so that the first bar is on top.
        let y_of = |i: usize| (n - 1 - i) as f64;
        for (si, seg) in self.segments.iter().enumerate() {
            let rects: Vec<Rectangle<(f64, f64)>> = self
                .bars
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    let x0: f64 = b.values[..si.min(b.values.len())].iter().sum();
                    let x1 = x0 + b.values.get(si).copied().unwrap_or(0.0);
                    let y = y_of(i);
                    Rectangle::new([(x0, y - 0.36), (x1, y + 0.36)], seg.color.filled())
                })
                .collect();
            let c = seg.color;
            chart
                .draw_series(rects)
                .map_err(plot_err)?
                .label(seg.name.as_str())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        }
        let style = TextStyle::from((FONT, 14).into_font()).pos(Pos::new(HPos::Right, VPos::Center));
        let tstyle = TextStyle::from((FONT, 13).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
        // Chart coordinates map to backend pixels; text is placed relative to this area.
        let (ox, oy) = area.get_base_pixel();
        for (i, b) in self.bars.iter().enumerate() {
            let (px, py) = chart.backend_coord(&(0.0, y_of(i)));
            let (px, py) = (px - ox, py - oy);
            area.draw(&Text::new(b.label.clone(), (px - 8, py), style.clone())).map_err(plot_err)?;
            let (ex, ey) = chart.backend_coord(&(total(b), y_of(i)));
            let (ex, ey) = (ex - ox, ey - oy);
            area.draw(&Text::new(format!("{:.3}", total(b)), (ex + 6, ey), tstyle.clone())).map_err(plot_err)?;
        }
        chart
            .configure_series_labels()
            .position(legend)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font((FONT, 13))
            .draw()
            .map_err(plot_err)?;
        Ok(())
    }
}

impl Figure for StackedBars<'_> {
    fn size(&self) -> (u32, u32) {
        (1200, (140 + 34 * self.bars.len().max(1) as u32).max(360))
    }

    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<()> {
        self.draw_into(area, 330, SeriesLabelPosition::LowerRight)
    }
}
