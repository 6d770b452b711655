//! Token embedding and cross-entropy, whole or over a vocabulary split across ranks.

use crate::backend::Cuda;
use crate::buf::{CudaBuf, CudaIds};
use crate::device::{Launch, P};
use crate::launch::{NT, tv, tvm};
use boost_tensor::cpu::IGNORE;
use boost_tensor::{Backend, Mat, MatMut};
use boost_tensor::{HeadXent, HeadXentGrad, XentFinish};
use std::sync::atomic::{AtomicUsize, Ordering};

pub(crate) fn embed(be: &Cuda, out: MatMut<CudaBuf>, table: Mat<CudaBuf>, ids: &CudaIds, first: usize) {
    assert_eq!(out.rows, ids.len(), "embed: one row per id");
    assert_eq!(out.cols, table.cols, "embed: width");
    let mut p = P::of(&[tvm(&out), tv(&table)]);
    p.v[2].p = ids.ptr();
    p.n[2] = first as i64;
    p.n[3] = table.rows as i64;
    be.ew("k_embed", out.rows, out.cols, &mut p);
    be.touched(&out);
}

pub(crate) fn embed_bwd(be: &Cuda, dtable: MatMut<CudaBuf>, dout: Mat<CudaBuf>, ids: &CudaIds, first: usize) {
    assert_eq!(dout.rows, ids.len(), "embed_bwd: one row per id");
    assert_eq!(dtable.cols, dout.cols, "embed_bwd: width");
    let mut p = P::of(&[tvm(&dtable), tv(&dout)]);
    p.v[2].p = ids.ptr();
    p.v[3].p = ids.runs_ptr();
    p.n = [dout.rows as i64, dout.cols as i64, first as i64, dtable.rows as i64, 0, 0];
    // A block row per distinct id (the grid has one per position: those past the distinct
    // ids, and ids outside this table's rows, do nothing), one thread per column: each sum
    // walks that id's positions in order, so repeated ids add up deterministically, and in
    // parallel. The runs were uploaded with the ids: nothing is allocated or copied here.
    let cols = dout.cols.div_ceil(NT as usize) as u32;
    be.launch("k_embed_bwd", Launch { grid: (dout.rows as u32, cols, 1), block: (NT, 1, 1) }, &p);
    be.touched(&dtable);
}

pub(crate) fn cross_entropy(
    be: &Cuda,
    losses: MatMut<CudaBuf>,
    logits: MatMut<CudaBuf>,
    targets: &CudaIds,
    grad_scale: Option<f64>,
) {
    assert_eq!(logits.rows, targets.len(), "cross_entropy: one target per row");
    assert_eq!((losses.rows, losses.cols), (targets.len(), 1), "cross_entropy: one loss per row");
    let v = logits.cols;
    for &t in &targets.host {
        assert!(t == IGNORE || (t as usize) < v, "target id {t} is outside the vocabulary of {v}");
    }
    let mut p = P::of(&[tvm(&losses), tvm(&logits)]);
    p.v[2].p = targets.ptr();
    p.n[2] = grad_scale.is_some() as i64;
    p.f[0] = grad_scale.unwrap_or(0.0);
    be.per_row("k_cross_entropy", logits.rows, v, &mut p);
    be.touched(&losses);
    be.touched(&logits);
}

pub(crate) fn row_max(be: &Cuda, max: MatMut<CudaBuf>, logits: Mat<CudaBuf>) {
    assert_eq!((max.rows, max.cols), (logits.rows, 1), "row_max: one output per row");
    let mut p = P::of(&[tvm(&max), tv(&logits)]);
    be.per_row("k_row_max", logits.rows, logits.cols, &mut p);
    be.touched(&max);
}

pub(crate) fn xent_partials(
    be: &Cuda,
    stats: MatMut<CudaBuf>,
    logits: Mat<CudaBuf>,
    max: Mat<CudaBuf>,
    targets: &CudaIds,
    first: usize,
) {
    assert_eq!((stats.rows, stats.cols), (logits.rows, 2), "xent_partials: stats are rows×2");
    assert_eq!(logits.rows, targets.len(), "xent_partials: one target per row");
    let mut p = P::of(&[tvm(&stats), tv(&logits), tv(&max)]);
    p.v[3].p = targets.ptr();
    p.n[2] = first as i64;
    be.per_row("k_xent_partials", logits.rows, logits.cols, &mut p);
    be.touched(&stats);
}

