//! The CPU backend's f32 GEMM peak, measured now: the rate MFU is taken against, by
//! `boost bench` beside its steps and by a training run's batch-job log lines.

use crate::cpu::Cpu;
use crate::{Backend, Mat, MatMut};
use std::time::Instant;

/// Best f32 GEMM rate over a few square products (GFLOP/s).
pub fn gemm_peak() -> f64 {
    let be = Cpu::<f32>::new();
    let mut best: f64 = 0.0;
    for n in [1024usize, 2048] {
        let a = vec![1.0f32; n * n];
        let b = vec![0.5f32; n * n];
        let mut c = vec![0.0f32; n * n];
        // In the pool with its workers held awake, as the steps it is compared with run.
        crate::cpu::pool::hold_pool(|| {
            for _ in 0..3 {
                let t = Instant::now();
                be.gemm(MatMut::new(&mut c, n, n), Mat::new(&a, n, n), Mat::new(&b, n, n), 1.0, false);
                best = best.max(2.0 * (n * n * n) as f64 / t.elapsed().as_secs_f64() / 1e9);
            }
        });
    }
    best
}
