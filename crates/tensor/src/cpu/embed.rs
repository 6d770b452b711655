//! Token embedding lookup and the cross-entropy loss.

use super::par::{COL_BLOCK, par_rows, par_rows_of_work, row};
use crate::args::{HeadXent, HeadXentGrad, XentFinish};
use crate::scalar::Scalar;
use crate::view::{Mat, MatMut};
use rayon::prelude::*;

/// Target id meaning "no loss at this position".
pub const IGNORE: u32 = u32::MAX;

pub fn embed<T: Scalar>(out: MatMut<Vec<T>>, table: Mat<Vec<T>>, ids: &[u32], first: usize) {
    assert_eq!(out.rows, ids.len(), "embed: one row per id");
    assert_eq!(out.cols, table.cols, "embed: width");
    par_rows(out).for_each(|(i, o)| {
        let id = ids[i] as usize;
        if id >= first && id < first + table.rows {
            o.copy_from_slice(row(&table, id - first));
        } else {
            o.fill(T::zero());
        }
    });
}

/// Scatter-add by column blocks: each block walks the ids in order, so the sum is fixed.
pub fn embed_bwd<T: Scalar>(dtable: MatMut<Vec<T>>, dout: Mat<Vec<T>>, ids: &[u32], first: usize) {
    assert_eq!(dout.rows, ids.len());
    assert_eq!(dtable.cols, dout.cols);
    let (rows, cols, ld) = (dtable.rows, dtable.cols, dtable.ld);
    let base = super::par::SendPtr(dtable.buf[dtable.off..].as_mut_ptr());
    (0..cols.div_ceil(COL_BLOCK)).into_par_iter().for_each(|b| {
        let j0 = b * COL_BLOCK;
        let j1 = (j0 + COL_BLOCK).min(cols);
        for (i, id) in ids.iter().enumerate() {
            let id = *id as usize;
            if id < first || id >= first + rows {
                continue;
            }
            // SAFETY: block b owns columns j0..j1 of every row of the table view.
            let dst = unsafe { std::slice::from_raw_parts_mut(base.get().add((id - first) * ld + j0), j1 - j0) };
            for (o, v) in dst.iter_mut().zip(&row(&dout, i)[j0..j1]) {
                *o = *o + *v;
            }
        }
    });
}

pub fn cross_entropy<T: Scalar>(
    losses: MatMut<Vec<T>>,
    logits: MatMut<Vec<T>>,
    targets: &[u32],
    grad_scale: Option<f64>,
) {
    assert_eq!(logits.rows, targets.len());
    assert_eq!((losses.rows, losses.cols), (targets.len(), 1));
    let v = logits.cols;
    par_rows(logits).zip(par_rows_of_work(losses, v)).for_each(|((i, r), (_, l))| {
        let t = targets[i];
        if t == IGNORE {
            l[0] = T::zero();
            if grad_scale.is_some() {
                r.fill(T::zero());
            }
            return;
        }
        let t = t as usize;
        assert!(t < v, "target id {t} is outside the vocabulary of {v}");
        let m = T::max_of(r);
        let xt = r[t];
        match grad_scale {
            // The logits become e^(x − m), then the gradient.
            Some(s) => {
                let sum = T::exp_shifted(r, m);
                l[0] = sum.ln() + m - xt;
                let f = T::of(s) / sum;
                T::scale_row(r, f);
                r[t] = r[t] - T::of(s);
            }
            None => {
                let sum = T::exp_sum(r, m);
                l[0] = sum.ln() + m - xt;
            }
        }
    });
}

pub fn row_max<T: Scalar>(max: MatMut<Vec<T>>, logits: Mat<Vec<T>>) {
    assert_eq!((max.rows, max.cols), (logits.rows, 1));
    par_rows_of_work(max, logits.cols).for_each(|(i, o)| o[0] = T::max_of(row(&logits, i)));
}

pub fn xent_partials<T: Scalar>(
    stats: MatMut<Vec<T>>,
    logits: Mat<Vec<T>>,
    max: Mat<Vec<T>>,
    targets: &[u32],
    first: usize,
) {
    assert_eq!((stats.rows, stats.cols), (logits.rows, 2));
    let v = logits.cols;
    par_rows_of_work(stats, v).for_each(|(i, o)| {
        let r = row(&logits, i);
        let m = row(&max, i)[0];
        o[0] = T::exp_sum(r, m);
        let t = targets[i] as usize;
        o[1] = if targets[i] != IGNORE && t >= first && t < first + v { r[t - first] } else { T::zero() };
    });
}

pub fn xent_finish<T: Scalar>(args: XentFinish<Vec<T>, Vec<u32>>) {
    let XentFinish { losses, logits, max, stats, targets, first, grad_scale } = args;
    let v = logits.cols;
    par_rows(logits).zip(par_rows_of_work(losses, v)).for_each(|((i, r), (_, l))| {
        let (m, st) = (row(&max, i)[0], row(&stats, i));
        if targets[i] == IGNORE {
            l[0] = T::zero();
            if grad_scale.is_some() {
                r.fill(T::zero());
            }
            return;
        }
        l[0] = st[0].ln() + m - st[1];
        if let Some(s) = grad_scale {
            let f = T::of(s) / st[0];
            T::exp_shifted_unsummed(r, m);
            T::scale_row(r, f);
            let t = targets[i] as usize;
            if t >= first && t < first + v {
                r[t - first] = r[t - first] - T::of(s);
            }
        }
    });
}

/// The unfused sequence: the whole logits, [`cross_entropy`] over them, then dW and dh from the
/// gradient left in their place (`chunk_rows` is for backends that chunk).
pub fn head_xent<T: Scalar>(args: HeadXent<Vec<T>, Vec<u32>>) {
    let HeadXent { losses, h, w, targets, chunk_rows: _, grad } = args;
    assert_eq!(h.cols, w.cols, "head_xent: h is t×{}, w is v×{}", h.cols, w.cols);
    let (t, v) = (h.rows, w.rows);
    let mut logits = vec![T::zero(); t * v];
    super::gemm::gemm(MatMut::new(&mut logits, t, v), h, w.t(), 1.0, false);
    cross_entropy(losses, MatMut::new(&mut logits, t, v), targets, grad.as_ref().map(|g| g.scale));
    if let Some(HeadXentGrad { dh, dw, .. }) = grad {
        let dl = Mat::new(&logits, t, v);
        super::gemm::gemm(dw, dl.t(), h, 1.0, true);
        super::gemm::gemm(dh, dl, w, 1.0, false);
    }
}
