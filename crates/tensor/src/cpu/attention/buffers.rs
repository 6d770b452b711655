//! Per-call and per-thread buffers of CPU attention: the score tiles each thread works in,
//! and the column-major copies of k and v.

use super::QkvLayout;
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
    /// Per-thread column-major copies of one work unit's k and v ([`with_unit_cols`]), grown
    /// and reused as the tiles are.
    static UNIT_COLS: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
}

/// f64 words holding `n` elements of `T` (f64 storage holds any Scalar with its alignment).
fn words<T: Scalar>(n: usize) -> usize {
    (n * std::mem::size_of::<T>()).div_ceil(8)
}

/// Grow this thread's tiles to `words`, and its unit copies to `cols`; whether either had
/// to grow. A size of 0 leaves that buffer unborrowed: the tiles are grown inside
/// [`with_unit_cols`].
fn grow(words: usize, cols: usize) -> bool {
    let short = |v: &mut Vec<f64>, n: usize| {
        let short = v.len() < n;
        if short {
            v.resize(n, 0.0);
        }
        short
    };
    let tiles = words > 0
        && TILES.with(|t| {
            let (a, b) = &mut *t.borrow_mut();
            short(a, words) | short(b, words)
        });
    let copies = cols > 0 && UNIT_COLS.with(|c| short(&mut c.borrow_mut(), cols));
    tiles | copies
}

/// Give the calling thread and every thread of the current rayon pool tiles of `n` elements
/// of `T`, and unit copies of `cols`, before a parallel loop, so no worker grows them in a
/// later step (work stealing decides which threads a step's blocks reach). The broadcast runs
/// only when the caller's were too small: once per size.
pub(super) fn reserve_tiles<T: Scalar>(n: usize, cols: usize) {
    let (w, c) = (words::<T>(n), words::<T>(cols));
    if grow(w, c) {
        rayon::broadcast(|_| grow(w, c));
    }
}

/// Run `f` with two tiles of at least `n` elements of `T` each.
pub(super) fn with_tiles<T: Scalar, R>(n: usize, f: impl FnOnce(&mut [T], &mut [T]) -> R) -> R {
    grow(words::<T>(n), 0);
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

/// Buffers for the copies of k and v, one per call in flight (in-process ranks and
/// tensor-parallel chunks call concurrently): a call takes one and gives it back, so the memory
/// follows the calls in flight, not the threads that ever made one.
static KV_COPIES: Mutex<Vec<Vec<f64>>> = Mutex::new(Vec::new());

/// The row stride of the column-major copies: past one key chunk S + 16, one cache line past
/// S, else S. At S a multiple of 1024 a copy's rows lie a multiple of 4 KiB apart, so a
/// product's panel of them (64 rows of 4 lines) fell on 4 of the L1's 64 sets and evicted
/// itself; one line more spreads the rows over all the sets. Within one key chunk the padding
/// cost more than it saved, so such a sequence keeps the plain stride (measurements:
/// docs/PERFORMANCE.md, "CPU attention's buffers"). The columns past S are never read.
fn cols_ld(s: usize) -> usize {
    if s > super::KEY_CHUNK { s + 16 } else { s }
}

/// Whether a call copies the rows of the k or v head its products read as their right operand
/// (P·v in the forward, dS·k in the backward) into one contiguous block per sequence and kv
/// head: past one key chunk. In place those rows lie a q|k|v row apart (2 KiB with 8 kv heads
/// of 64), so a panel of 128 of them fell on 8 of the L1's sets. Within one key chunk the copy
/// costs more than it saves (docs/PERFORMANCE.md, "CPU attention's buffers").
pub(super) fn copies_rows(s: usize) -> bool {
    s > super::KEY_CHUNK
}

/// Where sequence `b`'s rows of kv head `g` start in the q|k|v block at `(off, ld)`.
fn head_start(l: &QkvLayout, (off, ld): (usize, usize), (b, g): (usize, usize)) -> usize {
    off + b * l.s * ld + g * l.dh
}

/// Those rows (S of them, d_h wide) transposed into `dst`, at row stride `ld_dst`.
fn transpose_head<T: Scalar>(
    dst: &mut [T],
    ld_dst: usize,
    qkv: &[T],
    l: &QkvLayout,
    block: (usize, usize),
    unit: (usize, usize),
) {
    let (first, ld) = (head_start(l, block, unit), block.1);
    transpose(dst, ld_dst, &qkv[first..first + (l.s - 1) * ld + l.dh], ld, l.s, l.dh);
}

/// Which head's rows a call copies ([`copies_rows`]).
#[derive(Clone, Copy)]
pub(super) enum Rows {
    K,
    V,
}

/// The copies one call made of k and v, read as right operands.
pub(super) struct KvCopies<'a, T> {
    buf: &'a [T],
    s: usize,
    dh: usize,
    kv_heads: usize,
    /// Where the column-major copies end (the row copy, if any, follows).
    cols_end: usize,
    units: usize,
    rows: bool,
}

impl<T> KvCopies<'_, T> {
    /// Kᵀ (`c` = 0) or Vᵀ (1) of sequence `b` and kv head `g`, from key `k0` on.
    pub(super) fn cols_t(&self, c: usize, b: usize, g: usize, k0: usize) -> Operand<T> {
        let at = ((c * self.units) + b * self.kv_heads + g) * self.dh * cols_ld(self.s) + k0;
        Operand { ptr: self.buf[at..].as_ptr(), rs: cols_ld(self.s) as isize, cs: 1 }
    }

    /// The copied rows (k's or v's, as the call asked) of sequence `b` and kv head `g` from
    /// row `k0` on; `None` when the call copied none.
    pub(super) fn rows(&self, b: usize, g: usize, k0: usize) -> Option<Operand<T>> {
        let at = self.cols_end + ((b * self.kv_heads + g) * self.s + k0) * self.dh;
        self.rows.then(|| Operand { ptr: self.buf[at..].as_ptr(), rs: self.dh as isize, cs: 1 })
    }
}

