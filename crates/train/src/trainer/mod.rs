//! The training loop: micro-batches → forward/backward → global gradient norm and
//! clipping → AdamW → metrics, validation and checkpoints.

mod batch_log;
mod device;
mod job;
mod mfu;
mod opening;
mod phase;
mod preflight;
mod ranks;

pub use boost_exec::{Accumulated, Learner, StepOut, StepRunner};
pub use job::RankCtx;
pub use preflight::resolve_vocab;
pub use ranks::{CpuOnly, Devices, local_rank, run_options, train, train_launched, train_on};

/// The GPUs of a build with the `cuda` feature (or the CPU emulator of the kernels, `emulate`).
#[cfg(any(feature = "cuda", feature = "emulate"))]
pub use device::{Gpus, open_gpu};

/// The devices of this build: its GPUs with the `cuda` or `emulate` feature, the CPU alone
/// otherwise.
#[cfg(any(feature = "cuda", feature = "emulate"))]
pub type BuildDevices = Gpus;
/// The devices of this build: its GPUs with the `cuda` or `emulate` feature, the CPU alone
/// otherwise.
#[cfg(not(any(feature = "cuda", feature = "emulate")))]
pub type BuildDevices = CpuOnly;

use anyhow::Result;
use boost_checkpoint as checkpoint;
use std::path::{Path, PathBuf};

/// How to start a run.
#[derive(Debug, Clone, Default)]
pub struct TrainOptions {
    /// Continue from this checkpoint directory.
    pub resume: Option<PathBuf>,
    /// No progress bar and no log lines (tests).
    pub quiet: bool,
    /// Fault injection for failure tests: (global rank, step) at which that rank fails.
    pub fault: Option<(usize, u64)>,
    /// Write the whole gradients of this optimizer step (1-based; summed over the global
    /// batch, before clipping) to [`grads_path`], to compare layouts.
    pub dump_grads: Option<u64>,
    /// Record these optimizer steps as a timeline (`<run.dir>/trace.json`, [`crate::trace`]).
    pub trace: Option<crate::trace::TraceSteps>,
}

/// Where `boost train --dump-grads STEP` writes: `<run>/grads/step-NNNNNNNN.safetensors`,
/// fp32 tensors under the canonical parameter names.
pub fn grads_path(run_dir: &Path, step: u64) -> PathBuf {
    run_dir.join("grads").join(format!("step-{step:08}.safetensors"))
}

/// What a finished run reports.
#[derive(Debug, Clone)]
pub struct Summary {
    pub run_dir: PathBuf,
    pub first_step: u64,
    /// Mean training loss of every step run here.
    pub losses: Vec<f64>,
    /// (step, validation loss) of every evaluation.
    pub val: Vec<(u64, f64)>,
    pub unigram_entropy: f64,
    pub tokens_per_sec: f64,
    pub last_checkpoint: Option<PathBuf>,
    /// The signal that stopped the run early (SIGINT, SIGTERM), if one did.
    pub interrupted: Option<i32>,
}

/// The run directory's latest checkpoint (for `--resume` without a path).
pub fn latest_checkpoint(run_dir: &Path) -> Result<PathBuf> {
    checkpoint::latest(run_dir)
}

/// Log lines of the lead rank, unless the run is quiet.
#[derive(Debug, Clone, Copy)]
struct Log {
    on: bool,
}

impl Log {
    fn line(self, s: String) {
        if self.on {
            eprintln!("{s}");
        }
    }
}
