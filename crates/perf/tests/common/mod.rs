//! The set-up and GEMM the spec tests start from.

// Each test binary that includes this module uses only some of it.
#![allow(dead_code)]

use boost_config::{Arch, Scheme};
use boost_perf::{Gemm, GemmRole, Phase, Setup};

pub fn setup(preset: &str, arch: Arch, scheme: Scheme, tp: usize) -> Setup {
    let mut s = Setup::preset(preset, arch).unwrap();
    s.scheme = scheme;
    s.tp = tp;
    s.validate().unwrap();
    s
}

/// A forward bf16 GEMM `(m×k)·(k×n)`, one launch.
pub fn gemm(m: u64, n: u64, k: u64) -> Gemm {
    Gemm {
        label: "g".into(),
        phase: Phase::Forward,
        role: GemmRole::Forward,
        m,
        n,
        k,
        batch: 1,
        dtype_bytes: 2,
        redundant: false,
    }
}
