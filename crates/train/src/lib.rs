//! Training on top of the model: AdamW, learning-rate schedules, the step loop, metrics,
//! checkpoints, evaluation and export.
//!
//! User guide: `docs/guide/training.md`.

pub mod metrics;
pub mod schedule;
pub mod trace;
pub mod trainer;

pub use trainer::{Summary, TrainOptions, train, train_on};
pub mod compat;
pub mod eval;
pub mod generate;
pub mod guard;
pub mod run_dir;
pub mod signals;
pub mod tensorboard;
