//! RMSNorm (plain and over a hidden shard) and LayerNorm, forward and backward.
// Each kernel takes the operands of its `Backend` method, however many.
use super::par::{col_reduce, par_rows, par_rows_of_work, row};
use crate::args::{
    LayerNormBwd, LayerNormFwd, OnlineNormBwd, ResidualRmsNorm, RmsNormBwd, RmsNormBwdRows, SiluNormBwd,
};
use crate::scalar::Scalar;
use crate::view::{Mat, MatMut};
use rayon::prelude::*;

pub fn row_sumsq<T: Scalar>(out: MatMut<Vec<T>>, x: Mat<Vec<T>>) {
    assert_eq!((out.rows, out.cols), (x.rows, 1));
    par_rows_of_work(out, x.cols).for_each(|(i, o)| {
        let r = row(&x, i);
        o[0] = T::dot(r, r);
    });
}

pub fn rstd_from_sumsq<T: Scalar>(s: MatMut<Vec<T>>, n: usize, eps: f64) {
    let inv_n = T::of(1.0 / n as f64);
    let eps = T::of(eps);
    par_rows(s).for_each(|(_, r)| {
        for v in r {
            *v = T::one() / (*v * inv_n + eps).sqrt();
        }
    });
}

pub fn rmsnorm_apply<T: Scalar>(y: MatMut<Vec<T>>, x: Mat<Vec<T>>, gamma: Mat<Vec<T>>, rstd: Mat<Vec<T>>) {
    assert_eq!((y.rows, y.cols), (x.rows, x.cols));
    let g = row(&gamma, 0);
    assert_eq!(g.len(), x.cols);
    par_rows(y).for_each(|(i, yr)| {
        let r = row(&rstd, i)[0];
        for ((o, v), gj) in yr.iter_mut().zip(row(&x, i)).zip(g) {
            *o = *v * r * *gj;
        }
    });
}

/// The unfused sequence, kernel by kernel (the same bits).
pub fn residual_rmsnorm<T: Scalar>(args: ResidualRmsNorm<Vec<T>>) {
    let ResidualRmsNorm { mut x, r, y, mut rstd, gamma, eps } = args;
    let n = x.cols;
    super::elementwise::axpy(x.rb(), r, 1.0);
    row_sumsq(rstd.rb(), x.as_ref());
    rstd_from_sumsq(rstd.rb(), n, eps);
    rmsnorm_apply(y, x.as_ref(), gamma, rstd.as_ref());
}

/// The unfused sequence, kernel by kernel (the same bits).
pub fn residual_sumsq<T: Scalar>(mut x: MatMut<Vec<T>>, r: Mat<Vec<T>>, out: MatMut<Vec<T>>) {
    super::elementwise::axpy(x.rb(), r, 1.0);
    row_sumsq(out, x.as_ref());
}

/// The unfused sequence, kernel by kernel (the same bits).
pub fn rmsnorm_bwd_rows<T: Scalar>(args: RmsNormBwdRows<Vec<T>>) {
    let RmsNormBwdRows { dx, dgamma, dy, x, gamma, rstd, mut dot, accumulate } = args;
    rmsnorm_bwd_dot(dot.rb(), dy, x, gamma);
    rmsnorm_bwd(RmsNormBwd { dx, dgamma, dy, x, gamma, rstd, dot: dot.as_ref(), n: x.cols, accumulate });
}

pub fn rmsnorm_bwd_dot<T: Scalar>(dot: MatMut<Vec<T>>, dy: Mat<Vec<T>>, x: Mat<Vec<T>>, gamma: Mat<Vec<T>>) {
    let g = row(&gamma, 0);
    par_rows_of_work(dot, x.cols).for_each(|(i, o)| o[0] = T::dot3(row(&dy, i), row(&x, i), g));
}

