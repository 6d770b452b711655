//! The backward: units of (sequence, kv head, key chunk), the probabilities rebuilt from the
//! forward's log-sum-exps.

use super::buffers::{Rows, copies_rows, reserve_tiles, unit_cols_len, with_kv_copies, with_tiles, with_unit_cols};
use super::tile::{Live, block_product};
use super::{KEY_CHUNK, QkvLayout, block_rows, check};
use crate::args::AttentionBwd;
use crate::backend::AttnShape;
use crate::cpu::gemm::{Operand, gemm_raw};
use crate::cpu::par::SendPtr;
use crate::scalar::Scalar;
use rayon::prelude::*;

/// The probabilities of row `i` from its scaled scores and log-sum-exp, zeros after `i`.
#[inline]
fn probs_from_lse<T: Scalar>(r: &mut [T], i: usize, lse: T) {
    let (live, dead) = r.split_at_mut(i + 1);
    T::exp_shifted_unsummed(live, lse);
    dead.fill(T::zero());
}

fn key_chunks(s: usize) -> usize {
    s.div_ceil(KEY_CHUNK)
}

/// Rows, over all sequences, of the dQ terms that key chunks `1..c` keep in the scratch (chunk
/// `c` ≥ 1 keeps query rows `c·KEY_CHUNK..S` of every sequence).
fn partial_rows_before(sh: &AttnShape, c: usize) -> usize {
    (1..c).map(|c| sh.seq - c * KEY_CHUNK).sum::<usize>() * sh.batch
}

/// The scratch row of chunk `c`'s (≥ 1) dQ terms for query row `i` (≥ c·KEY_CHUNK) of
/// sequence `b`.
fn partial_row(sh: &AttnShape, c: usize, b: usize, i: usize) -> usize {
    let k0 = c * KEY_CHUNK;
    partial_rows_before(sh, c) + b * (sh.seq - k0) + (i - k0)
}

/// Elements of the backward's scratch for a sequence of several key chunks (none for one):
/// the dQ terms of the chunks after the first, added to dQ in chunk order once every chunk is
/// done, then each row's `D = dO·O` (one per row and head, as the log-sum-exps), computed once
/// before the chunks rather than in each chunk that reaches the row (4.5 times a row on
/// average at seq 4096).
pub fn attention_bwd_scratch_len(sh: &AttnShape) -> usize {
    let chunks = key_chunks(sh.seq);
    if chunks == 1 { 0 } else { partial_rows_before(sh, chunks) * sh.q_width() + sh.rows_len() }
}

/// Where the scratch's `D` values start, after the dQ terms (see [`attention_bwd_scratch_len`]).
fn d_offset(sh: &AttnShape) -> usize {
    partial_rows_before(sh, key_chunks(sh.seq)) * sh.q_width()
}

