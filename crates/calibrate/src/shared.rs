//! How much of the machine in-process ranks get together: they issue their kernels at once,
//! each from its own thread outside the compute pool, where a single-rank step owns the pool
//! and holds its workers awake. Contention for the cores, caches and memory, and the workers'
//! sleeps between kernels, make the ranks' aggregate rate differ from one caller's.

use super::gemm::{Product, measure_gemm};
use boost_perf::median;
use std::sync::Barrier;
use std::time::Instant;

/// Step-like shapes (the cola-60m micro-batch of 2048 tokens: hidden 512, MLP 1376, rank 128,
/// vocabulary 4096), each timed alone and by two callers at once.
pub const SHAPES: &[(usize, usize, usize)] =
    &[(2048, 512, 512), (2048, 1376, 512), (2048, 512, 1376), (2048, 128, 512), (2048, 512, 128), (2048, 4096, 512)];

/// Callers at once: two ranks.
pub const CALLERS: usize = 2;

/// Seconds each caller keeps issuing its GEMM while the others issue theirs.
const WINDOW_S: f64 = 0.25;

/// The aggregate GEMM rate of `CALLERS` threads outside the pool, each issuing the shape back
/// to back at the same time, over one caller's rate in the held pool; the median over
/// `SHAPES`. Run in the process's global pool (the one in-process ranks share).
pub fn measure_shared_efficiency() -> f64 {
    let ratios: Vec<f64> = SHAPES
        .iter()
        .map(|&(m, n, k)| {
            let alone = measure_gemm(m, n, k);
            together(m, n, k) / alone
        })
        .collect();
    median(ratios)
}

/// The summed FLOP/s of [`CALLERS`] threads issuing one GEMM shape at once.
fn together(m: usize, n: usize, k: usize) -> f64 {
    let start = Barrier::new(CALLERS);
    std::thread::scope(|s| {
        let callers: Vec<_> = (0..CALLERS)
            .map(|_| {
                s.spawn(|| {
                    let mut product = Product::new(m, n, k);
                    product.call();
                    start.wait();
                    let t = Instant::now();
                    let mut calls = 0u64;
                    while t.elapsed().as_secs_f64() < WINDOW_S {
                        product.call();
                        calls += 1;
                    }
                    product.flops() * calls as f64 / t.elapsed().as_secs_f64()
                })
            })
            .collect();
        callers.into_iter().map(|c| c.join().expect("a calibration caller")).sum()
    })
}
