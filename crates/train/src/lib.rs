//! Training on top of the model: AdamW, learning-rate schedules, the step loop, metrics,
//! checkpoints, evaluation and export.

pub mod bench;
pub mod bench_gemm;
pub mod bench_grid;
pub mod bench_peer;
pub mod bench_tp;
pub mod checkpoint;
pub mod dp;
pub mod metrics;
pub mod optim;
pub mod overlap;
pub mod pipeline;
pub mod schedule;
pub mod trainer;

pub use trainer::{Summary, TrainOptions, train};
pub mod compat;
pub mod eval;
pub mod export;
pub mod generate;
pub mod grid_ckpt;
pub mod guard;
pub mod import;
pub mod manifest;
pub mod owned_part;
pub mod paths;
pub mod run_dir;
pub mod signals;
pub mod staging;
