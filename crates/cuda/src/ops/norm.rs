//! RMSNorm (plain, and its pieces over a hidden-sharded input) and LayerNorm over the latent.
// Each kernel takes the operands of its `Backend` method, however many.
use crate::backend::Cuda;
use crate::buf::CudaBuf;
use crate::device::P;
use crate::launch::{same_shape, tv, tvm};
use boost_tensor::{
    LayerNormBwd, LayerNormFwd, OnlineNormBwd, ResidualRmsNorm, RmsNormBwd, RmsNormBwdRows, SiluNormBwd,
};
use boost_tensor::{Mat, MatMut};

pub(crate) fn row_sumsq(be: &Cuda, out: MatMut<CudaBuf>, x: Mat<CudaBuf>) {
    assert_eq!((out.rows, out.cols), (x.rows, 1), "row_sumsq: one output per row");
    let mut p = P::of(&[tvm(&out), tv(&x)]);
    be.per_row("k_row_sumsq", x.rows, x.cols, &mut p);
    be.touched(&out);
}

pub(crate) fn rstd_from_sumsq(be: &Cuda, s: MatMut<CudaBuf>, n: usize, eps: f64) {
    let mut p = P::of(&[tvm(&s)]);
    p.n[2] = n as i64;
    p.f[0] = eps;
    be.ew("k_rstd_from_sumsq", s.rows, s.cols, &mut p);
    be.touched(&s);
}

pub(crate) fn rmsnorm_apply(be: &Cuda, y: MatMut<CudaBuf>, x: Mat<CudaBuf>, gamma: Mat<CudaBuf>, rstd: Mat<CudaBuf>) {
    same_shape((y.rows, y.cols), &x, "rmsnorm_apply");
    assert_eq!(gamma.cols, x.cols, "rmsnorm_apply: gamma width");
    let mut p = P::of(&[tvm(&y), tv(&x), tv(&gamma), tv(&rstd)]);
    be.ew("k_rmsnorm_apply", y.rows, y.cols, &mut p);
    be.touched(&y);
}

pub(crate) fn rmsnorm_bwd_dot(be: &Cuda, dot: MatMut<CudaBuf>, dy: Mat<CudaBuf>, x: Mat<CudaBuf>, gamma: Mat<CudaBuf>) {
    assert_eq!(dot.rows, x.rows, "rmsnorm_bwd_dot: one output per row");
    let mut p = P::of(&[tvm(&dot), tv(&dy), tv(&x), tv(&gamma)]);
    be.per_row("k_rmsnorm_bwd_dot", x.rows, x.cols, &mut p);
    be.touched(&dot);
}

pub(crate) fn rmsnorm_bwd(be: &Cuda, args: RmsNormBwd<CudaBuf>) {
    let RmsNormBwd { dx, dgamma, dy, x, gamma, rstd, dot, n, accumulate } = args;
    assert_eq!((dgamma.rows, dgamma.cols), (1, x.cols), "rmsnorm_bwd: dgamma is 1×{}", x.cols);
    same_shape((dx.rows, dx.cols), &x, "rmsnorm_bwd");
    let mut p = P::of(&[tvm(&dgamma), tv(&dy), tv(&x), tv(&rstd)]);
    be.per_col("k_rmsnorm_dgamma", x.rows, x.cols, &mut p);
    be.touched(&dgamma);
    let mut p = P::of(&[tvm(&dx), tv(&dy), tv(&x), tv(&gamma), tv(&rstd), tv(&dot)]);
    p.n[2] = n as i64;
    p.n[3] = accumulate as i64;
    be.ew("k_rmsnorm_bwd_dx", dx.rows, dx.cols, &mut p);
    be.touched(&dx);
}

/// One launch where the model ran four (axpy, row_sumsq, rstd_from_sumsq, rmsnorm_apply).
pub(crate) fn residual_rmsnorm(be: &Cuda, args: ResidualRmsNorm<CudaBuf>) {
    let ResidualRmsNorm { x, r, y, rstd, gamma, eps } = args;
    same_shape((x.rows, x.cols), &r, "residual_rmsnorm: r");
    same_shape((y.rows, y.cols), &x.as_ref(), "residual_rmsnorm: y");
    assert_eq!((rstd.rows, rstd.cols), (x.rows, 1), "residual_rmsnorm: one rstd per row");
    assert_eq!(gamma.cols, x.cols, "residual_rmsnorm: gamma width");
    let mut p = P::of(&[tvm(&x), tv(&r), tvm(&y), tvm(&rstd), tv(&gamma)]);
    p.f[0] = eps;
    be.per_row("k_residual_rmsnorm", x.rows, x.cols, &mut p);
    be.touched(&x);
    be.touched(&y);
    be.touched(&rstd);
}

/// One launch where the model ran two (axpy, row_sumsq).
pub(crate) fn residual_sumsq(be: &Cuda, x: MatMut<CudaBuf>, r: Mat<CudaBuf>, out: MatMut<CudaBuf>) {
    same_shape((x.rows, x.cols), &r, "residual_sumsq: r");
    assert_eq!((out.rows, out.cols), (x.rows, 1), "residual_sumsq: one output per row");
    let mut p = P::of(&[tvm(&x), tv(&r), tvm(&out)]);
    be.per_row("k_residual_sumsq", x.rows, x.cols, &mut p);
    be.touched(&x);
    be.touched(&out);
}

