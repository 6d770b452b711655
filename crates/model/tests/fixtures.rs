//! The CPU engine against the PyTorch fixtures (float64). f64 agrees to 1e-10: only the
//! summation order differs. f32 is held to docs/TESTING.md's fp32 bounds, 1e-5 on ‖a−b‖/‖b‖ (sums
//! of K ≤ 512 terms carry ~√K·u ≈ 1e-6) and on max|a−b|/max|b|.

use boost_tensor::cpu::Cpu;
use boost_testkit::Tol;
use boost_testkit::fixtures::{Layouts, suite};

#[test]
fn f64_engine_matches_the_reference() {
    // 2 full-rank fixtures with one layout, 6 low-rank ones with 8.
    assert_eq!(suite(&Cpu::<f64>::new(), Layouts::Every, &Tol::uniform(1e-10)), 50);
}

#[test]
fn f32_engine_matches_the_reference() {
    assert_eq!(suite(&Cpu::<f32>::new(), Layouts::Single, &Tol::uniform(1e-5)), 8);
}
