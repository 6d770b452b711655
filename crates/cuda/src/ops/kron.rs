//! The LaX Kronecker gate: per row, the latent as an a×b matrix Z maps to Kaᵀ·Z·Kb. The
//! factor gradients are summed over fixed row chunks, then over the chunks in order.

use crate::backend::{Cuda, WS_KRON_DU, WS_KRON_U, WS_PART};
use crate::buf::CudaBuf;
use crate::device::{P, Tv};
use crate::launch::{tv, tv_f32, tvm};
use boost_tensor::KronBwd;
use boost_tensor::{Mat, MatMut};

/// Row chunks whose Kronecker-factor gradient partials are summed in order.
const KRON_CHUNKS: usize = 64;

/// An elementwise kron kernel over `rows × cols` on views `v`, for factors a×a and b×b.
fn kron_ew(be: &Cuda, kernel: &'static str, (rows, cols): (usize, usize), (a, b): (usize, usize), v: &[Tv]) {
    let mut p = P::of(v);
    p.n[2] = a as i64;
    p.n[3] = b as i64;
    be.ew(kernel, rows, cols, &mut p);
}

pub(crate) fn kron_fwd(
    be: &Cuda,
    y: MatMut<CudaBuf>,
    z: Mat<CudaBuf>,
    ka: Mat<CudaBuf>,
    kb: Mat<CudaBuf>,
    _scratch: &mut CudaBuf,
    accumulate: bool,
) {
    let (a, b, rows) = (ka.rows, kb.rows, z.rows);
    assert_eq!(z.cols, a * b, "kron_fwd: latent width {} is not {a}·{b}", z.cols);
    assert_eq!((y.rows, y.cols), (rows, a * b), "kron_fwd: output shape");
    let u = tv_f32(be.ws(WS_KRON_U, 4 * rows * a * b), a * b);
    kron_ew(be, "k_kron_right", (rows, a * b), (a, b), &[u, tv(&z), tv(&kb)]);
    let mut p = P::of(&[tvm(&y), u, tv(&ka)]);
    p.n[2] = a as i64;
    p.n[3] = b as i64;
    p.n[4] = accumulate as i64;
    be.ew("k_kron_left", rows, a * b, &mut p);
    be.touched(&y);
}

// The operands of `Backend::kron_bwd`, after the backend.
pub(crate) fn kron_bwd(be: &Cuda, args: KronBwd<CudaBuf>) {
    let KronBwd { dz, dka, dkb, dy, z, ka, kb, scratch: _ } = args;
    let (a, b, rows) = (ka.rows, kb.rows, z.rows);
    let r = a * b;
    assert_eq!((dz.rows, dz.cols), (rows, r), "kron_bwd: dz shape");
    assert_eq!((dka.rows, dka.cols, dkb.rows, dkb.cols), (a, a, b, b), "kron_bwd: factor gradient shapes");
    let u = tv_f32(be.ws(WS_KRON_U, 4 * rows * r), r);
    let du = tv_f32(be.ws(WS_KRON_DU, 4 * rows * r), r);
    kron_ew(be, "k_kron_right", (rows, r), (a, b), &[u, tv(&z), tv(&kb)]);
    kron_ew(be, "k_kron_du", (rows, r), (a, b), &[du, tv(&dy), tv(&ka)]);
    kron_ew(be, "k_kron_dz", (rows, r), (a, b), &[tvm(&dz), du, tv(&kb)]);
    be.touched(&dz);
    let per = rows.div_ceil(KRON_CHUNKS).max(1);
    let part = be.ws(WS_PART, 4 * KRON_CHUNKS * (a * a).max(b * b));
    for (kernel, width, x, y, out) in
        [("k_kron_dka_part", a, u, tv(&dy), tvm(&dka)), ("k_kron_dkb_part", b, tv(&z), du, tvm(&dkb))]
    {
        let w = width * width;
        let pv = tv_f32(part, w);
        let mut p = P::of(&[pv, x, y]);
        p.n = [rows as i64, 0, a as i64, b as i64, KRON_CHUNKS as i64, per as i64];
        // The grid covers chunks × width² outputs; n[0] is the row count the kernel reads.
        be.flat(kernel, KRON_CHUNKS * w, &p);
        let mut p = P::of(&[out, pv]);
        p.n[2] = KRON_CHUNKS as i64;
        be.ew("k_sum_parts", width, width, &mut p);
    }
    be.touched(&dka);
    be.touched(&dkb);
}
