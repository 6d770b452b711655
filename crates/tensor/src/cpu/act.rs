//! Elementwise activations and biases.

use super::par::{col_reduce, par_rows, row};
use crate::scalar::Scalar;
use crate::view::{Mat, MatMut};
use rayon::prelude::*;

pub fn silu<T: Scalar>(y: MatMut<Vec<T>>, x: Mat<Vec<T>>) {
    assert_eq!((y.rows, y.cols), (x.rows, x.cols));
    par_rows(y).for_each(|(i, o)| T::silu_row(o, row(&x, i)));
}

pub fn silu_bwd<T: Scalar>(d: MatMut<Vec<T>>, x: Mat<Vec<T>>) {
    assert_eq!((d.rows, d.cols), (x.rows, x.cols));
    par_rows(d).for_each(|(i, o)| T::silu_grad_row(o, row(&x, i)));
}

pub fn swiglu<T: Scalar>(m: MatMut<Vec<T>>, gu: Mat<Vec<T>>, outer_silu: bool) {
    let (t, n) = (m.rows, m.cols);
    assert_eq!((gu.rows, gu.cols), (2 * t, n), "swiglu: g stacked over u");
    par_rows(m).for_each(|(i, o)| T::swiglu_row(o, row(&gu, i), row(&gu, t + i), outer_silu));
}

pub fn swiglu_bwd<T: Scalar>(
    dgu: MatMut<Vec<T>>,
    dm: MatMut<Vec<T>>,
    gu: Mat<Vec<T>>,
    outer_silu: bool,
    rebuild: bool,
) {
    let (t, n) = (dm.rows, dm.cols);
    assert_eq!((dgu.rows, dgu.cols), (2 * t, n));
    assert_eq!((gu.rows, gu.cols), (2 * t, n));
    // Rows 0..t of dgu are dg, rows t..2t are du: handle row i of both in one task.
    let ld = dgu.ld;
    let base = super::par::SendPtr(dgu.buf[dgu.off..].as_mut_ptr());
    let dm_ld = dm.ld;
    let dm_base = super::par::SendPtr(dm.buf[dm.off..].as_mut_ptr());
    (0..t).into_par_iter().with_min_len((4096 / n.max(1)).max(1)).for_each(|i| {
        // SAFETY: task i owns rows i and t + i of dgu, and row i of dm.
        let (dg, du, dm) = unsafe {
            (
                std::slice::from_raw_parts_mut(base.get().add(i * ld), n),
                std::slice::from_raw_parts_mut(base.get().add((t + i) * ld), n),
                std::slice::from_raw_parts_mut(dm_base.get().add(i * dm_ld), n),
            )
        };
        T::swiglu_bwd_row(dg, du, dm, row(&gu, i), row(&gu, t + i), outer_silu, rebuild);
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
