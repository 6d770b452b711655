//! Buffers, views and kernels: the device seam of the engine.
//!
//! The model is written once against [`Backend`] and [`Collective`]. [`cpu::Cpu`] runs every
//! kernel on the host (GEMM through the `gemm` crate, the rest on rayon), generic over f32
//! (training) and f64 (gradient checks).
//!
//! User guide: `docs/guide/getting-started.md` (CPU builds and SIMD paths); the design: `docs/ARCHITECTURE.md`.

pub mod args;
pub mod backend;
pub mod cpu;
pub mod device_step;
mod kernels;
pub mod pending;
pub mod profile;
pub mod rope;
pub mod scalar;
pub mod trace;
pub mod view;

pub use args::{
    AdamAll, AdamUpdate, AttentionBwd, Guarded, HeadXent, HeadXentGrad, KronBwd, LayerNormBwd, LayerNormFwd,
    OnlineNormBwd, ResidualRmsNorm, RmsNormBwd, RmsNormBwdRows, SiluNormBwd, XentFinish,
};
pub use backend::{AdamStep, AttnShape, Backend, Collective, Label, ReduceOp, Solo};
pub use device_step::{GuardSpec, StepReport, Verdict};
pub use pending::{Handle, Pending, Ready};
pub use rope::{Llama3Scaling, rope_inv_freq};
pub use scalar::Scalar;
pub use view::{DeviceBuf, Mat, MatMut};
