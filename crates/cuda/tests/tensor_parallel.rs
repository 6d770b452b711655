//! Tensor parallelism with the model on the CUDA backend, ranks on threads and collectives
//! through `HostStaged` over boost-comm's in-process communicator, in fp32 within 1e-4 (the
//! CPU f32 engine meets 1e-5; cuBLAS and the kernels sum in other orders), and in mixed
//! precision within bf16's derived bounds (`Tol::bf16` for each model: against the CPU
//! engine as is, against the unsharded model on the same device √2 wider, both sides
//! rounding). Runs on the emulator (or one GPU shared by the ranks).
#![cfg(any(feature = "cuda", feature = "emulate"))]

mod common;

use boost_cuda::Precision;
use boost_tensor::cpu::Cpu;
use boost_testkit::tp::ranks_match;
use boost_testkit::{Engine, parity_tests};

const TOL: f64 = 1e-4;

/// Each rank of a tp = 2 step against the same rank on the CPU f32 engine (same layouts,
/// same collectives).
#[test]
fn tensor_parallel_steps_match_the_cpu_engine() {
    let Some(cuda) = common::engine(Precision::F32) else { return };
    assert_eq!(ranks_match(&Engine::<Cpu<f32>>::cpu(), &cuda, TOL), 6);
}

// The CPU engine's parity suite on this backend: tp ∈ {1, 2, 4} reproduces the unsharded
// model on the same device (weights, the loss across ranks and replicas bit-for-bit).
parity_tests!(common::engine(Precision::F32), TOL);

mod bf16 {
    use super::*;
    use boost_testkit::Bound;

    /// Each rank of a tp = 2 mixed-precision step against the same rank on the CPU f32 engine.
    #[test]
    fn tensor_parallel_steps_match_the_cpu_engine() {
        let Some(cuda) = common::engine(Precision::Bf16) else { return };
        assert_eq!(ranks_match(&Engine::<Cpu<f32>>::cpu(), &cuda, Bound::Bf16 { sides: 1 }), 6);
    }

    parity_tests!(common::engine(Precision::Bf16), Bound::Bf16 { sides: 2 });
}
