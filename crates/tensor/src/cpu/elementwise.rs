//! Fills, copies, scaled adds and deterministic full reductions.

use super::par::{par_rows, row, span};
use crate::scalar::{Scalar, lane_sum};
use crate::view::{Mat, MatMut};
use rayon::prelude::*;

/// Elements per task where a contiguous view is split flat: a 1 × n buffer (a parameter's
/// gradient, a staging buffer) is one row, which [`par_rows`] would leave to one thread
/// (zeroing the gradients took 9.3 ms a step on 16 threads as on 2).
const FLAT: usize = 16384;

/// `f` on pieces of `x`: flat chunks of a contiguous view, else its rows.
fn each_piece<T: Scalar>(x: MatMut<Vec<T>>, f: impl Fn(&mut [T]) + Sync + Send) {
    if x.is_contiguous() {
        let range = span(x.off, x.rows, x.cols, x.ld);
        x.buf[range].par_chunks_mut(FLAT).for_each(f);
    } else {
        par_rows(x).for_each(|(_, r)| f(r));
    }
}

/// `f` on matching pieces of `dst` and `src`, views of one shape.
fn each_pair<T: Scalar>(what: &str, dst: MatMut<Vec<T>>, src: Mat<Vec<T>>, f: impl Fn(&mut [T], &[T]) + Sync + Send) {
    assert_eq!((dst.rows, dst.cols), (src.rows, src.cols), "{what}: shapes differ");
    if dst.is_contiguous() && src.is_contiguous() {
        let (d, s) = (span(dst.off, dst.rows, dst.cols, dst.ld), span(src.off, src.rows, src.cols, src.ld));
        dst.buf[d].par_chunks_mut(FLAT).zip(src.buf[s].par_chunks(FLAT)).for_each(|(d, s)| f(d, s));
    } else {
        par_rows(dst).for_each(|(i, r)| f(r, row(&src, i)));
    }
}

pub fn fill<T: Scalar>(x: MatMut<Vec<T>>, v: f64) {
    let v = T::of(v);
    each_piece(x, |r| r.fill(v));
}

pub fn copy<T: Scalar>(dst: MatMut<Vec<T>>, src: Mat<Vec<T>>) {
    each_pair("copy", dst, src, |d, s| d.copy_from_slice(s));
}

pub fn axpy<T: Scalar>(dst: MatMut<Vec<T>>, src: Mat<Vec<T>>, alpha: f64) {
    let a = T::of(alpha);
    each_pair("axpy", dst, src, |d, s| T::axpy_row(d, s, a));
}

pub fn scale<T: Scalar>(x: MatMut<Vec<T>>, s: f64) {
    let s = T::of(s);
    each_piece(x, |r| T::scale_row(r, s));
}

pub fn mul_rows<T: Scalar>(x: MatMut<Vec<T>>, rowv: Mat<Vec<T>>) {
    assert_eq!((rowv.rows, rowv.cols), (x.rows, 1));
    par_rows(x).for_each(|(i, r)| {
        T::scale_row(r, row(&rowv, i)[0]);
    });
}

pub fn mul_cols<T: Scalar>(y: MatMut<Vec<T>>, x: Mat<Vec<T>>, col: Mat<Vec<T>>) {
    let c = row(&col, 0);
    assert_eq!(c.len(), x.cols);
    assert_eq!((y.rows, y.cols), (x.rows, x.cols));
    par_rows(y).for_each(|(i, o)| {
        for ((o, v), f) in o.iter_mut().zip(row(&x, i)).zip(c) {
            *o = *v * *f;
        }
    });
}

/// Number of fixed chunks a full reduction is split into (independent of threads).
const CHUNKS: usize = 64;

/// `Σ` in f64 over a view of what `part` sums over a slice ([`lane_sum`]'s order): 64 fixed
/// row chunks, summed in order.
fn reduce<T: Scalar>(x: Mat<Vec<T>>, part: impl Fn(&[T]) -> f64 + Sync) -> f64 {
    let mut partial = [0.0f64; CHUNKS];
    let rows = x.rows;
    let per = rows.div_ceil(CHUNKS).max(1);
    if x.is_contiguous() {
        // Chunk the flat range instead, so a 1×n vector is split too.
        let flat = &x.buf[span(x.off, x.rows, x.cols, x.ld)];
        let per = flat.len().div_ceil(CHUNKS).max(1);
        partial.par_iter_mut().enumerate().for_each(|(c, p)| {
            let lo = (c * per).min(flat.len());
            let hi = ((c + 1) * per).min(flat.len());
            *p = part(&flat[lo..hi]);
        });
    } else {
        partial.par_iter_mut().enumerate().for_each(|(c, p)| {
            let lo = (c * per).min(rows);
            let hi = ((c + 1) * per).min(rows);
            *p = (lo..hi).map(|i| part(row(&x, i))).sum();
        });
    }
    partial.iter().sum()
}

pub fn sumsq<T: Scalar>(x: Mat<Vec<T>>) -> f64 {
    reduce(x, T::sumsq_lanes)
}

pub fn sumsq_each<T: Scalar>(xs: &[Mat<Vec<T>>], out: &mut [f64]) {
    assert_eq!(xs.len(), out.len(), "sumsq_each: one result per view");
    for (o, &x) in out.iter_mut().zip(xs) {
        *o = sumsq(x);
    }
}

pub fn sum<T: Scalar>(x: Mat<Vec<T>>) -> f64 {
    reduce(x, |s| lane_sum(s, &|v: T| v.f64()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every element of the view is written, and nothing around it: a 1 × n view split flat
    /// (n past three pieces, ragged) and a strided one split by rows.
    #[test]
    fn flat_and_strided_views_write_exactly_their_elements() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        pool.install(|| {
            let n = 3 * FLAT + 17;
            let src: Vec<f32> = (0..n + 9).map(|i| (i % 1000) as f32).collect();
            let (off, soff) = (5, 3);
            let mut x = vec![-1.0f32; n + 9];
            let outside = |x: &[f32]| x[..off].iter().chain(&x[off + n..]).all(|v| *v == -1.0);
            fill(MatMut::at(&mut x, off, 1, n, n), 2.0);
            assert!(outside(&x) && x[off..off + n].iter().all(|v| *v == 2.0));
            axpy(MatMut::at(&mut x, off, 1, n, n), Mat::at(&src, soff, 1, n, n), 0.5);
            scale(MatMut::at(&mut x, off, 1, n, n), 4.0);
            assert!(outside(&x));
            for j in 0..n {
                assert_eq!(x[off + j], (2.0 + 0.5 * src[soff + j]) * 4.0, "element {j}");
            }
            copy(MatMut::at(&mut x, off, 1, n, n), Mat::at(&src, soff, 1, n, n));
            assert!(outside(&x) && x[off..off + n] == src[soff..soff + n]);

            // 40 rows of 1000 in a stride of 1003: the 3 elements after each row stay.
            let (rows, cols, ld) = (40, 1000, 1003);
            let mut y = vec![-1.0f32; rows * ld];
            fill(MatMut::at(&mut y, 0, rows, cols, ld), 2.0);
            axpy(MatMut::at(&mut y, 0, rows, cols, ld), Mat::new(&src, rows, cols), 1.0);
            for i in 0..rows {
                for j in 0..ld {
                    let want = if j < cols { 2.0 + src[i * cols + j] } else { -1.0 };
                    assert_eq!(y[i * ld + j], want, "row {i}, column {j}");
                }
            }
        });
    }
}
