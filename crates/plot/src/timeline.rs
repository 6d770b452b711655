//! `boost plot --trace`: a trace's lanes drawn as rows of coloured spans against time. A
//! collective is drawn light over its whole flight and strong over the part its caller
//! waited (exposed), so what hides behind compute and what does not is seen at a glance.

use crate::canvas::{FONT, Figure, drawable, plot_err};
use crate::trace::{Lane, Trace, TraceSpan};
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

const STEP: RGBColor = RGBColor(232, 232, 232);
const OP: RGBColor = RGBColor(205, 213, 226);
const FORWARD: RGBColor = RGBColor(76, 114, 176);
const BACKWARD: RGBColor = RGBColor(221, 132, 82);
const RECOMPUTE: RGBColor = RGBColor(129, 114, 179);
const GEMM: RGBColor = RGBColor(85, 168, 104);
const ATTENTION: RGBColor = RGBColor(100, 181, 205);
const OPTIMIZER: RGBColor = RGBColor(147, 120, 96);
const EXPOSED: RGBColor = RGBColor(196, 40, 50);
const HIDDEN: RGBColor = RGBColor(246, 190, 190);
const PP_EXPOSED: RGBColor = RGBColor(150, 50, 150);
const PP_HIDDEN: RGBColor = RGBColor(228, 196, 236);
const OTHER: RGBColor = RGBColor(160, 160, 160);

/// The legend: what each colour means.
const LEGEND: [(&str, RGBColor); 11] = [
    ("step", STEP),
    ("micro-batch op", OP),
    ("forward", FORWARD),
    ("backward", BACKWARD),
    ("recompute", RECOMPUTE),
    ("GEMM", GEMM),
    ("attention", ATTENTION),
    ("optimizer / dp", OPTIMIZER),
    ("collective: exposed (waited)", EXPOSED),
    ("in flight, hidden", HIDDEN),
    ("pp send/recv: exposed / hidden", PP_EXPOSED),
];

/// A trace drawn as lanes.
pub struct Timeline<'a> {
    pub title: &'a str,
    pub trace: &'a Trace,
}

const LANE_PX: u32 = 22;
const LABEL_PX: u32 = 330;

/// The colours of a span: (whole span, exposed tail) — the tail only for collectives.
fn colors(s: &TraceSpan) -> (RGBColor, Option<RGBColor>) {
    let pp = s.group.as_deref() == Some("pp");
    match s.cat.as_str() {
        "step" => (STEP, None),
        "op" => (OP, None),
        "forward" => (FORWARD, None),
        "backward" => (BACKWARD, None),
        "recompute" => (RECOMPUTE, None),
        "gemm" => (GEMM, None),
        "attention" => (ATTENTION, None),
        "optimizer" | "dp" => (OPTIMIZER, None),
        "tp.exposed" => (EXPOSED, None),
        c if c.starts_with("comm") && pp => (PP_HIDDEN, Some(PP_EXPOSED)),
        c if c.starts_with("comm") => (HIDDEN, Some(EXPOSED)),
        _ => (OTHER, None),
    }
}

impl Timeline<'_> {
    fn lanes(&self) -> &[Lane] {
        &self.trace.lanes
    }
}

impl Figure for Timeline<'_> {
    fn size(&self) -> (u32, u32) {
        (1600, 150 + LANE_PX * self.lanes().len().max(1) as u32)
    }

    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<()> {
        let n = self.lanes().len().max(1);
        let end = self.trace.end_ms.max(1e-6);
        if !drawable(0.0, end) {
            area.titled(&format!("{}: a trace {end:e} ms long is not drawn", self.title), (FONT, 20))
                .map_err(plot_err)?;
            return Ok(());
        }
        let (top, rest) = area.split_vertically(62);
        top.draw(&Text::new(self.title.to_string(), (12, 8), (FONT, 20).into_font())).map_err(plot_err)?;
        // The legend in one row under the title.
        let mut x = 12;
        for (name, c) in LEGEND {
            top.draw(&Rectangle::new([(x, 40), (x + 14, 52)], c.filled())).map_err(plot_err)?;
            top.draw(&Text::new(name, (x + 18, 39), (FONT, 13).into_font())).map_err(plot_err)?;
            x += 24 + 7 * name.chars().count() as i32;
        }
        let mut chart = ChartBuilder::on(&rest)
            .margin_right(24)
            .margin_left(8)
            .x_label_area_size(40)
            .y_label_area_size(LABEL_PX)
            .build_cartesian_2d(0.0..end, 0.0..n as f64)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .light_line_style(WHITE)
            .y_labels(0)
            .x_desc("milliseconds from the first span")
            .label_style((FONT, 13))
            .draw()
            .map_err(plot_err)?;
        // Lane i is the i-th row from the top.
        let row = |i: usize| (n - 1 - i) as f64;
        let mut rects = Vec::new();
        for (i, lane) in self.lanes().iter().enumerate() {
            for s in &lane.spans {
                let inset = (0.08 + 0.07 * s.depth as f64).min(0.38);
                let (y0, y1) = (row(i) + inset, row(i) + 1.0 - inset);
                let (whole, tail) = colors(s);
                rects.push(Rectangle::new([(s.start_ms, y0), (s.end_ms, y1)], whole.filled()));
                if let (Some(c), Some(w)) = (tail, s.exposed_ms) {
                    let from = (s.end_ms - w).max(s.start_ms);
                    rects.push(Rectangle::new([(from, y0), (s.end_ms, y1)], c.filled()));
                }
            }
        }
        chart.draw_series(rects).map_err(plot_err)?;
        let (ox, oy) = rest.get_base_pixel();
        let track = TextStyle::from((FONT, 13).into_font()).pos(Pos::new(HPos::Right, VPos::Center));
        let proc = TextStyle::from((FONT, 13).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
        for (i, lane) in self.lanes().iter().enumerate() {
            let (px, py) = chart.backend_coord(&(0.0, row(i) + 0.5));
            let (px, py) = (px - ox, py - oy);
            rest.draw(&Text::new(lane.track.clone(), (px - 8, py), track.clone())).map_err(plot_err)?;
            if i == 0 || self.lanes()[i - 1].process != lane.process {
                rest.draw(&Text::new(lane.process.clone(), (12, py), proc.clone())).map_err(plot_err)?;
                if i > 0 {
                    let (_, ly) = chart.backend_coord(&(0.0, row(i) + 1.0));
                    let y = ly - oy;
                    rest.draw(&PathElement::new([(8, y), (px, y)], BLACK.mix(0.3))).map_err(plot_err)?;
                }
            }
        }
        Ok(())
    }
}