pub fn rmsnorm_bwd<T: Scalar>(args: RmsNormBwd<Vec<T>>) {
    let RmsNormBwd { dx, dgamma, dy, x, gamma, rstd, dot, n, accumulate } = args;
    let g = row(&gamma, 0);
    let inv_n = T::of(1.0 / n as f64);
    col_reduce(dgamma, x.rows, |i, j0, acc| {
        let r = row(&rstd, i)[0];
        let (dyr, xr) = (&row(&dy, i)[j0..], &row(&x, i)[j0..]);
        for ((a, d), v) in acc.iter_mut().zip(dyr).zip(xr) {
            *a = *a + *d * *v * r;
        }
    });
    par_rows(dx).for_each(|(i, o)| {
        let r = row(&rstd, i)[0];
        let c = row(&dot, i)[0] * r * r * r * inv_n;
        for (((o, d), v), gj) in o.iter_mut().zip(row(&dy, i)).zip(row(&x, i)).zip(g) {
            let val = r * *gj * *d - *v * c;
            *o = if accumulate { *o + val } else { val };
        }
    });
}

pub fn row_dot<T: Scalar>(
    out: MatMut<Vec<T>>,
    a: Mat<Vec<T>>,
    b: Mat<Vec<T>>,
    scale_rows: Option<Mat<Vec<T>>>,
    alpha: f64,
    accumulate: bool,
) {
    let alpha = T::of(alpha);
    par_rows_of_work(out, a.cols).for_each(|(i, o)| {
        let s = T::dot(row(&a, i), row(&b, i));
        let f = scale_rows.as_ref().map_or(T::one(), |r| {
            let v = row(r, i)[0];
            v * v
        });
        let v = alpha * s * f;
        o[0] = if accumulate { o[0] + v } else { v };
    });
}

pub fn silu_norm_bwd<T: Scalar>(args: SiluNormBwd<Vec<T>>) {
    let SiluNormBwd { dp, x, p, stat, ds, alpha, accumulate } = args;
    assert_eq!((dp.rows, dp.cols), (x.rows, x.cols), "silu_norm_bwd: dp and x differ in shape");
    assert_eq!((p.rows, p.cols), (x.rows, x.cols), "silu_norm_bwd: p and x differ in shape");
    assert_eq!((ds.rows, ds.cols, stat.rows), (x.rows, 1, x.rows), "silu_norm_bwd: one ds and stat per row");
    let (alpha, cols) = (T::of(alpha), x.cols);
    // Each row while it is in L1: silu_bwd's, row_dot's and mul_rows' arithmetic in their order.
    par_rows(dp).zip(par_rows_of_work(ds, cols)).for_each(|((i, d), (_, o))| {
        let st = row(&stat, i)[0];
        let v = alpha * T::silu_norm_row(d, row(&x, i), row(&p, i), st) * (st * st);
        o[0] = if accumulate { o[0] + v } else { v };
    });
}

pub fn online_norm_bwd<T: Scalar>(args: OnlineNormBwd<Vec<T>>) {
    let OnlineNormBwd { dx, dgamma, g, x, gamma, ds, accumulate } = args;
    let gm = row(&gamma, 0);
    if let Some(dgamma) = dgamma {
        col_reduce(dgamma, x.rows, |i, j0, acc| T::add_products(acc, &row(&x, i)[j0..], &row(&g, i)[j0..]));
    }
    let two = T::of(2.0);
    par_rows(dx).for_each(|(i, o)| T::norm_grad_row(o, row(&g, i), row(&x, i), gm, two * row(&ds, i)[0], accumulate));
}

pub fn layernorm_fwd<T: Scalar>(args: LayerNormFwd<Vec<T>>) {
    let LayerNormFwd { y, mean, rstd, x, w, b, eps } = args;
    assert_eq!((y.rows, y.cols), (x.rows, x.cols));
    let n = T::of(x.cols as f64);
    let eps = T::of(eps);
    let (wr, br) = (row(&w, 0), row(&b, 0));
    let w = x.cols;
    par_rows(y).zip(par_rows_of_work(mean, w)).zip(par_rows_of_work(rstd, w)).for_each(
        |(((i, yr), (_, m)), (_, r))| {
            let xr = row(&x, i);
            let mu = T::total(xr) / n;
            let var = xr.iter().fold(T::zero(), |s, v| s + (*v - mu) * (*v - mu)) / n;
            let rs = T::one() / (var + eps).sqrt();
            m[0] = mu;
            r[0] = rs;
            for (((o, v), wj), bj) in yr.iter_mut().zip(xr).zip(wr).zip(br) {
                *o = (*v - mu) * rs * *wj + *bj;
            }
        },
    );
}

