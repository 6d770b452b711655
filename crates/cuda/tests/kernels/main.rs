//! Every kernel of the CUDA backend against the CPU reference (`Cpu<f32>`), on strided views.
//!
//! Each case runs three ways: fp32 storage under `Precision::F32` (tolerance 1e-5: only
//! summation order and the math library differ); bf16 activations (`alloc_act`) under
//! `Precision::Bf16` (1e-2: inputs and outputs are rounded to bf16's 8-bit significand,
//! relative error 2⁻⁹ each, and GEMMs round their inputs); fp32 storage under
//! `Precision::Bf16` (1e-2: GEMMs multiply in bf16). Both measures are checked:
//! ‖a−b‖/‖b‖ and max|a−b|/max|b|.
#![cfg(any(feature = "cuda", feature = "emulate"))]

#[path = "../common/mod.rs"]
mod common;

use boost_cuda::{Cuda, Precision};
use boost_tensor::cpu::Cpu;
use boost_tensor::{Backend, Mat, MatMut};
use common::*;

type Outs = Vec<(&'static str, Vec<f64>)>;

const TOL_F32: f64 = 1e-5;
const TOL_BF16: f64 = 1e-2;

/// A buffer holding `data` (bf16 when `act` and the backend stores activations so).
fn buf<B: Backend>(be: &B, act: bool, data: &[f64]) -> B::Buf {
    let mut b = if act { be.alloc_act(data.len()) } else { be.alloc(data.len()) };
    be.write_mat(MatMut::new(&mut b, 1, data.len()), data);
    b
}

/// An fp32 buffer (statistics, gradients of parameters).
fn f32buf<B: Backend>(be: &B, data: &[f64]) -> B::Buf {
    buf(be, false, data)
}

fn read<B: Backend>(be: &B, m: Mat<B::Buf>) -> Vec<f64> {
    be.read_mat(m)
}

/// Run `cpu` for the reference and `gpu` under each configuration, and compare.
fn check(name: &str, cpu: impl Fn(&Cpu<f32>) -> Outs, gpu: impl Fn(&Cuda, bool) -> Outs) {
    let reference = cpu(&Cpu::<f32>::new());
    for (prec, act, tol) in
        [(Precision::F32, false, TOL_F32), (Precision::Bf16, true, TOL_BF16), (Precision::Bf16, false, TOL_BF16)]
    {
        let Some(be) = backend(prec) else { return };
        let got = gpu(&be, act);
        assert_eq!(got.len(), reference.len());
        for ((what, g), (_, r)) in got.iter().zip(&reference) {
            assert_close(&format!("{name} {what} [{}, act bf16: {act}]", be.name()), g, r, tol);
        }
    }
}

macro_rules! case {
    ($test:ident, $f:ident) => {
        #[test]
        fn $test() {
            $crate::check(stringify!($test), |be| $f(be, false), |be, act| $f(be, act));
        }
    };
}

// The cases, by topic (after `case!`, which they use).
mod adamw;
mod dense;
mod fused;
mod kron;
mod norms;
mod sequence;
