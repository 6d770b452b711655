//! One rank's optimizer step over the (dp, pp, tp) grid: its micro-batches through the
//! pipeline stage's op table ([`pipeline`]), the data-parallel gradient combination or
//! ZeRO-1 ([`dp`]), reductions and gathers overlapped with compute ([`overlap`]), tensor-parallel chunks
//! ([`chunks`]), the global
//! gradient norm and AdamW ([`optim`]); a rank built from the config and its place in the
//! grid ([`rank`], over its [`groups`]). The model supplies the math; this crate decides the
//! order, the threads and the collectives around it.
//!
//! User guide: `docs/guide/parallel.md`; the formulas: `docs/PARALLELISM.md`.

#![forbid(unsafe_code)]

pub mod chunks;
pub mod dp;
pub mod groups;
pub mod learner;
pub mod optim;
pub mod overlap;
pub mod pipeline;
pub mod rank;
pub mod step;

pub use groups::Groups;
pub use learner::Learner;
pub use rank::RankSetup;
pub use step::{Accumulated, Queued, StepOut, StepRunner};
