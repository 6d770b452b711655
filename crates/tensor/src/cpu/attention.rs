//! Causal softmax attention with GQA, without the S × S probability matrix. q, k and v are
//! three row-major blocks of one buffer.
//!
//! Work units are (sequence, head, query block) in the forward and (sequence, kv head, key
//! chunk) in the backward, so that one long sequence with few heads (a micro-batch of one, a
//! tensor-parallel rank's share of the heads) still keeps every thread busy. Rows are
//! processed in blocks of [`block_rows`] queries that only touch keys up to the block's end,
//! which skips most of the masked upper triangle. A block's scores live in a per-thread tile;
//! the forward keeps each row's log-sum-exp, and the backward recomputes the block's
//! probabilities from it (FlashAttention's recompute), so the memory kept per layer is
//! O(S·h) rather than O(h·S²). Every sum runs in an order fixed by the shape, never by the
//! thread count.

use super::gemm::{Operand, gemm_raw};
use super::par::SendPtr;
use crate::args::AttentionBwd;
use crate::backend::AttnShape;
use crate::scalar::Scalar;
use crate::view::MatMut;
use rayon::prelude::*;
use std::cell::RefCell;
use std::sync::Mutex;

/// Query rows per block: 64, or 128 past 512 positions. Longer blocks pack each key tile for
/// more rows (the products' K is only d_h) but compute more of the masked triangle, which a
/// short sequence's few blocks feel. On an AVX-512 Xeon, 2 threads, 128 rows took 0.81–0.88×
/// the forward and 0.82–0.89× the backward time of 64 at seq 1024 to 4096, and 0.95–0.99× at
/// 256 and 512 (medians of 6–8 alternated pairs); 256 rows lost at 256 (1.2×).
fn block_rows(s: usize) -> usize {
    if s > 512 { MAX_BLOCK_ROWS } else { 64 }
}

const MAX_BLOCK_ROWS: usize = 128;

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

/// Buffers for the column-major copies of k and v, one per call in flight (in-process ranks
/// and tensor-parallel chunks call concurrently): a call takes one and gives it back, so the
/// memory follows the calls in flight, not the threads that ever made one.
static KV_COLS: Mutex<Vec<Vec<f64>>> = Mutex::new(Vec::new());

/// Runs `f` with column-major copies of k (`copies` = 1) or of k and v (2), for the products
/// that read them transposed as their right operand (q·kᵀ, dO·vᵀ). The `gemm` crate packs a
/// row-major operand read that way one element at a time, which took about a fifth of
/// attention's time (`perf`, AVX-512, at 4096 × 1 and 256 × 8); from a column-major copy it
/// packs whole rows, and sums in the same order. Copy c of sequence b and kv head g holds
/// element (i, j) (head dimension i, key j) at `((c·batch + b)·kv_heads + g)·d_h·S + i·S + j`.
fn with_kv_cols<T: Scalar, R>(qkv: &[T], l: &Layout, sh: &AttnShape, copies: usize, f: impl FnOnce(&[T]) -> R) -> R {
    let (per, units) = (l.dh * l.s, sh.batch * sh.kv_heads);
    let n = copies * units * per;
    let mut buf = KV_COLS.lock().unwrap_or_else(|e| e.into_inner()).pop().unwrap_or_default();
    if buf.len() < words::<T>(n) {
        buf.resize(words::<T>(n), 0.0);
    }
    // SAFETY: the f64 buffer holds at least n elements of T (size 4 or 8, alignment ≤ 8).
    let cols = unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr() as *mut T, n) };
    cols.par_chunks_mut(per).enumerate().for_each(|(u, dst)| {
        let (c, b, g) = (u / units, (u % units) / sh.kv_heads, u % sh.kv_heads);
        let (off, ld) = if c == 0 { l.k } else { l.v };
        let src = |j: usize| off + (b * l.s + j) * ld + g * l.dh;
        // 64 keys at a time, so their rows stay in L1 while each column is written.
        for j0 in (0..l.s).step_by(64) {
            let j1 = (j0 + 64).min(l.s);
            for i in 0..l.dh {
                for j in j0..j1 {
                    dst[i * l.s + j] = qkv[src(j) + i];
                }
            }
        }
    });
    let r = f(cols);
    KV_COLS.lock().unwrap_or_else(|e| e.into_inner()).push(buf);
    r
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
    with_kv_cols(qkv, &l, &sh, 1, |k_cols| {
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
                let (vp, vld) = at(l.v, g * l.dh, 0);
                let q = Operand { ptr: qp, rs: qld, cs: 1 };
                let kt =
                    Operand { ptr: k_cols[(b * sh.kv_heads + g) * l.dh * l.s..].as_ptr(), rs: l.s as isize, cs: 1 };
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
        })
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

/// Keys per chunk of the backward, whose work units are (sequence, kv head, key chunk): a
/// long sequence with few kv heads (a micro-batch of one, a tensor-parallel rank's heads)
/// still keeps many threads busy. A multiple of every [`block_rows`], so each query block
/// lies in one chunk's rows or after them. Sequences of at most this length are one chunk.
const KEY_CHUNK: usize = 512;

fn key_chunks(s: usize) -> usize {
    s.div_ceil(KEY_CHUNK)
}

