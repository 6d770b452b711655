//! Pipeline, tensor- and data-parallel grids with the model on the CUDA backend, ranks on
//! threads and collectives (tp, pp and dp) through `HostStaged` over boost-comm's in-process
//! communicator: the CPU engine's grid suite on this backend, in fp32 within 1e-4 (the CPU
//! f32 engine meets 1e-5; cuBLAS and the kernels sum in other orders, as in
//! `tensor_parallel.rs`), and in mixed precision within bf16's derived bounds (`Tol::bf16`
//! for each case's model, √2 wider: the grid and the single rank both round). Runs on the
//! emulator (or one GPU shared by the ranks).
#![cfg(any(feature = "cuda", feature = "emulate"))]

mod common;

use boost_cuda::Precision;
use boost_testkit::pp_parity_tests;

pp_parity_tests!(common::engine(Precision::F32), 1e-4);

mod bf16 {
    use super::*;
    use boost_testkit::Bound;

    pp_parity_tests!(common::engine(Precision::Bf16), Bound::Bf16 { sides: 2 });
}
