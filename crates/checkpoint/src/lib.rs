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
//! That is format 1, written by `boost import` and by earlier versions of training. Training
//! writes format 2, sharded: every rank writes only the rectangles it owns, in parallel —
//! - `model.safetensors` (pipeline stage 0, tensor rank 0) and `model.ppSS.tpTT.safetensors`:
//!   the weights of each (stage, tensor rank), written by data-parallel replica 0;
//! - `optim.safetensors` and `optim.ppSS.tpTT.dpDD.safetensors`: `m.<name>`/`v.<name>`
//!   rectangles, each replica's ZeRO-1 chunk under `parallel.zero = 1`;
//! - `shards.json`: every tensor's global shape and which file holds which rectangle;
//! - `meta.json`, `tokenizer.json` and `SHA256SUMS` as in format 1.
//!
//! A tensor-replicated buffer is written by tensor rank 0 only, the tied table's copy on the
//! last stage not at all, so every element is stored once. Any layout reads either format.
//!
//! `<run>/checkpoints/latest` names the newest complete checkpoint.
//!
//! User guide: `docs/guide/checkpoints.md`; what is checked and refused: `docs/SAFETY.md`.

pub mod grid;
pub mod manifest;
pub mod owned_part;
pub mod paths;

mod assemble;
mod finalize;
mod gather;
mod part;
mod prune;
mod read;
mod resolve;
pub mod shard;
mod write;

pub use finalize::{WriterGrid, begin, complete, tmp_dir};
pub use gather::{gather, gather_sets, gather_with};
pub use part::{PartFile, Slice, failed_name, sidecar_name, write_failed, write_part};
pub use prune::remove_stale;
pub use read::{Checkpoint, local_slice};
pub use resolve::{latest, latest_noted, list, resolve, resolve_noted};
pub use write::{save, write_safetensors};

use serde::{Deserialize, Serialize};

/// The single-file format: whole canonical tensors in `model.safetensors`/`optim.safetensors`.
pub const FORMAT: u32 = 1;
/// The sharded format: each rank's rectangles in its own files, listed in `shards.json`.
pub const SHARDED_FORMAT: u32 = 2;

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
    /// With `data.mix`: each dataset's position in its own stream at `data_position`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub data_mix: Vec<MixPosition>,
    /// Mean training loss of the last step.
    pub loss: Option<f64>,
    /// The run's resolved configuration, TOML.
    pub config: String,
}

impl CheckpointMeta {
    /// The meta of a checkpoint written outside training (an import, a benchmark, a test):
    /// no tokens seen, no loss, the data stream at its start under `config`'s seed.
    pub fn outside_training(format: u32, step: u64, config: &boost_config::Config) -> Self {
        CheckpointMeta {
            format,
            step,
            tokens: 0,
            data_position: 0,
            data_seed: config.data.seed,
            data_mix: Vec::new(),
            loss: None,
            config: config.to_toml(),
        }
    }
}

/// A dataset of `data.mix` and the sequences the run has taken from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MixPosition {
    /// Its name in `data.mix`.
    pub name: String,
    /// Sequences taken from it.
    pub position: u64,
}

/// Whole canonical tensors of a model and its AdamW moments, ready to write.
#[derive(Debug, PartialEq)]
pub struct Tensors {
    pub weights: Vec<Named>,
    /// `m.<name>` and `v.<name>`.
    pub moments: Vec<Named>,
}

/// A named whole tensor: canonical name (with a prefix), shape, fp32 data.
pub type Named = (String, Vec<usize>, Vec<f32>);
