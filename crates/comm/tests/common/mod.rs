#![allow(dead_code)]

use boost_comm::{Grid, GridDims, RunOptions, run_ranks_with};
use std::time::Duration;

/// A small deterministic generator (xorshift64*).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// Values of rank `rank` for a test of `n` elements: widely spread magnitudes so that the
/// order of a float sum changes its rounding.
pub fn values(seed: u64, rank: usize, n: usize) -> Vec<f64> {
    let mut r = Rng::new(seed * 1000 + rank as u64 + 1);
    (0..n).map(|_| r.unit() * 10f64.powi(r.below(9) as i32 - 2)).collect()
}

/// Run with a generous deadline, so a deadlock fails the test instead of hanging it.
pub fn run<T: Send>(
    dims: impl Into<GridDims>,
    f: impl Fn(usize, Grid) -> anyhow::Result<T> + Sync,
) -> anyhow::Result<Vec<T>> {
    run_ranks_with(dims, &RunOptions::default().deadline(Duration::from_secs(60)), f)
}

/// Sleep a random few hundred microseconds (perturbs arrival order).
pub fn jitter(r: &mut Rng) {
    std::thread::sleep(Duration::from_micros(r.below(400)));
}
