//! Fills, copies, scaled adds and deterministic full reductions.

use super::par::{par_rows, row, span};
use crate::scalar::Scalar;
use crate::view::{Mat, MatMut};
use rayon::prelude::*;

pub fn fill<T: Scalar>(x: MatMut<Vec<T>>, v: f64) {
    let v = T::of(v);
    par_rows(x).for_each(|(_, r)| r.fill(v));
}

pub fn copy<T: Scalar>(dst: MatMut<Vec<T>>, src: Mat<Vec<T>>) {
    assert_eq!((dst.rows, dst.cols), (src.rows, src.cols), "copy: shapes differ");
    par_rows(dst).for_each(|(i, r)| r.copy_from_slice(row(&src, i)));
}

pub fn axpy<T: Scalar>(dst: MatMut<Vec<T>>, src: Mat<Vec<T>>, alpha: f64) {
    assert_eq!((dst.rows, dst.cols), (src.rows, src.cols), "axpy: shapes differ");
    let a = T::of(alpha);
    par_rows(dst).for_each(|(i, r)| {
        for (o, v) in r.iter_mut().zip(row(&src, i)) {
            *o = *o + a * *v;
        }
    });
}

pub fn scale<T: Scalar>(x: MatMut<Vec<T>>, s: f64) {
    let s = T::of(s);
    par_rows(x).for_each(|(_, r)| r.iter_mut().for_each(|v| *v = *v * s));
}

pub fn mul_rows<T: Scalar>(x: MatMut<Vec<T>>, rowv: Mat<Vec<T>>) {
    assert_eq!((rowv.rows, rowv.cols), (x.rows, 1));
    par_rows(x).for_each(|(i, r)| {
        let f = row(&rowv, i)[0];
        r.iter_mut().for_each(|v| *v = *v * f);
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

/// Independent accumulators of [`lane_sum`].
const LANES: usize = 8;

/// `Σ f(v)` over a slice with element k going to accumulator k mod 8, the accumulators then
/// combined pairwise and the tail added in order: a fixed order, and no chain of dependent
/// additions for the CPU to wait on (one accumulator made the gradient norm latency-bound).
#[inline]
fn lane_sum<T: Scalar>(x: &[T], f: &impl Fn(T) -> f64) -> f64 {
    let mut acc = [0.0f64; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, v) in acc.iter_mut().zip(c) {
            *a += f(*v);
        }
    }
    let mut w = LANES;
    while w > 1 {
        w /= 2;
        for i in 0..w {
            acc[i] += acc[i + w];
        }
    }
    chunks.remainder().iter().fold(acc[0], |s, v| s + f(*v))
}

/// `Σ f(element)` in f64 over a view: 64 fixed row chunks, summed in order.
fn reduce<T: Scalar>(x: Mat<Vec<T>>, f: impl Fn(T) -> f64 + Sync) -> f64 {
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
            *p = lane_sum(&flat[lo..hi], &f);
        });
    } else {
        partial.par_iter_mut().enumerate().for_each(|(c, p)| {
            let lo = (c * per).min(rows);
            let hi = ((c + 1) * per).min(rows);
            *p = (lo..hi).map(|i| lane_sum(row(&x, i), &f)).sum();
        });
    }
    partial.iter().sum()
}

pub fn sumsq<T: Scalar>(x: Mat<Vec<T>>) -> f64 {
    reduce(x, |v| {
        let v = v.f64();
        v * v
    })
}

pub fn sumsq_each<T: Scalar>(xs: &[Mat<Vec<T>>], out: &mut [f64]) {
    assert_eq!(xs.len(), out.len(), "sumsq_each: one result per view");
    for (o, &x) in out.iter_mut().zip(xs) {
        *o = sumsq(x);
    }
}

pub fn sum<T: Scalar>(x: Mat<Vec<T>>) -> f64 {
    reduce(x, |v| v.f64())
}
