//! f32 GEMM throughput of the CPU engine's kernels on this machine over a set of shapes, and the fit of the
//! `P · Π x/(x+c)` curve to it.

use boost_perf::hardware::shape_factor;
use boost_tensor::{Backend, Mat, MatMut, cpu::Cpu};

/// GEMM shapes (M, N, K) measured: large squares for the peak, one small dimension at a time
/// for the curve, and the shapes of the cola-60m and 1b layers at a few thousand tokens.
pub const SHAPES: &[(usize, usize, usize)] = &[
    (1024, 1024, 1024),
    (2048, 1024, 1024),
    (2048, 2048, 512),
    (2048, 1024, 16),
    (2048, 1024, 32),
    (2048, 1024, 64),
    (2048, 1024, 128),
    (2048, 1024, 256),
    (2048, 16, 1024),
    (2048, 32, 1024),
    (2048, 64, 1024),
    (2048, 128, 1024),
    (2048, 256, 1024),
    (32, 1024, 1024),
    (64, 1024, 1024),
    (128, 1024, 1024),
    (256, 1024, 1024),
    (2048, 384, 512),
    (2048, 512, 128),
    (2048, 1376, 128),
    (2048, 128, 1376),
    (2048, 1536, 2048),
    (2048, 512, 2048),
    (2048, 2048, 512),
    (512, 128, 2048),
];

#[derive(Debug, Clone)]
pub struct GemmSample {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub flops_per_s: f64,
}

impl GemmSample {
    /// `[M, N, K]`, as [`shape_factor`] takes them.
    pub fn dims(&self) -> [u64; 3] {
        [self.m as u64, self.n as u64, self.k as u64]
    }
}

/// One f32 GEMM `(m×k)·(k×n)` (row-major) on operands of its own, with the CPU engine's kernels,
/// called as often as a measurement needs.
pub(super) struct Product {
    m: usize,
    n: usize,
    k: usize,
    lhs: Vec<f32>,
    rhs: Vec<f32>,
    dst: Vec<f32>,
    be: Cpu<f32>,
}

impl Product {
    pub(super) fn new(m: usize, n: usize, k: usize) -> Self {
        let lhs = (0..m * k).map(|i| ((i % 97) as f32 - 48.0) * 0.01).collect();
        let rhs = (0..k * n).map(|i| ((i % 89) as f32 - 44.0) * 0.01).collect();
        Product { m, n, k, lhs, rhs, dst: vec![0f32; m * n], be: Cpu::<f32>::new() }
    }

    pub(super) fn call(&mut self) {
        let (m, n, k) = (self.m, self.n, self.k);
        self.be.gemm(
            MatMut::new(&mut self.dst, m, n),
            Mat::new(&self.lhs, m, k),
            Mat::new(&self.rhs, k, n),
            1.0,
            false,
        );
        std::hint::black_box(&self.dst);
    }

    pub(super) fn flops(&self) -> f64 {
        2.0 * (self.m * self.n * self.k) as f64
    }
}

/// Measure one f32 GEMM `(m×k)·(k×n)` with the CPU engine's own kernels, in its pool with the
/// workers held awake as a training step runs them; the median of a few timed runs
/// (`typical_seconds`).
pub fn measure_gemm(m: usize, n: usize, k: usize) -> f64 {
    let mut product = Product::new(m, n, k);
    let secs = super::typical_seconds(|| product.call());
    product.flops() / secs
}

/// The values of c the fits try: every half up to 64, every 4 up to 1024.
fn grid() -> impl Iterator<Item = f64> {
    (0..128).map(|i| i as f64 * 0.5).chain((16..=256).map(|i| i as f64 * 4.0))
}

/// The best P for half dimensions `c` (the geometric mean of measured / Π f) and the rms log
/// error it leaves.
fn eval(samples: &[GemmSample], c: [f64; 3]) -> (f64, f64) {
    let logs: Vec<f64> = samples.iter().map(|s| s.flops_per_s.ln() - shape_factor(c, s.dims()).ln()).collect();
    let lp = logs.iter().sum::<f64>() / logs.len() as f64;
    let err = logs.iter().map(|l| (l - lp).powi(2)).sum::<f64>() / logs.len() as f64;
    (lp.exp(), err.sqrt())
}

/// Fit (P, c) of `P · Π x/(x+c)` to the samples; returns (P, c, rms log error).
pub fn fit_curve(samples: &[GemmSample]) -> (f64, f64, f64) {
    let mut best = (0.0, f64::MAX, 0.0);
    for c in grid() {
        let (p, e) = eval(samples, [c; 3]);
        if e < best.1 {
            best = (c, e, p);
        }
    }
    (best.2, best.0, best.1)
}

/// Fit (P, [c_m, c_n, c_k]) of `P · M/(M+c_m) · N/(N+c_n) · K/(K+c_k)`: a GEMM library loses
/// more to a short M (rows of the output, each row block's packing) than to a short K, so one
/// c for all three fits this machine's kernels worse. From the single-c fit, each c in turn
/// takes its best value on the grid with the other two held, until none moves. Returns
/// (P, [c_m, c_n, c_k], rms log error).
pub fn fit_curve_per_dim(samples: &[GemmSample]) -> (f64, [f64; 3], f64) {
    let (_, c, _) = fit_curve(samples);
    let mut cs = [c; 3];
    let mut err = eval(samples, cs).1;
    for _ in 0..32 {
        let before = cs;
        for d in 0..3 {
            for c in grid() {
                let mut t = cs;
                t[d] = c;
                let e = eval(samples, t).1;
                if e < err {
                    (cs, err) = (t, e);
                }
            }
        }
        if cs == before {
            break;
        }
    }
    (eval(samples, cs).0, cs, err)
}