// The operands of `Backend::xent_finish`, after the backend.
pub(crate) fn xent_finish(be: &Cuda, args: XentFinish<CudaBuf, CudaIds>) {
    let XentFinish { losses, logits, max, stats, targets, first, grad_scale } = args;
    assert_eq!(logits.rows, targets.len(), "xent_finish: one target per row");
    assert_eq!(losses.rows, targets.len(), "xent_finish: one loss per row");
    let mut p = P::of(&[tvm(&losses), tvm(&logits), tv(&max), tv(&stats)]);
    p.v[4].p = targets.ptr();
    p.n[2] = first as i64;
    p.n[3] = grad_scale.is_some() as i64;
    p.f[0] = grad_scale.unwrap_or(0.0);
    be.per_row("k_xent_finish", logits.rows, logits.cols, &mut p);
    be.touched(&losses);
    be.touched(&logits);
}

/// The head's logits and their cross-entropy, `chunk_rows` tokens at a time: each chunk's
/// logits (stored as activations, as the model stores the whole logits: bf16 under
/// `Precision::Bf16`; in one buffer reused by every chunk and kept for the next step) are
/// computed, turned into their gradient in place by the whole-row kernel, and consumed by dW
/// and the chunk's rows of dh before the next chunk overwrites them. Whole rows need no online log-sum-exp and no
/// recomputed GEMM; the full t × v logits are never held.
pub(crate) fn head_xent(be: &Cuda, args: HeadXent<CudaBuf, CudaIds>) {
    let HeadXent { mut losses, h, w, targets, chunk_rows, mut grad } = args;
    let (t, v, d) = (h.rows, w.rows, h.cols);
    assert_eq!(w.cols, d, "head_xent: h is {t}×{d}, w is {v}×{}", w.cols);
    assert_eq!(targets.len(), t, "head_xent: one target per row");
    assert_eq!((losses.rows, losses.cols), (t, 1), "head_xent: one loss per row");
    for &id in &targets.host {
        assert!(id == IGNORE || (id as usize) < v, "target id {id} is outside the vocabulary of {v}");
    }
    if let Some(HeadXentGrad { dh, dw, .. }) = &grad {
        assert_eq!((dh.rows, dh.cols), (t, d), "head_xent: dh is t×d");
        assert_eq!((dw.rows, dw.cols), (v, d), "head_xent: dw is v×d");
    }
    let rows = chunk_rows.clamp(1, t.max(1));
    let mut held = be.head_logits(rows * v);
    let logits = held.as_mut().expect("head_logits holds a buffer");
    for r0 in (0..t).step_by(rows) {
        let n = rows.min(t - r0);
        let mut lg = MatMut::new(logits, n, v);
        be.gemm(lg.rb(), h.rows(r0, r0 + n), w.t(), 1.0, false);
        let mut p = P::of(&[tvm(&losses.rb().rows(r0, r0 + n)), tvm(&lg)]);
        p.v[2].p = targets.ptr() + 4 * r0 as u64;
        p.n[2] = grad.is_some() as i64;
        p.f[0] = grad.as_ref().map_or(0.0, |g| g.scale);
        be.per_row("k_cross_entropy", n, v, &mut p);
        if let Some(HeadXentGrad { dh, dw, .. }) = &mut grad {
            let dl = Mat::new(logits, n, v);
            be.gemm(dw.rb(), dl.t(), h.rows(r0, r0 + n), 1.0, true);
            be.gemm(dh.rb().rows(r0, r0 + n), dl, w, 1.0, false);
        }
    }
    be.touched(&losses);
}

/// Bytes of logits the model's loss holds at once on a GPU (64 MiB unless set).
static HEAD_CHUNK_BYTES: AtomicUsize = AtomicUsize::new(64 << 20);

/// Set the bytes of logits above which the model's LM head loss goes by chunks of rows
/// ([`boost_tensor::Backend::head_xent`]) of at most this many bytes, for every backend of
/// the process (tests and benchmarks; the default is 64 MiB).
pub fn set_head_loss_chunk_bytes(bytes: usize) {
    HEAD_CHUNK_BYTES.store(bytes, Ordering::Relaxed);
}

/// Whole logits up to the budget (one GEMM fewer: the chunked loss recomputes its logits in
/// the backward); past it, as many rows as fit in it, at least one.
pub(crate) fn head_loss_chunk_rows(tokens: usize, vocab: usize, elem_bytes: usize) -> Option<usize> {
    let (budget, row) = (HEAD_CHUNK_BYTES.load(Ordering::Relaxed), vocab * elem_bytes);
    (tokens * row > budget).then(|| (budget / row.max(1)).max(1))
}
