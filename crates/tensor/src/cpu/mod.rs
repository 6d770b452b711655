//! The CPU backend: buffers are `Vec<T>`, GEMM goes through the `gemm` crate, everything
//! else is a rayon loop over rows (or column blocks for reductions over rows).

mod act;
mod attention;
mod elementwise;
mod embed;
pub mod gemm;
mod kron;
mod norm;
mod optim;
pub mod par;
mod rope;

pub use embed::IGNORE;

use crate::backend::{AdamStep, AttnShape, Backend};
use crate::scalar::Scalar;
use crate::view::{DeviceBuf, Mat, MatMut};
use par::{row, rows_mut};
use std::marker::PhantomData;

impl<T: Scalar> DeviceBuf for Vec<T> {
    fn len(&self) -> usize {
        Vec::len(self)
    }
}

/// The host backend, computing in `T` (f32 for training, f64 for gradient checks).
/// Kernels run on the current rayon pool.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cpu<T>(PhantomData<T>);

impl<T> Cpu<T> {
    pub const fn new() -> Self {
        Self(PhantomData)
    }
}

impl<T: Scalar> Backend for Cpu<T> {
    type Buf = Vec<T>;
    type Ids = Vec<u32>;

    fn name(&self) -> String {
        format!("cpu-{}", T::NAME)
    }
    fn elem_bytes(&self) -> usize {
        std::mem::size_of::<T>()
    }

    fn alloc(&self, n: usize) -> Vec<T> {
        vec![T::zero(); n]
    }
    fn alloc_ids(&self, n: usize) -> Vec<u32> {
        vec![0; n]
    }
    fn write_ids(&self, dst: &mut Vec<u32>, src: &[u32]) {
        dst[..src.len()].copy_from_slice(src);
    }
    fn write_mat<H: Scalar>(&self, dst: MatMut<Vec<T>>, src: &[H]) {
        let cols = dst.cols;
        assert_eq!(
            src.len(),
            dst.rows * cols,
            "write_mat: host data has {} elements for {}×{cols}",
            src.len(),
            dst.rows
        );
        for (r, s) in rows_mut(dst).zip(src.chunks_exact(cols.max(1))) {
            for (o, v) in r.iter_mut().zip(s) {
                *o = T::of(v.f64());
            }
        }
    }
    fn read_mat<H: Scalar>(&self, src: Mat<Vec<T>>) -> Vec<H> {
        let mut out = Vec::with_capacity(src.rows * src.cols);
        for i in 0..src.rows {
            out.extend(row(&src, i).iter().map(|v| H::of(v.f64())));
        }
        out
    }

    fn gemm(&self, c: MatMut<Vec<T>>, a: Mat<Vec<T>>, b: Mat<Vec<T>>, alpha: f64, accumulate: bool) {
        gemm::gemm(c, a, b, alpha, accumulate)
    }
    fn fill(&self, x: MatMut<Vec<T>>, v: f64) {
        elementwise::fill(x, v)
    }
    fn copy(&self, dst: MatMut<Vec<T>>, src: Mat<Vec<T>>) {
        elementwise::copy(dst, src)
    }
    fn axpy(&self, dst: MatMut<Vec<T>>, src: Mat<Vec<T>>, alpha: f64) {
        elementwise::axpy(dst, src, alpha)
    }
    fn scale(&self, x: MatMut<Vec<T>>, s: f64) {
        elementwise::scale(x, s)
    }
    fn mul_rows(&self, x: MatMut<Vec<T>>, r: Mat<Vec<T>>) {
        elementwise::mul_rows(x, r)
    }
    fn mul_cols(&self, y: MatMut<Vec<T>>, x: Mat<Vec<T>>, col: Mat<Vec<T>>) {
        elementwise::mul_cols(y, x, col)
    }
    fn sumsq(&self, x: Mat<Vec<T>>) -> f64 {
        elementwise::sumsq(x)
    }
    fn sum(&self, x: Mat<Vec<T>>) -> f64 {
        elementwise::sum(x)
    }

