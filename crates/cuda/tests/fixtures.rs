//! The model on the CUDA backend against the PyTorch fixtures: the CPU engine's suite with
//! the device switched, fp32 under every single-rank layout, mixed precision under the default.
//!
//! Tolerances (‖a−b‖/‖b‖ and max|a−b|/max|b|): fp32 (`Precision::F32`) 1e-4 everywhere —
//! the CPU f32 engine meets 1e-5; cuBLAS and the kernels sum in other orders. Mixed
//! precision (`Precision::Bf16`: activations stored and GEMM operands rounded to bf16's 8
//! significant bits): `Tol::bf16`'s bounds, derived from bf16's unit roundoff for the
//! fixtures' longest forward (66 roundings) and 16 tokens, on both measures (2.7e-2
//! norm-wise for logits and loss, 4.7e-2 for all gradients as one vector, 0.19 for each
//! tensor; element-wise 2.3 times those).
#![cfg(any(feature = "cuda", feature = "emulate"))]

mod common;

use boost_cuda::Precision;
use boost_testkit::fixtures::{CASES, Layouts, load, suite};
use boost_testkit::{Tol, bf16_forward_roundings};

#[test]
fn fp32_cuda_engine_matches_the_reference() {
    let Some(be) = common::backend(Precision::F32) else { return };
    assert_eq!(suite(&be, Layouts::Every, &Tol::uniform(1e-4)), 50);
}

#[test]
fn bf16_cuda_engine_matches_the_reference() {
    let Some(be) = common::backend(Precision::Bf16) else { return };
    // The fixtures: batch 2 × seq 8, the largest holding 12 896 gradient values; the bound of
    // the longest forward (LaX with the Kronecker gate) serves them all.
    let n_f = CASES.iter().map(|c| bf16_forward_roundings(&load(c).cfg)).max().unwrap();
    let tol = Tol::bf16(n_f, 16, 20_000);
    assert_eq!(suite(&be, Layouts::Single, &tol), 8);
}
