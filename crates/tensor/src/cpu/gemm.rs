//! GEMM through the `gemm` crate. Work is split over output panels only and K is walked in a
//! fixed order, so results are identical for any thread count.

use super::par::SendPtr;
use crate::scalar::Scalar;
use crate::view::{Mat, MatMut};
use gemm::Parallelism;
use rayon::prelude::*;
use std::sync::atomic::{AtomicUsize, Ordering};

/// GEMM calls in progress. The `gemm` crate allocates its packing buffers inside each call;
/// allocation tests use this to tell those apart from the engine's own allocations.
pub static GEMM_IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// A GEMM operand in raw form: pointer, row stride, column stride.
#[derive(Clone, Copy)]
pub struct Operand<T> {
    pub ptr: *const T,
    pub rs: isize,
    pub cs: isize,
}
// SAFETY: an operand is only read, and `gemm_raw`'s caller guarantees nothing writes it
// during the call (the panel tasks share it).
unsafe impl<T> Send for Operand<T> {}
// SAFETY: as Send.
unsafe impl<T> Sync for Operand<T> {}

impl<T> Operand<T> {
    /// Operand for `op(v)` of a view.
    pub fn of(v: &Mat<Vec<T>>) -> Self {
        let ptr = v.buf[v.off..].as_ptr();
        if v.trans { Self { ptr, rs: 1, cs: v.ld as isize } } else { Self { ptr, rs: v.ld as isize, cs: 1 } }
    }
}

/// `c[m×n] = alpha·a[m×k]·b[k×n] (+ c)` on raw operands; `c` is a pointer and a row stride.
///
/// # Safety
/// Every operand must cover its shape with its strides, and `c` must not alias `a` or `b`.
pub unsafe fn gemm_raw<T: Scalar>(
    (m, n, k): (usize, usize, usize),
    (c, c_ld): (*mut T, usize),
    a: Operand<T>,
    b: Operand<T>,
    alpha: f64,
    accumulate: bool,
    parallel: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            for i in 0..m {
                // SAFETY: c covers m rows of n elements with stride c_ld.
                unsafe { std::slice::from_raw_parts_mut(c.add(i * c_ld), n).fill(T::zero()) };
            }
        }
        return;
    }
    GEMM_IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
    let threads = if parallel { rayon::current_num_threads() } else { 1 };
    let (along_m, panels) = panels(m, n, threads);
    if panels == 1 {
        // SAFETY: forwarded from the caller.
        unsafe { gemm_serial((m, n, k), c, c_ld, a, b, alpha, accumulate) };
    } else {
        // One panel per thread, each a serial GEMM: on the weight gradients of the low-rank
        // shapes (a side of r = 128, K = the tokens) 1.00–1.09× the `gemm` crate's own split,
        // elsewhere about the same (`examples/gemm_panels.rs`). The crate's K
        // blocking depends only on K and the cache sizes, so every element is summed exactly
        // as in one serial call, for any number of panels.
        let c = SendPtr(c);
        (0..panels).into_par_iter().for_each(|p| {
            let c = c.get();
            let side = if along_m { m } else { n };
            let (lo, hi) = (panel_edge(side, panels, p), panel_edge(side, panels, p + 1));
            // SAFETY: the panels are disjoint parts of `c` and of `a`'s rows or `b`'s columns.
            unsafe {
                if along_m {
                    let a = Operand { ptr: a.ptr.offset(lo as isize * a.rs), ..a };
                    gemm_serial((hi - lo, n, k), c.add(lo * c_ld), c_ld, a, b, alpha, accumulate);
                } else {
                    let b = Operand { ptr: b.ptr.offset(lo as isize * b.cs), ..b };
                    gemm_serial((m, hi - lo, k), c.add(lo), c_ld, a, b, alpha, accumulate);
                }
            }
        });
    }
    GEMM_IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
}

/// Rows or columns a panel has at least (a few of the `gemm` crate's micro-tiles).
const PANEL_MIN: usize = 32;

/// Outputs of a product the `gemm` crate computes with other kernels (its horizontal ones,
/// and past them gemv for a single row or column), which sum in another order than its packed
/// ones.
const SMALL: usize = 16 * 16;

/// How an m×n output is cut for `threads` threads: (along rows?, panels), along its longer
/// side (measured, `examples/gemm_panels.rs`: the shorter side lost up to 5 % on 128 × 1376,
/// the longer one nowhere more than 2 %). No panel is cut to SMALL outputs or fewer, so each
/// takes the kernels the whole product would: the bits do not depend on the thread count.
fn panels(m: usize, n: usize, threads: usize) -> (bool, usize) {
    let along_m = m >= n;
    let (long, short) = if along_m { (m, n) } else { (n, m) };
    let mut p = threads.min(long / PANEL_MIN).max(1);
    // Panels start on multiples of 16, so each is at least long / p − 16 long.
    while p > 1 && (long / p).saturating_sub(16) * short <= SMALL {
        p -= 1;
    }
    (along_m, p)
}

/// Where panel `p` of `panels` starts along a side of `len`, on a multiple of 16 (whole
/// micro-tiles) except at the end.
fn panel_edge(len: usize, panels: usize, p: usize) -> usize {
    if p >= panels { len } else { (len * p / panels) / 16 * 16 }
}

/// One `gemm` crate call on this thread.
///
/// # Safety
/// As [`gemm_raw`].
unsafe fn gemm_serial<T: Scalar>(
    (m, n, k): (usize, usize, usize),
    c: *mut T,
    c_ld: usize,
    a: Operand<T>,
    b: Operand<T>,
    alpha: f64,
    accumulate: bool,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c,
            1,
            c_ld as isize,
            accumulate,
            a.ptr,
            a.cs,
            a.rs,
            b.ptr,
            b.cs,
            b.rs,
            T::one(),
            T::of(alpha),
            false,
            false,
            false,
            Parallelism::None,
        );
    }
}

/// `c = alpha·op(a)·op(b) (+ c)` on views, using the rayon pool.
pub fn gemm<T: Scalar>(c: MatMut<Vec<T>>, a: Mat<Vec<T>>, b: Mat<Vec<T>>, alpha: f64, accumulate: bool) {
    let (m, k) = a.op_shape();
    let (k2, n) = b.op_shape();
    assert_eq!(k, k2, "gemm: inner dimensions {m}×{k} · {k2}×{n}");
    assert_eq!((c.rows, c.cols), (m, n), "gemm: output {}×{} for {m}×{n}", c.rows, c.cols);
    if m == 0 || n == 0 {
        return;
    }
    let c_ptr = c.buf[c.off..].as_mut_ptr();
    // SAFETY: views are bounds-checked on construction; `c` is a unique borrow.
    unsafe { gemm_raw((m, n, k), (c_ptr, c.ld), Operand::of(&a), Operand::of(&b), alpha, accumulate, true) }
}
