//! `boost bench`: training-step throughput against a GEMM peak measured in the same run and
//! against the PyTorch eager peer run beside it ([`step`], [`report`]); the step's GEMMs shape
//! by shape ([`gemm`]); tensor-parallel schemes over an emulated link ([`tp`]); a (dp, pp, tp)
//! grid's time split per rank ([`grid`]); a run as a JSON record for `bench/results/`
//! ([`record`]); the step on the CUDA backend with its launches counted by kind (`device`,
//! features `cuda` or `emulate`; its report in [`launches`]). The peer's script is
//! `peers/torch_peer.py`.
//!
//! User guide: `docs/PERFORMANCE.md` (the results and how to reproduce each) and `bench/results/`.

#[cfg(any(feature = "cuda", feature = "emulate"))]
pub mod device;
pub mod gemm;
pub mod grid;
pub mod launches;
pub mod memory;
pub mod peer;
pub mod record;
pub mod report;
pub mod stats;
pub mod step;
pub mod tp;

pub use boost_tensor::cpu::peak::gemm_peak;
pub use report::table;
pub use step::{ArchResult, BenchOptions, BenchReport, SplitPair, matmul_params, run};
