//! GEMM through the `gemm` crate. Work is split over output panels only and K is walked in a
//! fixed order, so results are identical for any thread count and wherever the panels are
//! cut (they are sized to each core's measured speed, [`super::core_speed`]).

use super::core_speed::{self, PanelTime};
use super::par::SendPtr;
use super::transpose::transpose;
use crate::scalar::Scalar;
use crate::view::{Mat, MatMut};
use gemm::Parallelism;
use panels::{Cuts, MAX_TIMED, panel_edge, panels};
use rayon::prelude::*;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

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
    if parallel && by_columns(m, n, k) {
        // SAFETY: forwarded from the caller.
        unsafe { gemm_by_columns((m, n, k), (c, c_ld), a, b, alpha, accumulate) };
        return;
    }
    GEMM_IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
    let threads = if parallel { rayon::current_num_threads() } else { 1 };
    let (along_m, panels) = panels((m, n, k), std::mem::size_of::<T>(), threads);
    if panels == 1 || !parallel {
        // One panel, or several (a large output over a long K) on the calling thread.
        let side = if along_m { m } else { n };
        for p in 0..panels {
            let (lo, hi) = (panel_edge(side, panels, p), panel_edge(side, panels, p + 1));
            // SAFETY: the panels are disjoint parts of `c` and of `a`'s rows or `b`'s columns.
            unsafe { gemm_panel((m, n, k), along_m, (lo, hi), (c, c_ld), a, b, alpha, accumulate) };
        }
    } else {
        // Panels taken by the threads (one each, or more for a large output over a long K),
        // each a serial GEMM: on the weight gradients of the low-rank
        // shapes (a side of r = 128, K = the tokens) 1.00–1.09× the `gemm` crate's own split,
        // elsewhere about the same (`examples/gemm_panels.rs`). The crate's K
        // blocking depends only on K and the cache sizes, so every element is summed exactly
        // as in one serial call, for any number of panels and wherever they are cut.
        let (side, short) = if along_m { (m, n) } else { (n, m) };
        // Panels by core speed only one a thread: more are balanced by the threads taking
        // them as they finish.
        let cuts = Cuts::new(side, short, panels, panels <= threads);
        let times: [Mutex<PanelTime>; MAX_TIMED] = std::array::from_fn(|_| Mutex::new(PanelTime::default()));
        let c = SendPtr(c);
        // Waiting for the last panel awake: the caller is usually the step's thread.
        super::pool::for_each_awake(panels, |p| {
            // Equal panels need neither the core nor the time.
            let core = if cuts.by_speed { core_speed::current_core() } else { 0 };
            let (lo, hi) = cuts.take(p, core_speed::speed(core));
            let start = cuts.by_speed.then(Instant::now);
            // SAFETY: the panels are disjoint parts of `c` and of `a`'s rows or `b`'s columns.
            unsafe { gemm_panel((m, n, k), along_m, (lo, hi), (c.get(), c_ld), a, b, alpha, accumulate) };
            if let (Some(start), Some(t)) = (start, times.get(p)) {
                let seconds = start.elapsed().as_secs_f64();
                *t.lock().unwrap_or_else(|e| e.into_inner()) = PanelTime { core, outputs: (hi - lo) * short, seconds };
            }
        });
        if cuts.by_speed {
            let times = times.map(|t| t.into_inner().unwrap_or_else(|e| e.into_inner()));
            core_speed::learn(&times[..panels.min(MAX_TIMED)]);
        }
    }
    GEMM_IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
}

/// Output rows at most, and K at least, of a product computed by [`gemm_by_columns`]: the
/// weight gradients of the r-sided factors (r × d and r × d_ff over the tokens). The `gemm`
/// crate turns a row-major output into a column-major one by computing Cᵀ, which makes such
/// an output's long side its rows and packs the large operand at every block of K; computed
/// column-major, that operand is read in place (the crate packs its right-hand operand only
/// for more than 2 × 64 rows, with its AVX-512 kernels). On an AMD EPYC (Zen 5, 2 threads)
/// 128ᵀ · 512 and 128ᵀ · 1376 over 2048 tokens ran 1.11–1.20× as fast this way (1.07–1.15× on
/// one thread), the transposing copies included; with the crate's AVX2 kernels (2 × 16 rows)
/// they ran slower (0.9–1.0×), so only the AVX-512 kernels take this way.
const BY_COLUMNS_MAX_ROWS: usize = 128;
const BY_COLUMNS_MIN_K: usize = 1024;

/// Whether [`gemm_raw`] computes an m×n output over K through [`gemm_by_columns`].
fn by_columns(m: usize, n: usize, k: usize) -> bool {
    short_wide_over_long_k(m, n, k) && super::machine::gemm_avx512()
}

