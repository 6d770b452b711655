//! The forward: units of (sequence, head, query block), or of (sequence, kv head) run whole
//! when a sequence is one key chunk and they are enough for the threads; each row's
//! log-sum-exp kept. A block
//! goes over its keys in chunks of [`KEY_CHUNK`] with an online softmax (each row's running
//! max and sum; the output so far rescaled when the max grows), so its score tile holds one
//! chunk's columns (at seq 4096, 256 KiB rather than 2 MiB a thread).

use super::buffers::{Rows, copies_rows, reserve_tiles, unit_cols_len, with_kv_copies, with_tiles, with_unit_cols};
use super::tile::{Live, block_product};
use super::{KEY_CHUNK, MAX_BLOCK_ROWS, QkvLayout, block_rows, check};
use crate::backend::AttnShape;
use crate::cpu::gemm::Operand;
use crate::cpu::par::SendPtr;
use crate::scalar::Scalar;
use crate::view::MatMut;
use rayon::prelude::*;

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
    let l = QkvLayout::new(&sh);
    let scale = 1.0 / (sh.head_dim as f64).sqrt();
    let base = SendPtr(qkv.as_ptr() as *mut T);
    let o_ld = out.ld;
    let o_base = SendPtr(out.buf[out.off..].as_mut_ptr());
    let lse_base = SendPtr(lse.as_mut_ptr());
    let block = block_rows(l.s);
    let blocks = l.s.div_ceil(block);
    let v_rows = copies_rows(l.s).then_some(Rows::V);
    // With enough (sequence, kv head) units for the threads, a sequence of one key chunk runs
    // them whole and copies each one's kᵀ in the unit (`with_unit_cols`); otherwise units
    // are (sequence, head, query block) over copies made for the whole call.
    let unit_copies = l.s <= KEY_CHUNK && sh.batch * sh.kv_heads >= 4 * rayon::current_num_threads();
    reserve_tiles::<T>(block * l.s.min(KEY_CHUNK), if unit_copies { unit_cols_len(&l, 1) } else { 0 });
    with_kv_copies(qkv, &l, &sh, if unit_copies { 0 } else { 1 }, v_rows, |kv| {
        // Query block i0 of head h of sequence b, with `kt(k0)` kᵀ from key k0 on.
        let run = |b: usize, h: usize, i0: usize, kt: &dyn Fn(usize) -> Operand<T>| {
            let unit = b * sh.heads + h;
            let i1 = (i0 + block).min(l.s);
            let g = h / l.group;
            let row0 = b * l.s;
            let at = |(off, ld): (usize, usize), col: usize, r: usize| unsafe {
                (base.get().add(off + (row0 + r) * ld + col) as *const T, ld as isize)
            };
            with_tiles::<T, _>(block * i1.min(KEY_CHUNK), |p, _| {
                let (qp, qld) = at(l.q, h * l.dh, i0);
                let q = Operand { ptr: qp, rs: qld, cs: 1 };
                let rows = i1 - i0;
                // Each row's running max and sum of numerators over the key chunks so far.
                let mut max = [T::neg_infinity(); MAX_BLOCK_ROWS];
                let mut sum = [T::zero(); MAX_BLOCK_ROWS];
                // SAFETY (this block): `o` is unit (b, h, block)'s rows of its head's output
                // columns, which it alone writes.
                let o = unsafe { o_base.get().add((row0 + i0) * o_ld + h * l.dh) };
                let o_row = |r: usize| unsafe { std::slice::from_raw_parts_mut(o.add(r * o_ld), l.dh) };
                for k0 in (0..i1).step_by(KEY_CHUNK) {
                    // Keys k0..k1 of this chunk; every row sees at least key k0 (k0 ≤ i0).
                    let k1 = (k0 + KEY_CHUNK).min(i1);
                    let n = k1 - k0;
                    let kt = kt(k0);
                    // v's rows from the copy when the call made one, else in place.
                    let v = kv.rows(b, g, k0).unwrap_or_else(|| {
                        let (ptr, rs) = at(l.v, g * l.dh, k0);
                        Operand { ptr, rs, cs: 1 }
                    });
                    // SAFETY: unit (b, h, block) owns its rows of `lse` and of its head's
                    // output columns; the tile is this thread's.
                    unsafe {
                        let pb = p.as_mut_ptr();
                        // Query i0 + r sees key k0 + j for j ≤ r + i0 − k0.
                        let off = i0 as isize - k0 as isize;
                        // With each row's largest live score of the chunk.
                        let mut top = [T::neg_infinity(); MAX_BLOCK_ROWS];
                        let cols = Live::Cols(off);
                        block_product((rows, n, l.dh), (pb, n), q, kt, scale, false, cols, Some(&mut top[..rows]));
                        for r in 0..rows {
                            let row = &mut p[r * n..(r + 1) * n];
                            let live = (i0 + r - k0).min(n - 1);
                            let m = top[r].max(max[r]);
                            let s = exp_causal(row, live, m);
                            // Earlier chunks' sum and output, rescaled to the new max (a
                            // first chunk has none: its product overwrites the output).
                            if k0 > 0 {
                                let f = (max[r] - m).exp_fast();
                                sum[r] = sum[r] * f + s;
                                T::scale_row(o_row(r), f);
                            } else {
                                sum[r] = s;
                            }
                            max[r] = m;
                        }
                        let pr = Operand { ptr: pb as *const T, rs: n as isize, cs: 1 };
                        block_product((rows, l.dh, n), (o, o_ld), pr, v, 1.0, k0 > 0, Live::KTo(off), None);
                    }
                }
                // Normalised here, d_h values a row, rather than each exponential before the
                // products (a pass over the tile: 4 % of the forward at 4096).
                for r in 0..rows {
                    let inv = T::one() / sum[r];
                    T::scale_row(o_row(r), inv);
                    // SAFETY: row (b, h, i0 + r) of `lse` is this unit's.
                    unsafe { *lse_base.get().add(unit * l.s + i0 + r) = max[r] + sum[r].ln() };
                }
            });
        };
        if unit_copies {
            (0..sh.batch * sh.kv_heads).into_par_iter().for_each(|u| {
                let (b, g) = (u / sh.kv_heads, u % sh.kv_heads);
                with_unit_cols(qkv, &l, (b, g), 1, |c| {
                    for h in g * l.group..(g + 1) * l.group {
                        for i0 in (0..l.s).step_by(block) {
                            run(b, h, i0, &|_| c.cols_t(0));
                        }
                    }
                })
            })
        } else {
            (0..sh.batch * sh.heads * blocks).into_par_iter().for_each(|u| {
                // The costliest blocks (the last rows, which see the most keys) first.
                let (unit, i0) = (u / blocks, (blocks - 1 - u % blocks) * block);
                let (b, h) = (unit / sh.heads, unit % sh.heads);
                run(b, h, i0, &|k0| kv.cols_t(0, b, h / l.group, k0))
            })
        }
    });
}

/// The softmax's numerators e^(r − m) of `r[0..=live]`, zeros after, where m is at least
/// their max (the running max over this and earlier key chunks); returns the numerators' sum.
#[inline]
fn exp_causal<T: Scalar>(r: &mut [T], live: usize, m: T) -> T {
    T::exp_shifted_live(r, live + 1, m)
}
