//! Causal softmax attention with GQA, without the S × S probability matrix. q, k and v are
//! three row-major blocks of one buffer.
//!
//! Work units are (sequence, head, query block) in the forward, so that one long sequence
//! with few heads (a micro-batch of one, a tensor-parallel rank's share of the heads) still
//! keeps every thread busy, and (sequence, kv head) in the backward, so the gradients of a
//! shared kv head are summed by one thread in head order. Rows are processed in blocks of
//! [`block_rows`] queries that only touch keys up to the block's end, which skips most of the
//! masked upper triangle. A block's scores live in a per-thread tile (rows × S);
//! the forward keeps each row's log-sum-exp, and the backward recomputes the block's
//! probabilities from it (FlashAttention's recompute, with whole key rows per tile), so the
//! memory kept per layer is O(S·h) rather than O(h·S²).

use super::gemm::{Operand, gemm_raw};
use super::par::SendPtr;
use crate::args::AttentionBwd;
use crate::backend::AttnShape;
use crate::scalar::Scalar;
use crate::view::MatMut;
use rayon::prelude::*;
use std::cell::RefCell;

/// Query rows per block: 64, or 128 past 512 positions. Longer blocks pack each key tile for
/// more rows (the products' K is only d_h) but compute more of the masked triangle, which a
/// short sequence's few blocks feel. On an AVX-512 Xeon, 2 threads, 128 rows took 0.81–0.88×
/// the forward and 0.82–0.89× the backward time of 64 at seq 1024 to 4096, and 0.95–0.99× at
/// 256 and 512 (medians of 6–8 alternated pairs); 256 rows lost at 256 (1.2×).
fn block_rows(s: usize) -> usize {
    if s > 512 { 128 } else { 64 }
}