/// Rows, over all sequences, of the dQ terms that key chunks `1..c` keep in the scratch (chunk
/// `c` ≥ 1 keeps query rows `c·KEY_CHUNK..S` of every sequence).
fn partial_rows_before(sh: &AttnShape, c: usize) -> usize {
    (1..c).map(|c| sh.seq - c * KEY_CHUNK).sum::<usize>() * sh.batch
}

/// Elements of the backward's scratch: the dQ terms of the key chunks after the first, added
/// to dQ in chunk order once every chunk is done (none for sequences of one chunk).
pub fn attention_bwd_scratch_len(sh: &AttnShape) -> usize {
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
    let l = Layout::new(&sh);
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
    reserve_tiles::<T>(block * l.s.min(KEY_CHUNK));
    with_kv_cols(qkv, &l, &sh, 2, |kv_cols| {
        (0..chunks * units).into_par_iter().for_each(|u| {
            // Chunk-major: the first chunks, which every query block reaches, are the costliest.
            let (c, unit) = (u / units, u % units);
            let (b, g) = (unit / sh.kv_heads, unit % sh.kv_heads);
            let (k0, k1) = (c * KEY_CHUNK, ((c + 1) * KEY_CHUNK).min(l.s));
            let row0 = b * l.s;
            let at = |(off, ld): (usize, usize), col: usize, r: usize| unsafe {
                Operand { ptr: base.get().add(off + (row0 + r) * ld + col) as *const T, rs: ld as isize, cs: 1 }
            };
            // Kᵀ and Vᵀ from key k0 on, from the column-major copies.
            let cols_t = |c: usize| Operand {
                ptr: kv_cols[((c * sh.batch + b) * sh.kv_heads + g) * l.dh * l.s + k0..].as_ptr(),
                rs: l.s as isize,
                cs: 1,
            };
            let dat = |(off, ld): (usize, usize), col: usize, r: usize| unsafe {
                (d_base.get().add(off + (row0 + r) * ld + col), ld)
            };
            // Where this chunk's dQ terms of query row i (≥ k0), head column `col`, go.
            let dq_at = |col: usize, i: usize| unsafe {
                if c == 0 {
                    dat(l.q, col, i)
                } else {
                    let r = partial_rows_before(&sh, c) + b * (l.s - k0) + (i - k0);
                    (part_base.get().add(r * qw + col), qw)
                }
            };
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
                            gemm_raw((m, n, l.dh), (pb, n), q, kt, scale, false, false);
                            // Row i sees keys k0..=i of the chunk.
                            let last = |i: usize| (i - k0).min(n - 1);
                            for i in i0..i1 {
                                probs_from_lse(&mut p[(i - i0) * n..(i - i0 + 1) * n], last(i), lse[hu * l.s + i]);
                            }
                            // dP = dO·Vᵀ
                            gemm_raw((m, n, l.dh), (dsb, n), d_o, cols_t(1), 1.0, false, false);
                            // D = Σ_j P·dP of each row: from the tile when it holds whole rows
                            // (one chunk), else dO·O, read for all of the block's rows before
                            // they are used.
                            let mut d = [T::zero(); MAX_BLOCK_ROWS];
                            if chunks > 1 {
                                for (i, d) in (i0..i1).zip(d.iter_mut()) {
                                    let r = row0 + i;
                                    let d_o = std::slice::from_raw_parts(do_base.get().add(r * do_ld + h * l.dh), l.dh);
                                    let o = std::slice::from_raw_parts(o_base.get().add(r * o_ld + h * l.dh), l.dh);
                                    *d = T::dot(d_o, o);
                                }
                            }
                            // dS = P ⊙ (dP − D)
                            for i in i0..i1 {
                                let row = (i - i0) * n;
                                let pr = &p[row..row + last(i) + 1];
                                let (live, dead) = ds[row..row + n].split_at_mut(last(i) + 1);
                                let dsum = if chunks > 1 { d[i - i0] } else { T::dot(pr, live) };
                                for (d, pv) in live.iter_mut().zip(pr) {
                                    *d = *pv * (*d - dsum);
                                }
                                dead.fill(T::zero());
                            }
                            let dsm = Operand { ptr: dsb as *const T, rs: n as isize, cs: 1 };
                            let dsm_t = Operand { ptr: dsb as *const T, rs: 1, cs: n as isize };
                            let pm_t = Operand { ptr: pb as *const T, rs: 1, cs: n as isize };
                            // dQ (this chunk's terms) = scale·dS·K
                            gemm_raw(
                                (m, l.dh, n),
                                dq_at(h * l.dh, i0),
                                dsm,
                                at(l.k, g * l.dh, k0),
                                scale,
                                false,
                                false,
                            );
                            // dK += scale·dSᵀ·Q
                            gemm_raw(
                                (n, l.dh, m),
                                dat(l.k, g * l.dh, k0),
                                dsm_t,
                                at(l.q, h * l.dh, i0),
                                scale,
                                true,
                                false,
                            );
                            // dV += Pᵀ·dO
                            gemm_raw((n, l.dh, m), dat(l.v, g * l.dh, k0), pm_t, d_o, 1.0, true, false);
                        }
                    }
                }
            });
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
                    let pr = partial_rows_before(&sh, c) + b * (l.s - c * KEY_CHUNK) + (i - c * KEY_CHUNK);
                    let src = std::slice::from_raw_parts(part_base.get().add(pr * qw) as *const T, qw);
                    for (d, s) in dst.iter_mut().zip(src) {
                        *d = *d + *s;
                    }
                }
            }
        });
    }
}