    fn row_sumsq(&self, out: MatMut<Vec<T>>, x: Mat<Vec<T>>) {
        norm::row_sumsq(out, x)
    }
    fn rstd_from_sumsq(&self, s: MatMut<Vec<T>>, n: usize, eps: f64) {
        norm::rstd_from_sumsq(s, n, eps)
    }
    fn rmsnorm_apply(&self, y: MatMut<Vec<T>>, x: Mat<Vec<T>>, gamma: Mat<Vec<T>>, rstd: Mat<Vec<T>>) {
        norm::rmsnorm_apply(y, x, gamma, rstd)
    }
    fn rmsnorm_bwd_dot(&self, dot: MatMut<Vec<T>>, dy: Mat<Vec<T>>, x: Mat<Vec<T>>, gamma: Mat<Vec<T>>) {
        norm::rmsnorm_bwd_dot(dot, dy, x, gamma)
    }
    fn rmsnorm_bwd(
        &self,
        dx: MatMut<Vec<T>>,
        dgamma: MatMut<Vec<T>>,
        dy: Mat<Vec<T>>,
        x: Mat<Vec<T>>,
        gamma: Mat<Vec<T>>,
        rstd: Mat<Vec<T>>,
        dot: Mat<Vec<T>>,
        n: usize,
        accumulate: bool,
    ) {
        norm::rmsnorm_bwd(dx, dgamma, dy, x, gamma, rstd, dot, n, accumulate)
    }
    fn row_dot(
        &self,
        out: MatMut<Vec<T>>,
        a: Mat<Vec<T>>,
        b: Mat<Vec<T>>,
        r: Option<Mat<Vec<T>>>,
        alpha: f64,
        acc: bool,
    ) {
        norm::row_dot(out, a, b, r, alpha, acc)
    }
    fn online_norm_bwd(
        &self,
        dx: MatMut<Vec<T>>,
        dgamma: MatMut<Vec<T>>,
        g: Mat<Vec<T>>,
        x: Mat<Vec<T>>,
        gamma: Mat<Vec<T>>,
        ds: Mat<Vec<T>>,
        accumulate: bool,
    ) {
        norm::online_norm_bwd(dx, dgamma, g, x, gamma, ds, accumulate)
    }
    fn layernorm_fwd(
        &self,
        y: MatMut<Vec<T>>,
        mean: MatMut<Vec<T>>,
        rstd: MatMut<Vec<T>>,
        x: Mat<Vec<T>>,
        w: Mat<Vec<T>>,
        b: Mat<Vec<T>>,
        eps: f64,
    ) {
        norm::layernorm_fwd(y, mean, rstd, x, w, b, eps)
    }
    fn layernorm_bwd(
        &self,
        dx: MatMut<Vec<T>>,
        dw: MatMut<Vec<T>>,
        db: MatMut<Vec<T>>,
        dy: Mat<Vec<T>>,
        x: Mat<Vec<T>>,
        w: Mat<Vec<T>>,
        mean: Mat<Vec<T>>,
        rstd: Mat<Vec<T>>,
    ) {
        norm::layernorm_bwd(dx, dw, db, dy, x, w, mean, rstd)
    }

    fn silu(&self, y: MatMut<Vec<T>>, x: Mat<Vec<T>>) {
        act::silu(y, x)
    }
    fn silu_bwd(&self, d: MatMut<Vec<T>>, x: Mat<Vec<T>>) {
        act::silu_bwd(d, x)
    }
    fn swiglu(&self, m: MatMut<Vec<T>>, gu: Mat<Vec<T>>, outer_silu: bool) {
        act::swiglu(m, gu, outer_silu)
    }
    fn swiglu_bwd(&self, dgu: MatMut<Vec<T>>, dm: Mat<Vec<T>>, gu: Mat<Vec<T>>, outer_silu: bool) {
        act::swiglu_bwd(dgu, dm, gu, outer_silu)
    }
    fn add_bias(&self, y: MatMut<Vec<T>>, b: Mat<Vec<T>>) {
        act::add_bias(y, b)
    }
    fn bias_grad(&self, db: MatMut<Vec<T>>, dy: Mat<Vec<T>>) {
        act::bias_grad(db, dy)
    }

