//! Token embedding and cross-entropy, whole or over a vocabulary split across ranks.

use crate::backend::Cuda;
use crate::buf::{CudaBuf, CudaIds};
use crate::device::{Launch, P};
use crate::launch::{NT, tv, tvm};
use boost_tensor::XentFinish;
use boost_tensor::cpu::IGNORE;
use boost_tensor::{Mat, MatMut};

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
