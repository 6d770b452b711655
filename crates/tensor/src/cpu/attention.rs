//! Causal softmax attention with GQA over packed `[q | k | v]` rows.
//!
//! Work units are (sequence, head) in forward and (sequence, kv head) in backward, so the
//! gradients of a shared kv head are summed by one thread in head order. Rows are processed
//! in blocks of `BLOCK` queries that only touch keys up to the block's end, which skips most
//! of the masked upper triangle.

use super::gemm::{Operand, gemm_raw};
use super::par::SendPtr;
use crate::backend::AttnShape;
use crate::scalar::Scalar;
use crate::view::{Mat, MatMut};
use rayon::prelude::*;

const BLOCK: usize = 64;

struct Layout {
    s: usize,
    dh: usize,
    ld: usize,
    q_col: usize,
    k_col: usize,
    v_col: usize,
    group: usize,
}

impl Layout {
    fn new(sh: &AttnShape, ld: usize) -> Self {
        Self {
            s: sh.seq,
            dh: sh.head_dim,
            ld,
            q_col: 0,
            k_col: sh.q_width(),
            v_col: sh.q_width() + sh.kv_width(),
            group: sh.heads / sh.kv_heads,
        }
    }
}

fn check(qkv: &Mat<Vec<impl Scalar>>, sh: &AttnShape) {
    assert_eq!(sh.heads % sh.kv_heads, 0, "attention: {} heads over {} kv heads", sh.heads, sh.kv_heads);
    assert_eq!(qkv.cols, sh.qkv_width(), "attention: packed width");
    assert_eq!(qkv.rows, sh.batch * sh.seq, "attention: rows");
}

pub fn forward<T: Scalar>(out: MatMut<Vec<T>>, probs: &mut [T], qkv: Mat<Vec<T>>, sh: AttnShape) {
    check(&qkv, &sh);
    assert_eq!((out.rows, out.cols), (qkv.rows, sh.q_width()));
    assert!(probs.len() >= sh.probs_len());
    let l = Layout::new(&sh, qkv.ld);
    let scale = 1.0 / (sh.head_dim as f64).sqrt();
    let base = qkv.buf[qkv.off..].as_ptr();
    let base = SendPtr(base as *mut T);
    let o_ld = out.ld;
    let o_base = SendPtr(out.buf[out.off..].as_mut_ptr());
    let p_base = SendPtr(probs.as_mut_ptr());
    (0..sh.batch * sh.heads).into_par_iter().for_each(|unit| {
        let (b, h) = (unit / sh.heads, unit % sh.heads);
        let g = h / l.group;
        let row0 = b * l.s;
        let at = |col: usize, r: usize| unsafe { base.get().add((row0 + r) * l.ld + col) as *const T };
        let p = unsafe { p_base.get().add(unit * l.s * l.s) };
        for i0 in (0..l.s).step_by(BLOCK) {
            let i1 = (i0 + BLOCK).min(l.s);
            let q = Operand { ptr: at(l.q_col + h * l.dh, i0), rs: l.ld as isize, cs: 1 };
            let kt = Operand { ptr: at(l.k_col + g * l.dh, 0), rs: 1, cs: l.ld as isize };
            // SAFETY: unit (b, h) owns rows b·S.. of its probs block and its output columns.
            unsafe {
                let pb = p.add(i0 * l.s);
                gemm_raw(i1 - i0, i1, l.dh, pb, l.s, q, kt, scale, false, false);
                for i in i0..i1 {
                    let r = std::slice::from_raw_parts_mut(p.add(i * l.s), i1);
                    softmax_causal(r, i);
                }
                let v = Operand { ptr: at(l.v_col + g * l.dh, 0), rs: l.ld as isize, cs: 1 };
                let pr = Operand { ptr: pb as *const T, rs: l.s as isize, cs: 1 };
                let o = o_base.get().add((row0 + i0) * o_ld + h * l.dh);
                gemm_raw(i1 - i0, l.dh, i1, o, o_ld, pr, v, 1.0, false, false);
            }
        }
    });
}

/// Softmax of `r[0..=i]`, zeros after.
#[inline]
fn softmax_causal<T: Scalar>(r: &mut [T], i: usize) {
    let (live, dead) = r.split_at_mut(i + 1);
    let m = live.iter().fold(T::neg_infinity(), |a, v| a.max(*v));
    let mut sum = T::zero();
    for v in live.iter_mut() {
        *v = (*v - m).exp();
        sum = sum + *v;
    }
    let inv = T::one() / sum;
    live.iter_mut().for_each(|v| *v = *v * inv);
    dead.fill(T::zero());
}

