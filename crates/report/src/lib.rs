//! What the cost model's numbers are shown as and checked against, over boost-perf:
//!
//! - [`paper`]: the table `boost plan --paper` prints, the BOOST paper's set-up through the
//!   model beside the paper's measured times;
//! - [`validate`]: `boost plan --validate RUN_DIR`, a run's plan beside what it measured;
//! - [`chart`]: the stacked time breakdowns `--chart` draws.
//!
//! User guide: `docs/guide/planning.md`.

#![forbid(unsafe_code)]

pub mod chart;
pub mod paper;
pub mod validate;