thread_local! {
    /// Per-thread score tiles, grown before a call needs them and reused (steps allocate
    /// nothing after the first).
    static TILES: RefCell<(Vec<f64>, Vec<f64>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// f64 words holding `n` elements of `T` (f64 storage holds any Scalar with its alignment).
fn words<T: Scalar>(n: usize) -> usize {
    (n * std::mem::size_of::<T>()).div_ceil(8)
}

/// Grow this thread's tiles to `words`; whether they had to grow.
fn grow(words: usize) -> bool {
    TILES.with(|t| {
        let (a, b) = &mut *t.borrow_mut();
        let short = a.len() < words;
        if short {
            a.resize(words, 0.0);
            b.resize(words, 0.0);
        }
        short
    })
}

/// Give the calling thread and every thread of the current rayon pool tiles of `n` elements
/// of `T` before a parallel loop, so no worker grows its tiles in a later step (work stealing
/// decides which threads a step's blocks reach). The broadcast runs only when the caller's
/// tiles were too small: once per size.
fn reserve_tiles<T: Scalar>(n: usize) {
    let w = words::<T>(n);
    if grow(w) {
        rayon::broadcast(|_| grow(w));
    }
}

/// Run `f` with two tiles of at least `n` elements of `T` each.
fn with_tiles<T: Scalar, R>(n: usize, f: impl FnOnce(&mut [T], &mut [T]) -> R) -> R {
    let words = words::<T>(n);
    TILES.with(|t| {
        let (a, b) = &mut *t.borrow_mut();
        if a.len() < words {
            a.resize(words, 0.0);
            b.resize(words, 0.0);
        }
        // SAFETY: the f64 buffers hold at least n elements of T (size 4 or 8, alignment ≤ 8).
        let (a, b) = unsafe {
            (
                std::slice::from_raw_parts_mut(a.as_mut_ptr() as *mut T, n),
                std::slice::from_raw_parts_mut(b.as_mut_ptr() as *mut T, n),
            )
        };
        f(a, b)
    })
}

/// Offsets and row strides of the q, k, v blocks; head h's columns start at h·d_h.
struct Layout {
    s: usize,
    dh: usize,
    q: (usize, usize),
    k: (usize, usize),
    v: (usize, usize),
    group: usize,
}

impl Layout {
    fn new(sh: &AttnShape) -> Self {
        let t = sh.tokens();
        let (qw, kw) = (sh.q_width(), sh.kv_width());
        Self {
            s: sh.seq,
            dh: sh.head_dim,
            q: (0, qw),
            k: (t * qw, kw),
            v: (t * (qw + kw), kw),
            group: sh.heads / sh.kv_heads,
        }
    }
}

fn check<T>(qkv: &[T], sh: &AttnShape) {
    assert_eq!(sh.heads % sh.kv_heads, 0, "attention: {} heads over {} kv heads", sh.heads, sh.kv_heads);
    assert!(qkv.len() >= sh.qkv_len(), "attention: q, k, v need {} elements, buffer has {}", sh.qkv_len(), qkv.len());
}

/// `out` = softmax(scale·q·kᵀ, causal)·v; `lse` receives each row's log-sum-exp of the
/// scaled scores (`rows_len` elements, row (b, h, i) at `(b·heads + h)·S + i`).
pub fn attention_fwd<T: Scalar>(out: MatMut<Vec<T>>, lse: &mut [T], qkv: &[T], sh: AttnShape) {
    check(qkv, &sh);
    assert_eq!((out.rows, out.cols), (sh.tokens(), sh.q_width()));
    assert!(
        lse.len() >= sh.rows_len(),
        "attention: {} log-sum-exps need room, buffer has {}",
        sh.rows_len(),
        lse.len()
    );
    let l = Layout::new(&sh);
    let scale = 1.0 / (sh.head_dim as f64).sqrt();
    let base = SendPtr(qkv.as_ptr() as *mut T);
    let o_ld = out.ld;
    let o_base = SendPtr(out.buf[out.off..].as_mut_ptr());
    let lse_base = SendPtr(lse.as_mut_ptr());
    let block = block_rows(l.s);
    reserve_tiles::<T>(block * l.s);
    let blocks = l.s.div_ceil(block);
    (0..sh.batch * sh.heads * blocks).into_par_iter().for_each(|u| {
        // The costliest blocks (the last rows, which see the most keys) first.
        let (unit, i0) = (u / blocks, (blocks - 1 - u % blocks) * block);
        let i1 = (i0 + block).min(l.s);
        let (b, h) = (unit / sh.heads, unit % sh.heads);
        let g = h / l.group;
        let row0 = b * l.s;
        let at = |(off, ld): (usize, usize), col: usize, r: usize| unsafe {
            (base.get().add(off + (row0 + r) * ld + col) as *const T, ld as isize)
        };
        with_tiles::<T, _>(block * l.s, |p, _| {
            let (qp, qld) = at(l.q, h * l.dh, i0);
            let (kp, kld) = at(l.k, g * l.dh, 0);
            let (vp, vld) = at(l.v, g * l.dh, 0);
            let q = Operand { ptr: qp, rs: qld, cs: 1 };
            let kt = Operand { ptr: kp, rs: 1, cs: kld };
            let v = Operand { ptr: vp, rs: vld, cs: 1 };
            // SAFETY: unit (b, h, block) owns its rows of `lse` and of its head's output
            // columns; the tile is this thread's.
            unsafe {
                let pb = p.as_mut_ptr();
                gemm_raw((i1 - i0, i1, l.dh), (pb, i1), q, kt, scale, false, false);
                for i in i0..i1 {
                    let r = &mut p[(i - i0) * i1..(i - i0 + 1) * i1];
                    *lse_base.get().add(unit * l.s + i) = softmax_causal(r, i);
                }
                let pr = Operand { ptr: pb as *const T, rs: i1 as isize, cs: 1 };
                let o = o_base.get().add((row0 + i0) * o_ld + h * l.dh);
                gemm_raw((i1 - i0, l.dh, i1), (o, o_ld), pr, v, 1.0, false, false);
            }
        });
    });
}

/// Softmax of `r[0..=i]`, zeros after; returns the log-sum-exp of `r[0..=i]`.
#[inline]
fn softmax_causal<T: Scalar>(r: &mut [T], i: usize) -> T {
    let (live, dead) = r.split_at_mut(i + 1);
    let m = T::max_of(live);
    let sum = T::exp_shifted(live, m);
    let inv = T::one() / sum;
    live.iter_mut().for_each(|v| *v = *v * inv);
    dead.fill(T::zero());
    m + sum.ln()
}

/// The probabilities of row `i` from its scaled scores and log-sum-exp, zeros after `i`.
#[inline]
fn probs_from_lse<T: Scalar>(r: &mut [T], i: usize, lse: T) {
    let (live, dead) = r.split_at_mut(i + 1);
    T::exp_shifted(live, lse);
    dead.fill(T::zero());
}

/// Overwrites `dqkv` from `dout`, `qkv` and the forward's log-sum-exps (`saved`); the
/// probabilities and their gradient are rebuilt block by block in per-thread tiles (`scratch`
/// is unused).
/// A tile holds whole key rows, so each row's Σ_j P·dP is summed from it and the forward's
/// output is not read.
pub fn attention_bwd<T: Scalar>(args: AttentionBwd<Vec<T>>) {
    let AttentionBwd { dqkv, dout, out: _, saved: lse, scratch: _, qkv, shape: sh } = args;
    check(qkv, &sh);
    check(dqkv, &sh);
    assert_eq!((dout.rows, dout.cols), (sh.tokens(), sh.q_width()));
    assert!(lse.len() >= sh.rows_len(), "attention: {} log-sum-exps expected, buffer has {}", sh.rows_len(), lse.len());
    let l = Layout::new(&sh);
    let scale = 1.0 / (sh.head_dim as f64).sqrt();
    let base = SendPtr(qkv.as_ptr() as *mut T);
    let d_base = SendPtr(dqkv.as_mut_ptr());
    let do_ld = dout.ld;
    let do_base = SendPtr(dout.buf[dout.off..].as_ptr() as *mut T);
    let block = block_rows(l.s);
    reserve_tiles::<T>(block * l.s);
    (0..sh.batch * sh.kv_heads).into_par_iter().for_each(|unit| {
        let (b, g) = (unit / sh.kv_heads, unit % sh.kv_heads);
        let row0 = b * l.s;
        let at = |(off, ld): (usize, usize), col: usize, r: usize| unsafe {
            Operand { ptr: base.get().add(off + (row0 + r) * ld + col) as *const T, rs: ld as isize, cs: 1 }
        };
        let at_t = |(off, ld): (usize, usize), col: usize, r: usize| unsafe {
            Operand { ptr: base.get().add(off + (row0 + r) * ld + col) as *const T, rs: 1, cs: ld as isize }
        };
        let dat = |(off, ld): (usize, usize), col: usize, r: usize| unsafe {
            (d_base.get().add(off + (row0 + r) * ld + col), ld)
        };
        with_tiles::<T, _>(block * l.s, |p, ds| {
            // SAFETY: unit (b, g) owns rows b·S.. of the dq columns of its heads and of its dk,
            // dv columns; the tiles are this thread's.
            unsafe {
                for r in 0..l.s {
                    std::slice::from_raw_parts_mut(dat(l.k, g * l.dh, r).0, l.dh).fill(T::zero());
                    std::slice::from_raw_parts_mut(dat(l.v, g * l.dh, r).0, l.dh).fill(T::zero());
                }
                for h in g * l.group..(g + 1) * l.group {
                    let hu = b * sh.heads + h;
                    for i0 in (0..l.s).step_by(block) {
                        let i1 = (i0 + block).min(l.s);
                        let m = i1 - i0;
                        let d_o = Operand {
                            ptr: do_base.get().add((row0 + i0) * do_ld + h * l.dh) as *const T,
                            rs: do_ld as isize,
                            cs: 1,
                        };
                        // P, rebuilt: scale·Q·Kᵀ, then exp(s − lse) row by row.
                        let (pb, dsb) = (p.as_mut_ptr(), ds.as_mut_ptr());
                        let (q, kt) = (at(l.q, h * l.dh, i0), at_t(l.k, g * l.dh, 0));
                        gemm_raw((m, i1, l.dh), (pb, i1), q, kt, scale, false, false);
                        for i in i0..i1 {
                            probs_from_lse(&mut p[(i - i0) * i1..(i - i0 + 1) * i1], i, lse[hu * l.s + i]);
                        }
                        // dP = dO·Vᵀ
                        gemm_raw((m, i1, l.dh), (dsb, i1), d_o, at_t(l.v, g * l.dh, 0), 1.0, false, false);
                        // dS = P ⊙ (dP − Σ_j P·dP)
                        for i in i0..i1 {
                            let row = (i - i0) * i1;
                            let pr = &p[row..row + i + 1];
                            let (live, dead) = ds[row..row + i1].split_at_mut(i + 1);
                            let dsum = T::dot(pr, live);
                            for (d, pv) in live.iter_mut().zip(pr) {
                                *d = *pv * (*d - dsum);
                            }
                            dead.fill(T::zero());
                        }
                        let dsm = Operand { ptr: dsb as *const T, rs: i1 as isize, cs: 1 };
                        let dsm_t = Operand { ptr: dsb as *const T, rs: 1, cs: i1 as isize };
                        let pm_t = Operand { ptr: pb as *const T, rs: 1, cs: i1 as isize };
                        // dQ = scale·dS·K
                        gemm_raw((m, l.dh, i1), dat(l.q, h * l.dh, i0), dsm, at(l.k, g * l.dh, 0), scale, false, false);
                        // dK += scale·dSᵀ·Q
                        gemm_raw(
                            (i1, l.dh, m),
                            dat(l.k, g * l.dh, 0),
                            dsm_t,
                            at(l.q, h * l.dh, i0),
                            scale,
                            true,
                            false,
                        );
                        // dV += Pᵀ·dO
                        gemm_raw((i1, l.dh, m), dat(l.v, g * l.dh, 0), pm_t, d_o, 1.0, true, false);
                    }
                }
            }
        });
    });
}
