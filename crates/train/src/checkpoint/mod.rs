//! Checkpoints: whole canonical tensors (so any layout can load them), AdamW moments, and
//! the position of the data stream. A checkpoint is written into a temporary directory and
//! renamed into place, so a crash never leaves a half-written checkpoint as the latest.
//!
//! Layout of `<run>/checkpoints/step-NNNNNNNN/`:
//! - `model.safetensors`: every canonical parameter, fp32, under its name in docs/MODEL.md;
//! - `optim.safetensors`: `m.<name>` and `v.<name>` for the same tensors;
//! - `meta.json`: [`CheckpointMeta`];
//! - `tokenizer.json`: the tokenizer of the run's data, when known.
//!
//! `<run>/checkpoints/latest` names the newest complete checkpoint.

mod gather;
mod prune;
mod read;
mod resolve;
mod write;

pub use gather::{gather, gather_sets, gather_with};
pub use prune::remove_stale;
pub use read::{Checkpoint, local_slice};
pub use resolve::{latest, list, resolve};
pub use write::{save, write_safetensors};

use serde::{Deserialize, Serialize};

pub const FORMAT: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMeta {
    pub format: u32,
    /// Optimizer steps completed.
    pub step: u64,
    /// Training tokens consumed.
    pub tokens: u64,
    /// Training sequences consumed: the data stream resumes here.
    pub data_position: u64,
    /// Seed of the data order (the only randomness in a step).
    pub data_seed: u64,
    /// Mean training loss of the last step.
    pub loss: Option<f64>,
    /// The run's resolved configuration, TOML.
    pub config: String,
}

/// Whole canonical tensors of a model and its AdamW moments, ready to write.
pub struct Tensors {
    pub weights: Vec<Named>,
    /// `m.<name>` and `v.<name>`.
    pub moments: Vec<Named>,
}

/// A named whole tensor: canonical name (with a prefix), shape, fp32 data.
pub type Named = (String, Vec<usize>, Vec<f32>);
