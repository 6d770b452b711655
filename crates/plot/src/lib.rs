//! Figures drawn with plotters: the curves of training runs read from their `metrics.jsonl`
//! ([`runs`]), stacked horizontal time breakdowns ([`bars`]) and the timeline of a Chrome
//! trace-event file ([`trace`], [`timeline`]). Text uses an embedded font
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
pub mod timeline;
pub mod trace;

pub use bars::{Bar, Segment};
pub use canvas::Output;
pub use metrics::{Point, Run};
pub use plotters::style::RGBColor;
pub use runs::RunsFigure;
pub use timeline::Timeline;
pub use trace::Trace;
