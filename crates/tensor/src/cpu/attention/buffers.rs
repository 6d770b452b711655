//! Per-call and per-thread buffers of CPU attention: the score tiles each thread works in,
//! and the column-major copies of k and v.

use super::Layout;
use crate::backend::AttnShape;
use crate::cpu::gemm::Operand;
use crate::cpu::transpose::transpose;
use crate::scalar::Scalar;
use rayon::prelude::*;
use std::cell::RefCell;
use std::sync::Mutex;

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
pub(super) fn reserve_tiles<T: Scalar>(n: usize) {
    let w = words::<T>(n);
    if grow(w) {
        rayon::broadcast(|_| grow(w));
    }
}

/// Run `f` with two tiles of at least `n` elements of `T` each.
pub(super) fn with_tiles<T: Scalar, R>(n: usize, f: impl FnOnce(&mut [T], &mut [T]) -> R) -> R {
    grow(words::<T>(n));
    TILES.with(|t| {
        let (a, b) = &mut *t.borrow_mut();
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

/// The row stride of the column-major copies: S + 16, one cache line past S. At S a multiple
/// of 1024 a copy's rows lie a multiple of 4 KiB apart, so a product's panel of them (64 rows
/// of 4 lines) fell on 4 of the L1's 64 sets and evicted itself; one line more spreads the rows
/// over all the sets. On the 2-vCPU Xeon (`attention_speed 2 3 4096 1 8`, 14 pairs alternated
/// in both orders) the forward took 0.93× the time and the backward 0.95×; at 2048 × 1, 0.94×
/// and 0.96× (10 pairs); at 256 × 8 1.00× and 1.01× (16 pairs). The columns past S are never
/// read.
fn cols_ld(s: usize) -> usize {
    s + 16
}

/// Runs `f` with column-major copies of k (`copies` = 1) or of k and v (2), for the products
/// that read them transposed as their right operand (q·kᵀ, dO·vᵀ). The `gemm` crate packs a
/// row-major operand read that way one element at a time, which took about a fifth of
/// attention's time (`perf`, AVX-512, at 4096 × 1 and 256 × 8); from a column-major copy it
/// packs whole rows, and sums in the same order. The copies go through [`transpose`]'s SIMD
/// blocks (element by element they took 13 % of attention at 256 × 8). Copy c of sequence b
/// and kv head g holds element (i, j) (head dimension i, key j) at
/// `((c·batch + b)·kv_heads + g)·d_h·L + i·L + j`, where L = [`cols_ld`]`(S)`.
pub(super) fn with_kv_cols<T: Scalar, R>(
    qkv: &[T],
    l: &Layout,
    sh: &AttnShape,
    copies: usize,
    f: impl FnOnce(&[T]) -> R,
) -> R {
    let (per, units) = (l.dh * cols_ld(l.s), sh.batch * sh.kv_heads);
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
        let first = off + b * l.s * ld + g * l.dh;
        transpose(dst, cols_ld(l.s), &qkv[first..first + (l.s - 1) * ld + l.dh], ld, l.s, l.dh);
    });
    let r = f(cols);
    KV_COLS.lock().unwrap_or_else(|e| e.into_inner()).push(buf);
    r
}

/// Kᵀ (`c` = 0) or Vᵀ (1) of sequence `b` and kv head `g`, from key `k0` on, as a right
/// operand read from the copies `with_kv_cols` made.
pub(super) fn kv_cols_t<T>(
    cols: &[T],
    l: &Layout,
    sh: &AttnShape,
    c: usize,
    b: usize,
    g: usize,
    k0: usize,
) -> Operand<T> {
    let at = ((c * sh.batch + b) * sh.kv_heads + g) * l.dh * cols_ld(l.s) + k0;
    Operand { ptr: cols[at..].as_ptr(), rs: cols_ld(l.s) as isize, cs: 1 }
}