/// Overwrites `dqkv` from `dout`, `out`, `qkv` and the forward's log-sum-exps (`saved`). The
/// probabilities and their gradient are rebuilt, a query block by a key chunk at a time, in
/// per-thread tiles. Each row's `D = Σ_j P·dP` is summed from the tile when a sequence is one
/// chunk (the tile holds whole rows; reading `out` instead cost up to 8 % of the backward at
/// 256 × 8 on one thread), and is `dout·out` of that row otherwise, so a tile needs only its
/// chunk's keys.
///
/// Every sum is taken in an order fixed by the shape alone: a chunk's unit adds its dK and dV
/// rows over (head, query block) in order, and writes its dQ terms (chunk 0 into dQ itself,
/// later chunks into `scratch`), which are then added to dQ in chunk order.
pub fn attention_bwd<T: Scalar>(args: AttentionBwd<Vec<T>>) {
    let AttentionBwd { dqkv, dout, out, saved: lse, scratch, qkv, shape: sh } = args;
    check(qkv, &sh);
    check(dqkv, &sh);
    assert_eq!((dout.rows, dout.cols), (sh.tokens(), sh.q_width()));
    assert_eq!((out.rows, out.cols), (sh.tokens(), sh.q_width()));
    assert!(lse.len() >= sh.rows_len(), "attention: {} log-sum-exps expected, buffer has {}", sh.rows_len(), lse.len());
    let scratch_len = attention_bwd_scratch_len(&sh);
    assert!(scratch.len() >= scratch_len, "attention: the scratch needs {scratch_len} elements, has {}", scratch.len());
    let l = QkvLayout::new(&sh);
    let qw = sh.q_width();
    let scale = 1.0 / (sh.head_dim as f64).sqrt();
    let base = SendPtr(qkv.as_ptr() as *mut T);
    let d_base = SendPtr(dqkv.as_mut_ptr());
    let part_base = SendPtr(scratch.as_mut_ptr());
    let (do_ld, o_ld) = (dout.ld, out.ld);
    let do_base = SendPtr(dout.buf[dout.off..].as_ptr() as *mut T);
    let o_base = SendPtr(out.buf[out.off..].as_ptr() as *mut T);
    let block = block_rows(l.s);
    let chunks = key_chunks(l.s);
    let units = sh.batch * sh.kv_heads;
    // A sequence of one key chunk copies each unit's k and v in the unit (`with_unit_cols`),
    // longer ones for the whole call before the units run.
    let unit_copies = chunks == 1;
    reserve_tiles::<T>(block * l.s.min(KEY_CHUNK), if unit_copies { unit_cols_len(&l, 2) } else { 0 });
    if chunks > 1 {
        // D of every row (b, h, i), at ((b·heads + h)·S + i), as the log-sum-exps.
        let d_all = &mut scratch[d_offset(&sh)..d_offset(&sh) + sh.rows_len()];
        d_all.par_iter_mut().enumerate().with_min_len(256).for_each(|(r, d)| {
            let (hu, i) = (r / l.s, r % l.s);
            let (b, h) = (hu / sh.heads, hu % sh.heads);
            let row = b * l.s + i;
            // SAFETY: row `row` of dO and of O has the head's d_h columns from h·d_h.
            let (d_o, o) = unsafe {
                (
                    std::slice::from_raw_parts(do_base.get().add(row * do_ld + h * l.dh), l.dh),
                    std::slice::from_raw_parts(o_base.get().add(row * o_ld + h * l.dh), l.dh),
                )
            };
            *d = T::dot(d_o, o);
        });
    }
    let dsum_base = SendPtr(scratch.as_mut_ptr().wrapping_add(d_offset(&sh)));
    let k_rows = copies_rows(l.s).then_some(Rows::K);
    with_kv_copies(qkv, &l, &sh, if unit_copies { 0 } else { 2 }, k_rows, |kv| {
        (0..chunks * units).into_par_iter().for_each(|u| {
            // Chunk-major: the first chunks, which every query block reaches, are the costliest.
            let (c, unit) = (u / units, u % units);
            let (b, g) = (unit / sh.kv_heads, unit % sh.kv_heads);
            let (k0, k1) = (c * KEY_CHUNK, ((c + 1) * KEY_CHUNK).min(l.s));
            let row0 = b * l.s;
            let at = |(off, ld): (usize, usize), col: usize, r: usize| unsafe {
                Operand { ptr: base.get().add(off + (row0 + r) * ld + col) as *const T, rs: ld as isize, cs: 1 }
            };
            let dat = |(off, ld): (usize, usize), col: usize, r: usize| unsafe {
                (d_base.get().add(off + (row0 + r) * ld + col), ld)
            };
            // Where this chunk's dQ terms of query row i (≥ k0), head column `col`, go.
            let dq_at = |col: usize, i: usize| unsafe {
                if c == 0 { dat(l.q, col, i) } else { (part_base.get().add(partial_row(&sh, c, b, i) * qw + col), qw) }
            };
            // `cols_t(c)`: Kᵀ (0) or Vᵀ (1) from key k0 on, from the column-major copies.
            let run = |cols_t: &dyn Fn(usize) -> Operand<T>| {
                with_tiles::<T, _>(block * (k1 - k0), |p, ds| {
                    // SAFETY: unit (b, g, c) owns rows k0..k1 of sequence b in its dk and dv columns,
                    // and the dQ terms of chunk c for its heads (dQ's own rows for chunk 0, scratch
                    // rows otherwise); the tiles are this thread's.
                    unsafe {
                        for r in k0..k1 {
                            std::slice::from_raw_parts_mut(dat(l.k, g * l.dh, r).0, l.dh).fill(T::zero());
                            std::slice::from_raw_parts_mut(dat(l.v, g * l.dh, r).0, l.dh).fill(T::zero());
                        }
                        for h in g * l.group..(g + 1) * l.group {
                            let hu = b * sh.heads + h;
                            for i0 in (k0..l.s).step_by(block) {
                                let i1 = (i0 + block).min(l.s);
                                // The block's rows and the chunk's keys they see.
                                let (m, n) = (i1 - i0, i1.min(k1) - k0);
                                let d_o = Operand {
                                    ptr: do_base.get().add((row0 + i0) * do_ld + h * l.dh) as *const T,
                                    rs: do_ld as isize,
                                    cs: 1,
                                };
                                // P, rebuilt: scale·Q·Kᵀ, then exp(s − lse) row by row.
                                let (pb, dsb) = (p.as_mut_ptr(), ds.as_mut_ptr());
                                let (q, kt) = (at(l.q, h * l.dh, i0), cols_t(0));
                                // Row i0 + r sees key k0 + j for j ≤ r + off.
                                let off = i0 as isize - k0 as isize;
                                block_product((m, n, l.dh), (pb, n), q, kt, scale, false, Live::Cols(off), None);
                                // Row i sees keys k0..=i of the chunk.
                                let last = |i: usize| (i - k0).min(n - 1);
                                for i in i0..i1 {
                                    probs_from_lse(&mut p[(i - i0) * n..(i - i0 + 1) * n], last(i), lse[hu * l.s + i]);
                                }
                                // dP = dO·Vᵀ
                                block_product(
                                    (m, n, l.dh),
                                    (dsb, n),
                                    d_o,
                                    cols_t(1),
                                    1.0,
                                    false,
                                    Live::Cols(off),
                                    None,
                                );
                                // dS = P ⊙ (dP − D), with D = Σ_j P·dP of each row from the tile
                                // when it holds whole rows (one chunk), else dO·O, computed above.
                                for i in i0..i1 {
                                    let row = (i - i0) * n;
                                    let pr = &p[row..row + last(i) + 1];
                                    let (live, dead) = ds[row..row + n].split_at_mut(last(i) + 1);
                                    let dsum =
                                        if chunks > 1 { *dsum_base.get().add(hu * l.s + i) } else { T::dot(pr, live) };
                                    T::softmax_grad_row(live, pr, dsum);
                                    dead.fill(T::zero());
                                }
                                let dsm = Operand { ptr: dsb as *const T, rs: n as isize, cs: 1 };
                                let dsm_t = Operand { ptr: dsb as *const T, rs: 1, cs: n as isize };
                                let pm_t = Operand { ptr: pb as *const T, rs: 1, cs: n as isize };
                                // dQ (this chunk's terms) = scale·dS·K
                                // k's rows from the copy when the call made one, else in place.
                                let k = kv.rows(b, g, k0).unwrap_or_else(|| at(l.k, g * l.dh, k0));
                                let q = at(l.q, h * l.dh, i0);
                                block_product(
                                    (m, l.dh, n),
                                    dq_at(h * l.dh, i0),
                                    dsm,
                                    k,
                                    scale,
                                    false,
                                    Live::KTo(off),
                                    None,
                                );
                                // dK += scale·dSᵀ·Q and dV += Pᵀ·dO, through the `gemm` crate: its
                                // packing of the transposed tiles beat the unpacked products here.
                                gemm_raw((n, l.dh, m), dat(l.k, g * l.dh, k0), dsm_t, q, scale, true, false);
                                gemm_raw((n, l.dh, m), dat(l.v, g * l.dh, k0), pm_t, d_o, 1.0, true, false);
                            }
                        }
                    }
                })
            };
            if unit_copies {
                with_unit_cols(qkv, &l, (b, g), 2, |u| run(&|c| u.cols_t(c)))
            } else {
                run(&|c| kv.cols_t(c, b, g, k0))
            }
        })
    });
    if chunks > 1 {
        // dQ += the later chunks' terms, in chunk order, a row of every head at a time.
        let dq = SendPtr(dqkv.as_mut_ptr());
        (0..sh.tokens()).into_par_iter().with_min_len(64).for_each(|r| {
            let (b, i) = (r / l.s, r % l.s);
            // SAFETY: row r of dQ is this task's; the scratch is only read.
            unsafe {
                let dst = std::slice::from_raw_parts_mut(dq.get().add(r * qw), qw);
                for c in 1..=(i / KEY_CHUNK).min(chunks - 1) {
                    let src =
                        std::slice::from_raw_parts(part_base.get().add(partial_row(&sh, c, b, i) * qw) as *const T, qw);
                    // + 1·s: exactly + s.
                    T::axpy_row(dst, src, T::one());
                }
            }
        });
    }
}
