//! Row and column iteration helpers for CPU kernels. Work is split by rows (or by column
//! blocks for reductions over rows), so every output element is computed by one thread in
//! a fixed order: results do not depend on the thread count.

use crate::view::{Mat, MatMut};
use rayon::prelude::*;

/// Columns per block in reductions over rows.
pub const COL_BLOCK: usize = 64;

#[inline(always)]
pub fn row<'a, T>(m: &Mat<'a, Vec<T>>, i: usize) -> &'a [T] {
    let s = m.off + i * m.ld;
    &m.buf[s..s + m.cols]
}

/// The element range a view spans.
#[inline]
pub fn span(off: usize, rows: usize, cols: usize, ld: usize) -> std::ops::Range<usize> {
    if rows == 0 || cols == 0 { off..off } else { off..off + (rows - 1) * ld + cols }
}

/// The elements of a view as one contiguous slice, when it is contiguous.
pub fn contiguous<'a, T: crate::Scalar>(m: &Mat<'a, Vec<T>>) -> Option<&'a [T]> {
    if m.is_contiguous() { Some(&m.buf[span(m.off, m.rows, m.cols, m.ld)]) } else { None }
}

/// Parallel iterator over `(row index, row slice)` of a mutable view.
pub fn par_rows<'a, T: Send + Sync>(
    m: MatMut<'a, Vec<T>>,
) -> impl IndexedParallelIterator<Item = (usize, &'a mut [T])> {
    let cols = m.cols;
    par_rows_of_work(m, cols)
}

/// [`par_rows`] for a row whose work spans `work` elements (a per-row result of a wide
/// input, such as a row's sum of squares): tasks get at least 16,384 elements of work. Sizing
/// them by the output's one column would put every row of a long sequence into one task.
pub fn par_rows_of_work<'a, T: Send + Sync>(
    m: MatMut<'a, Vec<T>>,
    work: usize,
) -> impl IndexedParallelIterator<Item = (usize, &'a mut [T])> {
    let (rows, cols, ld) = (m.rows, m.cols, m.ld.max(1));
    let range = span(m.off, rows, cols, ld);
    let slice = &mut m.buf[range];
    let min_len = (16384 / work.max(1)).max(1);
    slice.par_chunks_mut(ld).map(move |c| &mut c[..cols]).enumerate().with_min_len(min_len)
}

/// Sequential iterator over the rows of a mutable view.
pub fn rows_mut<'a, T>(m: MatMut<'a, Vec<T>>) -> impl Iterator<Item = &'a mut [T]> {
    let (rows, cols, ld) = (m.rows, m.cols, m.ld.max(1));
    let range = span(m.off, rows, cols, ld);
    m.buf[range].chunks_mut(ld).map(move |c| &mut c[..cols])
}

/// `out[j] += Σ_i f(i, j)` over the rows of a shape, in row order for every column:
/// `f(i, j0, acc)` adds row i's contribution for columns `j0..j0+acc.len()` into `acc`.
pub fn col_reduce<T: Send + Sync + Copy>(out: MatMut<Vec<T>>, rows: usize, f: impl Fn(usize, usize, &mut [T]) + Sync) {
    assert_eq!(out.rows, 1, "column reduction into a 1×n row");
    let cols = out.cols;
    let slice = &mut out.buf[out.off..out.off + cols];
    slice.par_chunks_mut(COL_BLOCK).enumerate().for_each(|(b, acc)| {
        let j0 = b * COL_BLOCK;
        for i in 0..rows {
            f(i, j0, acc);
        }
    });
}

/// A raw pointer that may cross threads; users guarantee disjoint writes.
#[derive(Clone, Copy)]
pub struct SendPtr<T>(pub *mut T);
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}

impl<T> SendPtr<T> {
    #[inline(always)]
    pub fn get(self) -> *mut T {
        self.0
    }
}
