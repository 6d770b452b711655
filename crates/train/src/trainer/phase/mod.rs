//! The phases of a run's steps, each a part of [`super::job::Job`]: the optimizer step and its
//! metrics, the evaluation, the sample, and the checkpoint.

mod checkpoint;
mod eval;
mod sample;
mod step;
