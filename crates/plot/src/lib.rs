//! Figures drawn with plotters: the curves of training runs read from their `metrics.jsonl`
//! ([`runs`]) and stacked horizontal time breakdowns ([`bars`]). Text uses an embedded font
//! and the output is PNG or SVG by the file's extension ([`canvas`]), so nothing here needs
//! a system library.
//!
//! User guide: `docs/guide/training.md` (`boost plot`).

#![forbid(unsafe_code)]

pub mod bars;
pub mod canvas;
pub mod mark;
pub mod metrics;
pub mod runs;

pub use bars::{Bar, Segment};
pub use canvas::Output;
pub use metrics::{Point, Run};
pub use plotters::style::RGBColor;
pub use runs::RunsFigure;