    fn rope_table(&self, seq: usize, head_dim: usize, theta: f64) -> Vec<T> {
        rope::table(seq, head_dim, theta)
    }
    fn rope(&self, x: MatMut<Vec<T>>, table: &Vec<T>, seq: usize, head_dim: usize, inverse: bool) {
        rope::rope(x, table, seq, head_dim, inverse)
    }
    fn attention_fwd(&self, out: MatMut<Vec<T>>, probs: &mut Vec<T>, qkv: &Vec<T>, shape: AttnShape) {
        attention::forward(out, probs, qkv, shape)
    }
    fn attention_bwd(
        &self,
        dqkv: &mut Vec<T>,
        dout: Mat<Vec<T>>,
        probs: &Vec<T>,
        scratch: &mut Vec<T>,
        qkv: &Vec<T>,
        shape: AttnShape,
    ) {
        attention::backward(dqkv, dout, probs, scratch, qkv, shape)
    }

    fn embed(&self, out: MatMut<Vec<T>>, table: Mat<Vec<T>>, ids: &Vec<u32>, first: usize) {
        embed::embed(out, table, ids, first)
    }
    fn embed_bwd(&self, dtable: MatMut<Vec<T>>, dout: Mat<Vec<T>>, ids: &Vec<u32>, first: usize) {
        embed::embed_bwd(dtable, dout, ids, first)
    }
    fn cross_entropy(
        &self,
        losses: MatMut<Vec<T>>,
        logits: MatMut<Vec<T>>,
        targets: &Vec<u32>,
        grad_scale: Option<f64>,
    ) {
        embed::cross_entropy(losses, logits, &targets[..], grad_scale)
    }

    fn row_max(&self, max: MatMut<Vec<T>>, logits: Mat<Vec<T>>) {
        embed::row_max(max, logits)
    }
    fn xent_partials(
        &self,
        stats: MatMut<Vec<T>>,
        logits: Mat<Vec<T>>,
        max: Mat<Vec<T>>,
        targets: &Vec<u32>,
        first: usize,
    ) {
        embed::xent_partials(stats, logits, max, targets, first)
    }
    fn xent_finish(
        &self,
        losses: MatMut<Vec<T>>,
        logits: MatMut<Vec<T>>,
        max: Mat<Vec<T>>,
        stats: Mat<Vec<T>>,
        targets: &Vec<u32>,
        first: usize,
        grad_scale: Option<f64>,
    ) {
        embed::xent_finish(losses, logits, max, stats, targets, first, grad_scale)
    }
    fn kron_fwd(
        &self,
        y: MatMut<Vec<T>>,
        z: Mat<Vec<T>>,
        ka: Mat<Vec<T>>,
        kb: Mat<Vec<T>>,
        scratch: &mut Vec<T>,
        accumulate: bool,
    ) {
        kron::forward(y, z, ka, kb, scratch, accumulate)
    }
    fn kron_bwd(
        &self,
        dz: MatMut<Vec<T>>,
        dka: MatMut<Vec<T>>,
        dkb: MatMut<Vec<T>>,
        dy: Mat<Vec<T>>,
        z: Mat<Vec<T>>,
        ka: Mat<Vec<T>>,
        kb: Mat<Vec<T>>,
        scratch: &mut Vec<T>,
    ) {
        kron::backward(dz, dka, dkb, dy, z, ka, kb, scratch)
    }

    fn adamw(
        &self,
        p: &mut Vec<T>,
        g: &Vec<T>,
        m: &mut Vec<T>,
        v: &mut Vec<T>,
        off: usize,
        n: usize,
        step: &AdamStep,
        decay: bool,
    ) {
        let r = off..off + n;
        optim::adamw(&mut p[r.clone()], &g[r.clone()], &mut m[r.clone()], &mut v[r], step, decay)
    }
}
