//! Elementwise activations and biases.

use super::par::{col_reduce, par_rows, row};
use crate::scalar::Scalar;
use crate::view::{Mat, MatMut};
use rayon::prelude::*;

#[inline(always)]
fn sigmoid<T: Scalar>(x: T) -> T {
    T::one() / (T::one() + (-x).exp())
}

#[inline(always)]
fn silu_grad<T: Scalar>(x: T) -> T {
    let s = sigmoid(x);
    s * (T::one() + x * (T::one() - s))
}

pub fn silu<T: Scalar>(y: MatMut<Vec<T>>, x: Mat<Vec<T>>) {
    assert_eq!((y.rows, y.cols), (x.rows, x.cols));
    par_rows(y).for_each(|(i, o)| {
        for (o, v) in o.iter_mut().zip(row(&x, i)) {
            *o = *v * sigmoid(*v);
        }
    });
}

pub fn silu_bwd<T: Scalar>(d: MatMut<Vec<T>>, x: Mat<Vec<T>>) {
    assert_eq!((d.rows, d.cols), (x.rows, x.cols));
    par_rows(d).for_each(|(i, o)| {
        for (o, v) in o.iter_mut().zip(row(&x, i)) {
            *o = *o * silu_grad(*v);
        }
    });
}

pub fn swiglu<T: Scalar>(m: MatMut<Vec<T>>, gu: Mat<Vec<T>>, outer_silu: bool) {
    let n = m.cols;
    assert_eq!((gu.rows, gu.cols), (m.rows, 2 * n));
    par_rows(m).for_each(|(i, o)| {
        let (g, u) = row(&gu, i).split_at(n);
        for ((o, gv), uv) in o.iter_mut().zip(g).zip(u) {
            let a = if outer_silu { *gv * sigmoid(*gv) } else { *gv };
            *o = a * *uv;
        }
    });
}

pub fn swiglu_bwd<T: Scalar>(dgu: MatMut<Vec<T>>, dm: Mat<Vec<T>>, gu: Mat<Vec<T>>, outer_silu: bool) {
    let n = dm.cols;
    assert_eq!((dgu.rows, dgu.cols), (dm.rows, 2 * n));
    par_rows(dgu).for_each(|(i, o)| {
        let (dg, du) = o.split_at_mut(n);
        let (g, u) = row(&gu, i).split_at(n);
        for ((((dg, du), d), gv), uv) in dg.iter_mut().zip(du).zip(row(&dm, i)).zip(g).zip(u) {
            if outer_silu {
                *dg = *d * *uv * silu_grad(*gv);
                *du = *d * *gv * sigmoid(*gv);
            } else {
                *dg = *d * *uv;
                *du = *d * *gv;
            }
        }
    });
}

pub fn add_bias<T: Scalar>(y: MatMut<Vec<T>>, b: Mat<Vec<T>>) {
    let br = row(&b, 0);
    assert_eq!(br.len(), y.cols);
    par_rows(y).for_each(|(_, o)| {
        for (o, v) in o.iter_mut().zip(br) {
            *o = *o + *v;
        }
    });
}

pub fn bias_grad<T: Scalar>(db: MatMut<Vec<T>>, dy: Mat<Vec<T>>) {
    assert_eq!(db.cols, dy.cols);
    col_reduce(db, dy.rows, |i, j0, acc| {
        for (a, d) in acc.iter_mut().zip(&row(&dy, i)[j0..]) {
            *a = *a + *d;
        }
    });
}
