//! GEMM through the `gemm` crate. Work is split over output panels only and K is walked in a
//! fixed order, so results are identical for any thread count and wherever the panels are
//! cut (they are sized to each core's measured speed, [`super::core_speed`]).

use super::core_speed::{self, PanelTime};
use super::par::SendPtr;
use super::transpose::transpose;
use crate::scalar::Scalar;
use crate::view::{Mat, MatMut};
use gemm::Parallelism;
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

/// Rows or columns a panel has at least (a few of the `gemm` crate's micro-tiles).
const PANEL_MIN: usize = 32;

/// Outputs of a product the `gemm` crate computes with other kernels (its horizontal ones,
/// and past them gemv for a single row or column), which sum in another order than its packed
/// ones.
const SMALL: usize = 16 * 16;

/// A panel's output at most, in bytes, when K spans more than one of the `gemm` crate's K
/// blocks (it takes at least [`CRATE_MIN_KC`] at a time): the crate reads and writes a
/// panel's whole output once per K block, and a smaller panel stays in the caches between
/// blocks. On an AMD EPYC (Zen 5, 2 threads) the LM head's weight gradient, 8192 × 512 over
/// 2048 tokens, ran 1.05–1.10× as fast in 8 panels of 2 MiB as in 2 of 8 MiB, and 32000 × 512
/// 1.11× in 32; the step's other products were no faster in more panels (0.92–1.02×).
const PANEL_OUTPUT_BYTES: usize = 2 << 20;

/// The least K the `gemm` crate takes in one block (its K blocking: at least 512, at most K).
const CRATE_MIN_KC: usize = 512;