/// dγ's column reduction, then the dot and dx in one pass over each row (two launches, not three).
pub(crate) fn rmsnorm_bwd_rows(be: &Cuda, args: RmsNormBwdRows<CudaBuf>) {
    let RmsNormBwdRows { dx, dgamma, dy, x, gamma, rstd, dot, accumulate } = args;
    assert_eq!((dgamma.rows, dgamma.cols), (1, x.cols), "rmsnorm_bwd_rows: dgamma is 1×{}", x.cols);
    assert_eq!((dot.rows, dot.cols), (x.rows, 1), "rmsnorm_bwd_rows: one dot per row");
    same_shape((dx.rows, dx.cols), &x, "rmsnorm_bwd_rows");
    same_shape((dy.rows, dy.cols), &x, "rmsnorm_bwd_rows: dy");
    let mut p = P::of(&[tvm(&dgamma), tv(&dy), tv(&x), tv(&rstd)]);
    be.per_col("k_rmsnorm_dgamma", x.rows, x.cols, &mut p);
    be.touched(&dgamma);
    let mut p = P::of(&[tvm(&dx), tv(&dy), tv(&x), tv(&gamma), tv(&rstd), tvm(&dot)]);
    p.n[3] = accumulate as i64;
    be.per_row("k_rmsnorm_bwd_rows", x.rows, x.cols, &mut p);
    be.touched(&dx);
    be.touched(&dot);
}

pub(crate) fn row_dot(
    be: &Cuda,
    out: MatMut<CudaBuf>,
    a: Mat<CudaBuf>,
    b: Mat<CudaBuf>,
    row: Option<Mat<CudaBuf>>,
    alpha: f64,
    accumulate: bool,
) {
    assert_eq!(out.rows, a.rows, "row_dot: one output per row");
    same_shape((a.rows, a.cols), &b, "row_dot");
    let mut p = P::of(&[tvm(&out), tv(&a), tv(&b)]);
    if let Some(r) = &row {
        p.v[3] = tv(r);
    }
    p.n[2] = row.is_some() as i64;
    p.n[3] = accumulate as i64;
    p.f[0] = alpha;
    be.per_row("k_row_dot", a.rows, a.cols, &mut p);
    be.touched(&out);
}

/// The three kernels in turn: on a GPU the pass saved is not worth a kernel of its own.
pub(crate) fn silu_norm_bwd(be: &Cuda, args: SiluNormBwd<CudaBuf>) {
    let SiluNormBwd { mut dp, x, p, stat, ds, alpha, accumulate } = args;
    super::act::silu_bwd(be, dp.rb(), x);
    row_dot(be, ds, dp.as_ref(), p, Some(stat), alpha, accumulate);
    super::dense::mul_rows(be, dp, stat);
}

pub(crate) fn online_norm_bwd(be: &Cuda, args: OnlineNormBwd<CudaBuf>) {
    let OnlineNormBwd { dx, dgamma, g, x, gamma, ds, accumulate } = args;
    same_shape((dx.rows, dx.cols), &x, "online_norm_bwd");
    if let Some(dgamma) = dgamma {
        assert_eq!((dgamma.rows, dgamma.cols), (1, x.cols), "online_norm_bwd: dgamma is 1×{}", x.cols);
        let mut p = P::of(&[tvm(&dgamma), tv(&x), tv(&g)]);
        be.per_col("k_online_norm_dgamma", x.rows, x.cols, &mut p);
        be.touched(&dgamma);
    }
    let mut p = P::of(&[tvm(&dx), tv(&g), tv(&x), tv(&gamma), tv(&ds)]);
    p.n[3] = accumulate as i64;
    be.ew("k_online_norm_bwd_dx", dx.rows, dx.cols, &mut p);
    be.touched(&dx);
}

pub(crate) fn layernorm_fwd(be: &Cuda, args: LayerNormFwd<CudaBuf>) {
    let LayerNormFwd { y, mean, rstd, x, w, b, eps } = args;
    same_shape((y.rows, y.cols), &x, "layernorm_fwd");
    assert!(mean.rows == x.rows && rstd.rows == x.rows, "layernorm_fwd: one mean and rstd per row");
    let mut p = P::of(&[tvm(&y), tvm(&mean), tvm(&rstd), tv(&x), tv(&w), tv(&b)]);
    p.f[0] = eps;
    be.per_row("k_layernorm_fwd", x.rows, x.cols, &mut p);
    be.touched(&y);
    be.touched(&mean);
    be.touched(&rstd);
}

pub(crate) fn layernorm_bwd(be: &Cuda, args: LayerNormBwd<CudaBuf>) {
    let LayerNormBwd { dx, dw, db, dy, x, w, mean, rstd } = args;
    same_shape((dx.rows, dx.cols), &x, "layernorm_bwd");
    assert!(dw.rows == 1 && db.rows == 1 && dw.cols == x.cols && db.cols == x.cols, "layernorm_bwd: dw, db");
    let mut p = P::of(&[tvm(&dw), tv(&dy), tv(&x), tv(&mean), tv(&rstd)]);
    be.per_col("k_layernorm_dw", x.rows, x.cols, &mut p);
    be.touched(&dw);
    let mut p = P::of(&[tvm(&db), tv(&dy)]);
    be.per_col("k_bias_grad", x.rows, x.cols, &mut p);
    be.touched(&db);
    let mut p = P::of(&[tvm(&dx), tv(&dy), tv(&x), tv(&w), tv(&mean), tv(&rstd)]);
    be.per_row("k_layernorm_bwd_dx", x.rows, x.cols, &mut p);
    be.touched(&dx);
}
