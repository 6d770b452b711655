//! Finite-difference checks of every kernel's backward, in f64.
//!
//! Each check builds a scalar L = Σ w ⊙ f(inputs) with random weights w, runs the backward
//! kernels with dL/dy = w, and compares every input gradient with central differences
//! (step 1e-6). Central differences in f64 carry ~1e-9 relative error on these smooth
//! functions, so the bound 1e-6 (relative to the largest gradient) leaves margin yet fails
//! on any wrong term.

mod adamw;
mod attention;
mod dense;
mod loss;
mod norms;
mod pointwise;

use boost_tensor::cpu::Cpu;
use boost_tensor::{Mat, MatMut};
use rand::RngExt;
use rand_chacha::ChaCha8Rng;

type B = Cpu<f64>;
const CPU: B = Cpu::<f64>::new();

fn rnd(rng: &mut ChaCha8Rng, n: usize, scale: f64) -> Vec<f64> {
    (0..n).map(|_| (rng.random::<f64>() * 2.0 - 1.0) * scale).collect()
}

/// Compare an analytic gradient with central differences of `f` around `x`.
fn check(name: &str, x: &[f64], analytic: &[f64], f: impl Fn(&[f64]) -> f64) {
    assert_eq!(x.len(), analytic.len(), "{name}: gradient length");
    let h = 1e-6;
    let mut xp = x.to_vec();
    let mut worst: f64 = 0.0;
    let scale = analytic.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-12);
    for i in 0..x.len() {
        xp[i] = x[i] + h;
        let fp = f(&xp);
        xp[i] = x[i] - h;
        let fm = f(&xp);
        xp[i] = x[i];
        let num = (fp - fm) / (2.0 * h);
        worst = worst.max((num - analytic[i]).abs() / scale);
    }
    assert!(worst < 1e-6, "{name}: finite differences disagree, worst relative error {worst:e}");
    assert!(scale > 1e-9, "{name}: gradient is identically zero, the check is vacuous");
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn mat(v: &Vec<f64>, r: usize, c: usize) -> Mat<'_, Vec<f64>> {
    Mat::new(v, r, c)
}

fn mat_mut(v: &mut Vec<f64>, r: usize, c: usize) -> MatMut<'_, Vec<f64>> {
    MatMut::new(v, r, c)
}
