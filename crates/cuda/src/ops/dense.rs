//! Dense algebra: GEMM, fills and copies, scaled sums, row and column scaling, full sums.

use crate::backend::{Cuda, WS_PART};
use crate::blas::{Operand, Out};
use crate::buf::CudaBuf;
use crate::device::P;
use crate::launch::{same_shape, tv, tvm};
use boost_tensor::{Mat, MatMut};

use crate::ops::multi::SUM_BLOCKS;

pub(crate) fn gemm(be: &Cuda, c: MatMut<CudaBuf>, a: Mat<CudaBuf>, b: Mat<CudaBuf>, alpha: f64, accumulate: bool) {
    let (m, k) = a.op_shape();
    let (k2, n) = b.op_shape();
    assert_eq!(k, k2, "gemm: inner dimensions {m}×{k} · {k2}×{n}");
    assert_eq!((c.rows, c.cols), (m, n), "gemm: output {}×{} for {m}×{n}", c.rows, c.cols);
    let out = Out::of(c.buf, c.off, c.ld, 0);
    let beta = if accumulate { 1.0 } else { 0.0 };
    be.gemm_batched(out, Operand::view(&a), Operand::view(&b), (m, n, k), 1, (alpha, beta));
    be.touched(&c);
}

pub(crate) fn fill(be: &Cuda, x: MatMut<CudaBuf>, v: f64) {
    let mut p = P::of(&[tvm(&x)]);
    p.f[0] = v;
    be.ew("k_fill", x.rows, x.cols, &mut p);
    be.touched(&x);
}

pub(crate) fn copy(be: &Cuda, dst: MatMut<CudaBuf>, src: Mat<CudaBuf>) {
    same_shape((dst.rows, dst.cols), &src, "copy");
    let mut p = P::of(&[tvm(&dst), tv(&src)]);
    be.ew("k_copy", dst.rows, dst.cols, &mut p);
    be.touched(&dst);
}

pub(crate) fn axpy(be: &Cuda, dst: MatMut<CudaBuf>, src: Mat<CudaBuf>, alpha: f64) {
    same_shape((dst.rows, dst.cols), &src, "axpy");
    let mut p = P::of(&[tvm(&dst), tv(&src)]);
    p.f[0] = alpha;
    be.ew("k_axpy", dst.rows, dst.cols, &mut p);
    be.touched(&dst);
}

pub(crate) fn scale(be: &Cuda, x: MatMut<CudaBuf>, s: f64) {
    let mut p = P::of(&[tvm(&x)]);
    p.f[0] = s;
    be.ew("k_scale", x.rows, x.cols, &mut p);
    be.touched(&x);
}

pub(crate) fn mul_rows(be: &Cuda, x: MatMut<CudaBuf>, row: Mat<CudaBuf>) {
    assert_eq!((row.rows, row.cols), (x.rows, 1), "mul_rows: one factor per row");
    let mut p = P::of(&[tvm(&x), tv(&row)]);
    be.ew("k_mul_rows", x.rows, x.cols, &mut p);
    be.touched(&x);
}

pub(crate) fn mul_cols(be: &Cuda, y: MatMut<CudaBuf>, x: Mat<CudaBuf>, col: Mat<CudaBuf>) {
    assert_eq!(col.rows * col.cols, x.cols, "mul_cols: one factor per column");
    same_shape((y.rows, y.cols), &x, "mul_cols");
    let mut p = P::of(&[tvm(&y), tv(&x), tv(&col)]);
    be.ew("k_mul_cols", y.rows, y.cols, &mut p);
    be.touched(&y);
}

pub(crate) fn sumsq(be: &Cuda, x: Mat<CudaBuf>) -> f64 {
    full_sum(be, x, true)
}

pub(crate) fn sum(be: &Cuda, x: Mat<CudaBuf>) -> f64 {
    full_sum(be, x, false)
}

pub(crate) fn sumsq_each(be: &Cuda, xs: &[Mat<CudaBuf>], out: &mut [f64]) {
    full_sums(be, xs, true, out);
}

/// Σ of (squared) elements: fixed blocks write fp64 partials, summed here in order.
fn full_sum(be: &Cuda, x: Mat<CudaBuf>, square: bool) -> f64 {
    let mut out = [0.0];
    full_sums(be, &[x], square, &mut out);
    out[0]
}

/// `out[i]` = Σ of (squared) elements of `xs[i]`: each view's blocks write their fp64
/// partials to a region of their own (one launch for all the views), read back in one
/// download and summed in block order.
fn full_sums(be: &Cuda, xs: &[Mat<CudaBuf>], square: bool, out: &mut [f64]) {
    assert_eq!(xs.len(), out.len(), "one sum per view");
    let empty = |x: &Mat<CudaBuf>| x.rows == 0 || x.cols == 0;
    let full: Vec<Mat<CudaBuf>> = xs.iter().copied().filter(|x| !empty(x)).collect();
    let parts = match full.len() {
        0 => Vec::new(),
        1 => {
            let part = be.ws(WS_PART, 8 * SUM_BLOCKS);
            let x = full[0];
            let mut p = P::of(&[tv(&x)]);
            p.v[1].p = part;
            p.n = [x.rows as i64, x.cols as i64, square as i64, 0, 0, 0];
            be.blocks("k_full_sum", SUM_BLOCKS, &p);
            let mut bytes = vec![0u8; 8 * SUM_BLOCKS];
            be.dev().download(part, &mut bytes);
            bytes.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect()
        }
        _ => crate::ops::multi::partials_each(be, &full, square),
    };
    let mut sums = parts.chunks_exact(SUM_BLOCKS).map(|b| b.iter().sum::<f64>());
    for (o, x) in out.iter_mut().zip(xs) {
        *o = if empty(x) { 0.0 } else { sums.next().unwrap() };
    }
}
