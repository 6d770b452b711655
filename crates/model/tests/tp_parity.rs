//! Tensor-parallel parity on `Cpu<f64>`: sharding only reorders sums (GEMM splits, rank-order
//! all-reduces) whose f64 rounding is ~1e-16 per term, so 1e-10 leaves a wide margin yet
//! fails on any missing or doubled collective; weights must match bit-for-bit.

use boost_tensor::cpu::Cpu;
use boost_testkit::Engine;
use boost_testkit::tp::{Sweep, parity};

const TOL: f64 = 1e-10;

/// The sweep on the f64 engine; `runs` is how many sharded runs it must check.
fn sweep(sweep: Sweep, runs: usize) {
    assert_eq!(parity(&Engine::<Cpu<f64>>::cpu(), sweep, TOL), runs, "{sweep:?}");
}

#[test]
fn full_rank_megatron() {
    sweep(Sweep::FullRank, 12);
}

#[test]
fn svd_vanilla_and_btp() {
    sweep(Sweep::Svd, 18);
}

#[test]
fn cola_vanilla_and_btp() {
    sweep(Sweep::Cola, 30);
}

#[test]
fn cola_tied_and_gqa() {
    sweep(Sweep::ColaTiedGqa, 22);
}

#[test]
fn lax_btp() {
    sweep(Sweep::Lax, 24);
}

#[test]
fn recompute_policies_match_no_recompute() {
    sweep(Sweep::Recompute, 75);
}

#[test]
fn recompute_of_the_first_layers_matches_no_recompute() {
    sweep(Sweep::RecomputeFirstLayers, 32);
}