pub fn backward<T: Scalar>(
    dqkv: MatMut<Vec<T>>,
    dout: Mat<Vec<T>>,
    probs: &[T],
    scratch: &mut [T],
    qkv: Mat<Vec<T>>,
    sh: AttnShape,
) {
    check(&qkv, &sh);
    assert_eq!((dqkv.rows, dqkv.cols), (qkv.rows, qkv.cols));
    assert_eq!((dout.rows, dout.cols), (qkv.rows, sh.q_width()));
    assert!(probs.len() >= sh.probs_len() && scratch.len() >= sh.probs_len());
    let l = Layout::new(&sh, qkv.ld);
    let scale = 1.0 / (sh.head_dim as f64).sqrt();
    let base = SendPtr(qkv.buf[qkv.off..].as_ptr() as *mut T);
    let d_ld = dqkv.ld;
    let d_base = SendPtr(dqkv.buf[dqkv.off..].as_mut_ptr());
    let do_ld = dout.ld;
    let do_base = SendPtr(dout.buf[dout.off..].as_ptr() as *mut T);
    let p_base = SendPtr(probs.as_ptr() as *mut T);
    let s_base = SendPtr(scratch.as_mut_ptr());
    (0..sh.batch * sh.kv_heads).into_par_iter().for_each(|unit| {
        let (b, g) = (unit / sh.kv_heads, unit % sh.kv_heads);
        let row0 = b * l.s;
        let at = |col: usize, r: usize| unsafe { base.get().add((row0 + r) * l.ld + col) as *const T };
        let dat = |col: usize, r: usize| unsafe { d_base.get().add((row0 + r) * d_ld + col) };
        // SAFETY: unit (b, g) owns rows b·S.. of the dq columns of its heads and of its dk, dv
        // columns, and the probs/scratch blocks of its heads.
        unsafe {
            for r in 0..l.s {
                std::slice::from_raw_parts_mut(dat(l.k_col + g * l.dh, r), l.dh).fill(T::zero());
                std::slice::from_raw_parts_mut(dat(l.v_col + g * l.dh, r), l.dh).fill(T::zero());
            }
            for h in g * l.group..(g + 1) * l.group {
                let hu = b * sh.heads + h;
                let p = p_base.get().add(hu * l.s * l.s);
                let ds = s_base.get().add(hu * l.s * l.s);
                let dout_h = |r: usize| do_base.get().add((row0 + r) * do_ld + h * l.dh) as *const T;
                for i0 in (0..l.s).step_by(BLOCK) {
                    let i1 = (i0 + BLOCK).min(l.s);
                    let m = i1 - i0;
                    let d_o = Operand { ptr: dout_h(i0), rs: do_ld as isize, cs: 1 };
                    let vt = Operand { ptr: at(l.v_col + g * l.dh, 0), rs: 1, cs: l.ld as isize };
                    let dsb = ds.add(i0 * l.s);
                    // dP = dO·Vᵀ
                    gemm_raw(m, i1, l.dh, dsb, l.s, d_o, vt, 1.0, false, false);
                    // dS = P ⊙ (dP − Σ_j P·dP)
                    for i in i0..i1 {
                        let pr = std::slice::from_raw_parts(p.add(i * l.s), i1);
                        let dr = std::slice::from_raw_parts_mut(ds.add(i * l.s), i1);
                        let mut dsum = T::zero();
                        for j in 0..=i {
                            dsum = dsum + pr[j] * dr[j];
                        }
                        for j in 0..=i {
                            dr[j] = pr[j] * (dr[j] - dsum);
                        }
                        dr[i + 1..].fill(T::zero());
                    }
                    let dsm = Operand { ptr: dsb as *const T, rs: l.s as isize, cs: 1 };
                    let dsm_t = Operand { ptr: dsb as *const T, rs: 1, cs: l.s as isize };
                    let pm_t = Operand { ptr: p.add(i0 * l.s) as *const T, rs: 1, cs: l.s as isize };
                    // dQ = scale·dS·K
                    let k = Operand { ptr: at(l.k_col + g * l.dh, 0), rs: l.ld as isize, cs: 1 };
                    gemm_raw(m, l.dh, i1, dat(l.q_col + h * l.dh, i0), d_ld, dsm, k, scale, false, false);
                    // dK += scale·dSᵀ·Q
                    let q = Operand { ptr: at(l.q_col + h * l.dh, i0), rs: l.ld as isize, cs: 1 };
                    gemm_raw(i1, l.dh, m, dat(l.k_col + g * l.dh, 0), d_ld, dsm_t, q, scale, true, false);
                    // dV += Pᵀ·dO
                    gemm_raw(i1, l.dh, m, dat(l.v_col + g * l.dh, 0), d_ld, pm_t, d_o, 1.0, true, false);
                }
            }
        }
    });
}
