//! Pipeline parallelism: schedules as op tables, and the executor that runs a stage's table
//! exchanging activations and gradients with its neighbours.

pub mod exec;
mod posted;
pub mod schedule;
pub mod stage_io;

pub use exec::{Hooks, Links, StageRunner};
