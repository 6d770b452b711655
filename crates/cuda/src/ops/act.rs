//! Activations (SiLU, SwiGLU) and biases.

use crate::backend::Cuda;
use crate::buf::CudaBuf;
use crate::device::P;
use crate::launch::{same_shape, tv, tvm};
use boost_tensor::{Mat, MatMut};

pub(crate) fn silu(be: &Cuda, y: MatMut<CudaBuf>, x: Mat<CudaBuf>) {
    same_shape((y.rows, y.cols), &x, "silu");
    let mut p = P::of(&[tvm(&y), tv(&x)]);
    be.ew("k_silu", y.rows, y.cols, &mut p);
    be.touched(&y);
}

pub(crate) fn silu_bwd(be: &Cuda, d: MatMut<CudaBuf>, x: Mat<CudaBuf>) {
    same_shape((d.rows, d.cols), &x, "silu_bwd");
    let mut p = P::of(&[tvm(&d), tv(&x)]);
    be.ew("k_silu_bwd", d.rows, d.cols, &mut p);
    be.touched(&d);
}

pub(crate) fn swiglu(be: &Cuda, m: MatMut<CudaBuf>, gu: Mat<CudaBuf>, outer_silu: bool) {
    assert_eq!((gu.rows, gu.cols), (2 * m.rows, m.cols), "swiglu: g stacked over u");
    let mut p = P::of(&[tvm(&m), tv(&gu)]);
    p.n[2] = outer_silu as i64;
    be.ew("k_swiglu", m.rows, m.cols, &mut p);
    be.touched(&m);
}

pub(crate) fn swiglu_bwd(
    be: &Cuda,
    dgu: MatMut<CudaBuf>,
    dm: MatMut<CudaBuf>,
    gu: Mat<CudaBuf>,
    outer_silu: bool,
    rebuild: bool,
) {
    assert_eq!((dgu.rows, dgu.cols), (2 * dm.rows, dm.cols), "swiglu_bwd: dgu stacked like gu");
    assert_eq!((gu.rows, gu.cols), (2 * dm.rows, dm.cols), "swiglu_bwd: gu");
    let mut p = P::of(&[tvm(&dgu), tvm(&dm), tv(&gu)]);
    p.n[2] = outer_silu as i64;
    // The rebuilt product is written by the same pass, each pair once read.
    p.n[3] = rebuild as i64;
    be.ew("k_swiglu_bwd", dm.rows, dm.cols, &mut p);
    be.touched(&dgu);
    if rebuild {
        be.touched(&dm);
    }
}

pub(crate) fn add_bias(be: &Cuda, y: MatMut<CudaBuf>, b: Mat<CudaBuf>) {
    assert_eq!(b.cols, y.cols, "add_bias: width");
    let mut p = P::of(&[tvm(&y), tv(&b)]);
    be.ew("k_add_bias", y.rows, y.cols, &mut p);
    be.touched(&y);
}

pub(crate) fn bias_grad(be: &Cuda, db: MatMut<CudaBuf>, dy: Mat<CudaBuf>) {
    assert_eq!(db.cols, dy.cols, "bias_grad: width");
    assert_eq!(db.rows, 1, "bias_grad: column reduction into a 1×n row");
    let mut p = P::of(&[tvm(&db), tv(&dy)]);
    be.per_col("k_bias_grad", dy.rows, dy.cols, &mut p);
    be.touched(&db);
}