pub fn layernorm_bwd<T: Scalar>(args: LayerNormBwd<Vec<T>>) {
    let LayerNormBwd { dx, dw, db, dy, x, w, mean, rstd } = args;
    let wr = row(&w, 0);
    let n = T::of(x.cols as f64);
    col_reduce(dw, x.rows, |i, j0, acc| {
        let (m, r) = (row(&mean, i)[0], row(&rstd, i)[0]);
        for ((a, d), v) in acc.iter_mut().zip(&row(&dy, i)[j0..]).zip(&row(&x, i)[j0..]) {
            *a = *a + *d * (*v - m) * r;
        }
    });
    col_reduce(db, x.rows, |i, j0, acc| {
        for (a, d) in acc.iter_mut().zip(&row(&dy, i)[j0..]) {
            *a = *a + *d;
        }
    });
    par_rows(dx).for_each(|(i, o)| {
        let (m, r) = (row(&mean, i)[0], row(&rstd, i)[0]);
        let (dyr, xr) = (row(&dy, i), row(&x, i));
        // xhat = (x − m)·r, dxhat = dy·w; dx = r·(dxhat − mean(dxhat) − xhat·mean(dxhat·xhat))
        let mut s1 = T::zero();
        let mut s2 = T::zero();
        for ((d, v), wj) in dyr.iter().zip(xr).zip(wr) {
            let dh = *d * *wj;
            s1 = s1 + dh;
            s2 = s2 + dh * (*v - m) * r;
        }
        let (s1, s2) = (s1 / n, s2 / n);
        for (((o, d), v), wj) in o.iter_mut().zip(dyr).zip(xr).zip(wr) {
            *o = r * (*d * *wj - s1 - (*v - m) * r * s2);
        }
    });
}

#[cfg(test)]
mod tests {
    use crate::cpu::Cpu;
    use crate::{Backend, Mat, MatMut, SiluNormBwd};

    /// The fused pass gives the bits of `silu_bwd`, `row_dot` and `mul_rows` in turn, on
    /// components side by side in a wider row (a grouped latent), accumulating over them.
    #[test]
    fn silu_norm_bwd_equals_its_three_kernels_bit_for_bit() {
        let (t, r, c) = (70, 45, 3);
        let w = c * r;
        let val = |i: usize, s: usize| ((i * s % 1009) as f32 - 504.0) * 6e-3;
        let x: Vec<f32> = (0..t * w).map(|i| val(i, 7919)).collect();
        let dp0: Vec<f32> = (0..t * w).map(|i| val(i, 104729)).collect();
        let stat: Vec<f32> = (0..t).map(|i| 0.5 + val(i, 31).abs()).collect();
        let be = Cpu::<f32>::default();
        let alpha = -0.5 / 384.0;

        let (mut dp, mut ds) = (dp0.clone(), vec![0f32; t]);
        for j in 0..c {
            be.silu_norm_bwd(SiluNormBwd {
                dp: MatMut::at(&mut dp, j * r, t, r, w),
                x: Mat::at(&x, j * r, t, r, w),
                p: Mat::at(&x, j * r, t, r, w),
                stat: Mat::new(&stat, t, 1),
                ds: MatMut::new(&mut ds, t, 1),
                alpha,
                accumulate: j > 0,
            });
        }

        let (mut want, mut want_ds) = (dp0, vec![0f32; t]);
        be.silu_bwd(MatMut::new(&mut want, t, w), Mat::new(&x, t, w));
        for j in 0..c {
            let (dpj, pj) = (Mat::at(&want, j * r, t, r, w), Mat::at(&x, j * r, t, r, w));
            be.row_dot(MatMut::new(&mut want_ds, t, 1), dpj, pj, Some(Mat::new(&stat, t, 1)), alpha, j > 0);
        }
        for j in 0..c {
            be.mul_rows(MatMut::at(&mut want, j * r, t, r, w), Mat::new(&stat, t, 1));
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&dp), bits(&want));
        assert_eq!(bits(&ds), bits(&want_ds));
    }
}
