//! GEMM through the `gemm` crate. It splits work over output blocks only and walks K in a
//! fixed order, so results are identical for any thread count.

use crate::scalar::Scalar;
use crate::view::{Mat, MatMut};
use gemm::Parallelism;
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
    let par = if parallel { Parallelism::Rayon(0) } else { Parallelism::None };
    GEMM_IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
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
            par,
        );
    }
    GEMM_IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
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
