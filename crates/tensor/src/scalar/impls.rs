//! The two element types: f32 through the dispatched row kernels of [`super::simd`], f64
//! through the trait's formulas.

use super::{AdamConsts, Scalar, expf, simd};

impl Scalar for f32 {
    const NAME: &'static str = "f32";
    #[inline(always)]
    fn of(x: f64) -> Self {
        x as f32
    }
    #[inline(always)]
    fn f64(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn exp_fast(self) -> Self {
        expf(self)
    }
    fn exp_shifted(x: &mut [f32], m: f32) -> f32 {
        // A whole row: its tail after the last whole vector one entry at a time, summed after
        // the lanes as `total` sums it (the same bits).
        simd::exp_shifted_live(x, x.len(), m)
    }
    fn exp_shifted_unsummed(x: &mut [f32], m: f32) {
        simd::exp_shifted(x, m)
    }
    fn exp_shifted_live(x: &mut [f32], live: usize, m: f32) -> f32 {
        simd::exp_shifted_live(x, live, m)
    }
    fn exp_sum(x: &[f32], m: f32) -> f32 {
        simd::exp_sum(x, m)
    }
    fn total(x: &[f32]) -> f32 {
        simd::sum(x)
    }
    fn dot(a: &[f32], b: &[f32]) -> f32 {
        simd::dot(a, b)
    }
    fn dot3(a: &[f32], b: &[f32], c: &[f32]) -> f32 {
        simd::dot3(a, b, c)
    }
    fn max_of(x: &[f32]) -> f32 {
        simd::max_of(x)
    }
    fn silu_row(y: &mut [f32], x: &[f32]) {
        simd::silu_row(y, x)
    }
    fn silu_grad_row(d: &mut [f32], x: &[f32]) {
        simd::silu_grad_row(d, x)
    }
    fn swiglu_row(m: &mut [f32], g: &[f32], u: &[f32], outer: bool) {
        simd::swiglu_row(m, g, u, outer)
    }
    fn swiglu_bwd_row(
        dg: &mut [f32],
        du: &mut [f32],
        dm: &mut [f32],
        g: &[f32],
        u: &[f32],
        outer: bool,
        rebuild: bool,
    ) {
        simd::swiglu_bwd_row(dg, du, dm, g, u, outer, rebuild)
    }
    fn sumsq_lanes(x: &[f32]) -> f64 {
        simd::sumsq_lanes(x)
    }
    fn silu_norm_row(d: &mut [f32], x: &[f32], p: &[f32], st: f32) -> f32 {
        simd::silu_norm_row(d, x, p, st)
    }
    fn softmax_grad_row(d: &mut [f32], p: &[f32], dsum: f32) {
        simd::softmax_grad_row(d, p, dsum)
    }
    fn add_products(acc: &mut [f32], a: &[f32], b: &[f32]) {
        simd::add_products(acc, a, b)
    }
    fn norm_grad_row(o: &mut [f32], g: &[f32], x: &[f32], gamma: &[f32], s: f32, accumulate: bool) {
        simd::norm_grad_row(o, g, x, gamma, s, accumulate)
    }
    fn axpy_row(d: &mut [f32], s: &[f32], a: f32) {
        simd::axpy_row(d, s, a)
    }
    fn scale_row(x: &mut [f32], f: f32) {
        simd::scale_row(x, f)
    }
    fn rotate_halves(a: &mut [f32], b: &mut [f32], c: &[f32], s: &[f32], inverse: bool) {
        simd::rotate_halves(a, b, c, s, inverse)
    }
    fn adamw_chunk(p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], k: &AdamConsts<f32>) {
        simd::adamw_chunk(p, g, m, v, k)
    }
}

impl Scalar for f64 {
    const NAME: &'static str = "f64";
    #[inline(always)]
    fn of(x: f64) -> Self {
        x
    }
    #[inline(always)]
    fn f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn exp_fast(self) -> Self {
        self.exp()
    }
}