/// Runs `f` with column-major copies of k (`cols` = 1) or of k and v (2), for the products
/// that read them transposed as their right operand (q·kᵀ, dO·vᵀ), and with the rows of k or v
/// in one block per sequence and kv head when `rows` names them (see [`copies_rows`]). The
/// `gemm` crate packs a row-major operand read transposed one element at a time, a large share
/// of attention's time; from a column-major copy it packs whole rows, and sums in the same
/// order. The column-major copies go through [`transpose`]'s SIMD blocks rather than element
/// by element (docs/PERFORMANCE.md, "CPU attention's buffers"). Copy c of sequence b and kv head g holds element (i, j) (head dimension i, key j)
/// at `((c·batch + b)·kv_heads + g)·d_h·L + i·L + j`, where L = [`cols_ld`]`(S)`; the row copy
/// follows them, row j of (b, g) at `((b·kv_heads + g)·S + j)·d_h`. No value changes.
pub(super) fn with_kv_copies<T: Scalar, R>(
    qkv: &[T],
    l: &QkvLayout,
    sh: &AttnShape,
    cols: usize,
    rows: Option<Rows>,
    f: impl FnOnce(&KvCopies<T>) -> R,
) -> R {
    let units = sh.batch * sh.kv_heads;
    let (per_cols, per_rows) = (l.dh * cols_ld(l.s), l.s * l.dh);
    let cols_end = cols * units * per_cols;
    let n = cols_end + if rows.is_some() { units * per_rows } else { 0 };
    let mut buf = KV_COPIES.lock().unwrap_or_else(|e| e.into_inner()).pop().unwrap_or_default();
    if buf.len() < words::<T>(n) {
        buf.resize(words::<T>(n), 0.0);
    }
    // SAFETY: the f64 buffer holds at least n elements of T (size 4 or 8, alignment ≤ 8).
    let all = unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr() as *mut T, n) };
    let (col_copies, row_copy) = all.split_at_mut(cols_end);
    // Unit u: sequence b and kv head g.
    let unit = |u: usize| (u / sh.kv_heads, u % sh.kv_heads);
    col_copies.par_chunks_mut(per_cols).enumerate().for_each(|(u, dst)| {
        transpose_head(dst, cols_ld(l.s), qkv, l, if u < units { l.k } else { l.v }, unit(u % units));
    });
    if let Some(which) = rows {
        let src = match which {
            Rows::K => l.k,
            Rows::V => l.v,
        };
        row_copy.par_chunks_mut(per_rows).enumerate().for_each(|(u, dst)| {
            let (first, ld) = (head_start(l, src, unit(u)), src.1);
            for (j, row) in dst.chunks_exact_mut(l.dh).enumerate() {
                row.copy_from_slice(&qkv[first + j * ld..first + j * ld + l.dh]);
            }
        });
    }
    let copies = KvCopies { buf: all, s: l.s, dh: l.dh, kv_heads: sh.kv_heads, cols_end, units, rows: rows.is_some() };
    let r = f(&copies);
    KV_COPIES.lock().unwrap_or_else(|e| e.into_inner()).push(buf);
    r
}

/// Column-major copies of k and v of one (sequence, kv head), in the calling thread's buffer.
pub(super) struct UnitCols<T> {
    ptr: *const T,
    s: usize,
    dh: usize,
}

impl<T> UnitCols<T> {
    /// Kᵀ (`c` = 0) or Vᵀ (1): d_h rows of S keys.
    pub(super) fn cols_t(&self, c: usize) -> Operand<T> {
        // SAFETY: the buffer holds both copies (`with_unit_cols`).
        Operand { ptr: unsafe { self.ptr.add(c * self.dh * self.s) }, rs: self.s as isize, cs: 1 }
    }
}

/// Elements of one unit's `cols` copies ([`with_unit_cols`]).
pub(super) fn unit_cols_len(l: &QkvLayout, cols: usize) -> usize {
    cols * l.dh * l.s
}

/// Runs `f` with column-major copies of k (`cols` = 1) or of k and v (2) of sequence `b` and
/// kv head `g` (row stride S), made by the calling thread into its own buffer right before
/// its products read them. At one key chunk the backward's units, and the forward's when it
/// runs (sequence, kv head) units whole, read a unit's copies in that unit alone: made there,
/// they are read back from L1 and L2, where copies made for every unit before the units run
/// ([`with_kv_copies`], 8 MiB at 256 × 8 with 8 kv heads) come back from L3
/// (docs/PERFORMANCE.md, "CPU attention's buffers"). The same entries as the call-wide copies.
pub(super) fn with_unit_cols<T: Scalar, R>(
    qkv: &[T],
    l: &QkvLayout,
    (b, g): (usize, usize),
    cols: usize,
    f: impl FnOnce(&UnitCols<T>) -> R,
) -> R {
    let n = unit_cols_len(l, cols);
    grow(0, words::<T>(n));
    UNIT_COLS.with(|c| {
        let mut c = c.borrow_mut();
        // SAFETY: the f64 buffer holds at least n elements of T (size 4 or 8, alignment ≤ 8).
        let all = unsafe { std::slice::from_raw_parts_mut(c.as_mut_ptr() as *mut T, n) };
        for (block, dst) in [l.k, l.v].into_iter().zip(all.chunks_exact_mut(l.dh * l.s)) {
            transpose_head(dst, l.s, qkv, l, block, (b, g));
        }
        f(&UnitCols { ptr: all.as_ptr(), s: l.s, dh: l.dh })
    })
}
