//! The model, written once. A [`Model`] is one rank's share of a LLaMA-style decoder in any
//! of the four architectures (full-rank, SVD, CoLA, LaX) under any tensor-parallel layout;
//! forward and backward are explicit, and every collective is a visible call.
//!
//! User guide: `docs/guide/training.md`; the tensors and their names: `docs/MODEL.md`.

#![forbid(unsafe_code)]

pub mod init;
pub mod io;
pub mod labels;
pub mod layout;
pub mod params;
pub mod pass;
pub mod projection;
pub mod rope;

pub use boost_plan as plan;
pub use boost_plan::{NormPlacement, Plan};
pub use layout::{Dims, Layout};
pub mod block;
pub mod decode;
pub mod model;

pub use decode::KvCache;
pub use model::{
    ActivationMemory, Batch, FirstStage, GradsFinal, GradsReady, LastStage, LossSum, Model, Params, ParamsNeeded, Wire,
    Work, layout_pieces,
};