/// At least 16 rows (one vector of the crate's kernels), so that both orientations take its
/// packed kernels rather than its row-vector ones.
fn short_wide_over_long_k(m: usize, n: usize, k: usize) -> bool {
    (16..=BY_COLUMNS_MAX_ROWS).contains(&m) && n > m && k >= BY_COLUMNS_MIN_K
}

thread_local! {
    /// [`gemm_by_columns`]'s column-major output, grown to the largest product and reused
    /// (steps allocate nothing after the first).
    static COLUMNS: std::cell::RefCell<Vec<f64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// [`gemm_raw`] through a column-major copy of `c` (Cᵀ, n × m row-major) in a per-thread
/// scratch: C's values are copied in first when accumulating, so the crate adds the products
/// onto them in the order it would onto C; the result is copied back. Every element is the
/// same sum in the same order as a direct call (the crate's K blocking depends on K alone),
/// so the bits are those of [`gemm_serial`] on the whole product.
///
/// # Safety
/// As [`gemm_raw`].
unsafe fn gemm_by_columns<T: Scalar>(
    (m, n, k): (usize, usize, usize),
    (c, c_ld): (*mut T, usize),
    a: Operand<T>,
    b: Operand<T>,
    alpha: f64,
    accumulate: bool,
) {
    // Taken out for the call, not borrowed across it: while this thread waits on the copies'
    // and the product's rayon tasks it may run another task that calls this function, which
    // then finds no buffer here and makes its own.
    let mut scratch = COLUMNS.with(|c| std::mem::take(&mut *c.borrow_mut()));
    let words = (m * n * std::mem::size_of::<T>()).div_ceil(8);
    if scratch.len() < words {
        scratch.resize(words, 0.0);
    }
    {
        // SAFETY: the f64 buffer holds at least m·n elements of T (size 4 or 8, alignment ≤ 8).
        let ct = unsafe { std::slice::from_raw_parts_mut(scratch.as_mut_ptr() as *mut T, m * n) };
        // The copies in halves for two threads: column halves of C going in, row halves out.
        let c = SendPtr(c);
        if accumulate {
            let copy_in = |dst: &mut [T], j0: usize| {
                let cols = dst.len() / m;
                // SAFETY: rows 0..m of c cover columns j0..j0 + cols ≤ n with stride c_ld; only read.
                let src = unsafe { std::slice::from_raw_parts(c.get().add(j0) as *const T, (m - 1) * c_ld + cols) };
                transpose(dst, m, src, c_ld, m, cols);
            };
            let (left, right) = ct.split_at_mut(n / 2 * m);
            rayon::join(|| copy_in(left, 0), || copy_in(right, n / 2));
        }
        let t = |o: Operand<T>| Operand { ptr: o.ptr, rs: o.cs, cs: o.rs };
        // SAFETY: the scratch covers n × m with row stride m and aliases neither operand.
        unsafe { gemm_raw((n, m, k), (ct.as_mut_ptr(), m), t(b), t(a), alpha, accumulate, true) };
        let ct = &*ct;
        [(0, m / 2), (m / 2, m)].par_iter().for_each(|&(i0, i1)| {
            if i1 > i0 {
                // SAFETY: rows i0..i1 of c are this task's (the halves are disjoint rows).
                let dst = unsafe { std::slice::from_raw_parts_mut(c.get().add(i0 * c_ld), (i1 - i0 - 1) * c_ld + n) };
                transpose(dst, c_ld, &ct[i0..], m, n, i1 - i0);
            }
        });
    }
    // The larger buffer stays for the next call.
    COLUMNS.with(|c| {
        let mut kept = c.borrow_mut();
        if kept.len() < scratch.len() {
            *kept = scratch;
        }
    });
}

/// Rows (`along_m`) or columns `lo..hi` of `c = alpha·a·b (+ c)`, one serial call.
///
/// # Safety
/// As [`gemm_raw`], and `lo..hi` lies within the side.
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_panel<T: Scalar>(
    (m, n, k): (usize, usize, usize),
    along_m: bool,
    (lo, hi): (usize, usize),
    (c, c_ld): (*mut T, usize),
    a: Operand<T>,
    b: Operand<T>,
    alpha: f64,
    accumulate: bool,
) {
    // SAFETY: forwarded from the caller; the panel is within the operands' shapes.
    unsafe {
        if along_m {
            let a = Operand { ptr: a.ptr.offset(lo as isize * a.rs), ..a };
            gemm_serial((hi - lo, n, k), c.add(lo * c_ld), c_ld, a, b, alpha, accumulate);
        } else {
            let b = Operand { ptr: b.ptr.offset(lo as isize * b.cs), ..b };
            gemm_serial((m, hi - lo, k), c.add(lo), c_ld, a, b, alpha, accumulate);
        }
    }
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

mod panels;
#[cfg(test)]
mod tests;