/// How an m×n output of elements of `elem` bytes is cut for `threads` threads: (along rows?,
/// panels), along its longer side (measured, `examples/gemm_panels.rs`: the shorter side lost
/// up to 5 % on 128 × 1376, the longer one nowhere more than 2 %); one panel a thread, or more
/// (a multiple of the threads) where a K of several blocks would leave a panel's output over
/// [`PANEL_OUTPUT_BYTES`]. No panel is cut to SMALL outputs or fewer, so each takes the
/// kernels the whole product would, and the K blocking depends on K alone: the bits do not
/// depend on the thread count or the panels.
fn panels((m, n, k): (usize, usize, usize), elem: usize, threads: usize) -> (bool, usize) {
    let along_m = m >= n;
    let (long, short) = if along_m { (m, n) } else { (n, m) };
    let mut p = threads.min(long / PANEL_MIN).max(1);
    if k > CRATE_MIN_KC {
        let by_size = (m * n * elem).div_ceil(PANEL_OUTPUT_BYTES).next_multiple_of(threads);
        p = p.max(by_size.min(long / PANEL_MIN));
    }
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

/// Panels whose times a call keeps for [`core_speed::learn`] (a pool of more threads cuts
/// its products by core speed all the same, learning from its first panels).
const MAX_TIMED: usize = 64;

/// Where a call's panels are cut. Large enough panels are cut as they start: each takes a
/// share of the side in proportion to its core's learned speed (a slower core a narrower
/// panel, so both finish together), the last one what is left; each is at least `min` long
/// and starts on a multiple of 16. Otherwise, or with speed balancing off, equal panels
/// ([`panel_edge`]).
struct Cuts {
    side: usize,
    panels: usize,
    min: usize,
    by_speed: bool,
    /// Panels cut so far, and where the next one starts.
    next: Mutex<(usize, usize)>,
}

impl Cuts {
    fn new(side: usize, short: usize, panels: usize, balance: bool) -> Self {
        // Half an equal share, on a multiple of 16: the least a core gets at the speed bounds
        // (0.75 / (0.75 + 1.33) of two panels is 36 %), with room to round.
        let min = side / panels / 2 / 16 * 16;
        let by_speed = balance && core_speed::enabled() && min >= PANEL_MIN && min * short > SMALL;
        Self { side, panels, min, by_speed, next: Mutex::new((0, 0)) }
    }

    /// The rows or columns `lo..hi` of panel `p`, started on a core of speed `speed`.
    fn take(&self, p: usize, speed: f64) -> (usize, usize) {
        if !self.by_speed {
            return (panel_edge(self.side, self.panels, p), panel_edge(self.side, self.panels, p + 1));
        }
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        let (taken, lo) = *next;
        let after = self.panels - taken - 1;
        let hi = if after == 0 {
            self.side
        } else {
            let share = (self.side as f64 * speed / self.panels as f64).round() as usize;
            // Leave every later panel its minimum.
            let most = (self.side - after * self.min) / 16 * 16;
            ((lo + share) / 16 * 16).clamp(lo + self.min, most)
        };
        *next = (taken + 1, hi);
        (lo, hi)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A product's operands, `a` read transposed when `ta` (a weight gradient's layout), and
    /// its output before the call.
    struct Product {
        mnk: (usize, usize, usize),
        ta: bool,
        a: Vec<f32>,
        b: Vec<f32>,
        c0: Vec<f32>,
    }

    impl Product {
        fn new((m, n, k): (usize, usize, usize), ta: bool) -> Self {
            let fill = |len: usize, seed: usize| -> Vec<f32> {
                (0..len).map(|i| (((i * 7919 + seed * 104729) % 2003) as f32) * 1e-3 - 1.0).collect()
            };
            Self { mnk: (m, n, k), ta, a: fill(m * k, 1), b: fill(k * n, 2), c0: fill(m * n, 3) }
        }

        fn a_op(&self) -> Operand<f32> {
            let (m, _, k) = self.mnk;
            let (rs, cs) = if self.ta { (1, m as isize) } else { (k as isize, 1) };
            Operand { ptr: self.a.as_ptr(), rs, cs }
        }

        fn b_op(&self) -> Operand<f32> {
            Operand { ptr: self.b.as_ptr(), rs: self.mnk.1 as isize, cs: 1 }
        }

        /// The output of one serial call on the whole product (alpha 0.7): the bits every
        /// other way of computing it must give.
        fn one_call(&self, acc: bool) -> Vec<f32> {
            let mut c = self.c0.clone();
            // SAFETY: the operands cover their shapes with these strides.
            unsafe { gemm_serial(self.mnk, c.as_mut_ptr(), self.mnk.1, self.a_op(), self.b_op(), 0.7, acc) };
            c
        }
    }

    /// Elements whose bits differ.
    fn differing(c: &[f32], whole: &[f32]) -> usize {
        c.iter().zip(whole).filter(|(x, y)| x.to_bits() != y.to_bits()).count()
    }

    #[test]
    fn panels_cut_anywhere_on_16_give_the_bits_of_one_call() {
        let cases = [
            ((128, 512, 768), true, true),
            ((512, 128, 640), true, true),
            ((640, 96, 128), false, false),
            ((336, 200, 72), false, false),
        ];
        for ((m, n, k), ta, acc) in cases {
            let p = Product::new((m, n, k), ta);
            let whole = p.one_call(acc);
            let along_m = m >= n;
            let side = if along_m { m } else { n };
            // Two panels cut at every multiple of 16 leaving each at least 32, and three at a
            // spread of pairs.
            let mut cut_lists: Vec<Vec<usize>> = (2..side / 16 - 1).map(|i| vec![0, i * 16, side]).collect();
            cut_lists.extend((2..side / 16 - 4).step_by(3).map(|i| vec![0, i * 16, (i + 2) * 16, side]));
            for cuts in cut_lists {
                let mut c = p.c0.clone();
                for w in cuts.windows(2) {
                    // SAFETY: the operands cover their shapes; the panels lie within the side.
                    unsafe {
                        gemm_panel((m, n, k), along_m, (w[0], w[1]), (c.as_mut_ptr(), n), p.a_op(), p.b_op(), 0.7, acc)
                    };
                }
                let differ = differing(&c, &whole);
                assert_eq!(differ, 0, "{m}×{n}·k {k} cut at {cuts:?}: {differ} elements differ from one call");
            }
        }
    }

    #[test]
    fn a_large_output_over_a_long_k_is_cut_into_more_panels_with_the_bits_of_one_call() {
        // The LM head's weight gradient: 16 MiB of output over 2048 tokens, 8 panels of 2 MiB
        // on 2 threads or 1; its input gradient (4 MiB) and forward (K = 512) one a thread.
        assert_eq!(panels((8192, 512, 2048), 4, 2), (true, 8));
        assert_eq!(panels((8192, 512, 2048), 4, 1), (true, 8));
        assert_eq!(panels((2048, 512, 8192), 4, 2), (true, 2));
        assert_eq!(panels((2048, 8192, 512), 4, 2), (false, 2));
        assert_eq!(panels((128, 1376, 2048), 4, 2), (false, 2));
        // An 8 MiB output over K = 544: 4 panels, on a pool of 2 threads and on the calling
        // thread, each bit for bit one serial call.
        let (m, n, k) = (2048, 1024, 544);
        assert_eq!(panels((m, n, k), 4, 2), (true, 4));
        let p = Product::new((m, n, k), true);
        let whole = p.one_call(true);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        for parallel in [true, false] {
            let mut c = p.c0.clone();
            // SAFETY: the operands cover their shapes with these strides.
            pool.install(|| unsafe {
                gemm_raw((m, n, k), (c.as_mut_ptr(), n), p.a_op(), p.b_op(), 0.7, true, parallel)
            });
            let differ = differing(&c, &whole);
            assert_eq!(differ, 0, "parallel {parallel}: {differ} elements differ from one call");
        }
    }

    #[test]
    fn a_short_wide_output_over_a_long_k_is_computed_by_columns_with_the_bits_of_one_call() {
        // The r-sided weight gradients of the step go by columns (with the AVX-512 kernels);
        // their transposes, the forward and input-gradient shapes (K = d, r or d_ff) and the
        // LM head do not.
        let is = short_wide_over_long_k;
        assert!(is(128, 512, 2048) && is(128, 1376, 2048));
        assert_eq!(by_columns(128, 512, 2048), super::super::machine::gemm_avx512());
        assert!(!is(512, 128, 2048) && !is(2048, 512, 128) && !is(2048, 128, 1376));
        assert!(!is(8192, 512, 2048) && !is(256, 512, 2048) && !is(128, 512, 512) && !is(1, 8192, 2048));
        // Accumulating or not, a weight gradient's layout or not, ragged sides, one thread or
        // two: bit for bit one serial call (on any CPU: called directly).
        let cases =
            [((128, 512, 1024), true), ((96, 700, 1100), true), ((128, 333, 1024), false), ((16, 40, 1500), true)];
        for ((m, n, k), ta) in cases {
            assert!(is(m, n, k));
            let p = Product::new((m, n, k), ta);
            for acc in [true, false] {
                let whole = p.one_call(acc);
                for threads in [1, 2] {
                    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                    let mut c = p.c0.clone();
                    let (a, b) = (p.a_op(), p.b_op());
                    // SAFETY: the operands cover their shapes with these strides.
                    pool.install(|| unsafe { gemm_by_columns((m, n, k), (c.as_mut_ptr(), n), a, b, 0.7, acc) });
                    let differ = differing(&c, &whole);
                    assert_eq!(differ, 0, "{m}×{n}·k {k}, accumulate {acc}, {threads} threads: {differ} differ");
                }
            }
        }
    }

    #[test]
    fn column_way_products_in_a_parallel_loop_nest_on_one_thread_without_harm() {
        // Many such products as tasks of one pool: a thread that waits inside one of them
        // runs another (rayon's work stealing), which must find its own scratch.
        let (m, n, k) = (64, 256, 1024);
        let p = Product::new((m, n, k), true);
        let whole = p.one_call(true);
        let (a_op, b_op) = (p.a_op(), p.b_op());
        let pool = rayon::ThreadPoolBuilder::new().num_threads(4).build().unwrap();
        // (Holding the scratch borrowed across the call panicked here in 2 of 3 runs of 16
        // rounds.)
        for _ in 0..48 {
            let mut outs = vec![p.c0.clone(); 48];
            pool.install(|| {
                outs.par_iter_mut().for_each(|c| {
                    // SAFETY: the operands cover their shapes; each task writes its own output.
                    unsafe { gemm_by_columns((m, n, k), (c.as_mut_ptr(), n), a_op, b_op, 0.7, true) };
                })
            });
            assert!(outs.iter().all(|c| differing(c, &whole) == 0));
        }
    }

    #[test]
    fn speed_cuts_cover_the_side_in_order_each_at_least_its_minimum() {
        let speeds = [core_speed::SLOWEST, 0.8, 0.95, 1.0, 1.1, 1.25, core_speed::FASTEST];
        for side in [256, 333, 512, 1376, 2048, 8192] {
            for panels in 2..=6 {
                let cuts = Cuts::new(side, 128, panels, true);
                if !cuts.by_speed {
                    assert!(side / panels < 2 * PANEL_MIN + 32, "side {side} over {panels} panels not cut by speed");
                    continue;
                }
                let mut end = 0;
                for p in 0..panels {
                    let (lo, hi) = cuts.take(p, speeds[(p * 5 + side) % speeds.len()]);
                    assert_eq!(lo, end, "side {side}, {panels} panels: panel {p} starts at {lo}, not {end}");
                    assert_eq!(lo % 16, 0, "side {side}: panel {p} starts off a multiple of 16");
                    assert!(
                        hi - lo >= cuts.min,
                        "side {side}, {panels} panels: panel {p} has {} < {}",
                        hi - lo,
                        cuts.min
                    );
                    end = hi;
                }
                assert_eq!(end, side, "side {side}, {panels} panels end at {end}");
            }
        }
        // A slower core's panel is the narrower one.
        let cuts = Cuts::new(2048, 512, 2, true);
        let (lo, hi) = cuts.take(0, 0.8);
        assert_eq!((lo, hi), (0, 816));
        assert_eq!(cuts.take(1, 1.2), (816, 2048));
    }
}
