//! The LaX Kronecker gate: per row, the latent as an a×b matrix Z maps to Kaᵀ·Z·Kb.

use super::par::{SendPtr, par_rows, row};
use crate::args::KronBwd;
use crate::scalar::Scalar;
use crate::view::{Mat, MatMut};
use rayon::prelude::*;

/// Fixed number of row chunks whose factor-gradient partials are summed in order.
const CHUNKS: usize = 64;

/// `u = z·Kb` for one row (z, u: a×b).
#[inline]
fn right<T: Scalar>(z: &[T], kb: &[T], u: &mut [T], a: usize, b: usize) {
    for i in 0..a {
        for l in 0..b {
            let mut s = T::zero();
            for j in 0..b {
                s = s + z[i * b + j] * kb[j * b + l];
            }
            u[i * b + l] = s;
        }
    }
}

pub fn kron_fwd<T: Scalar>(
    y: MatMut<Vec<T>>,
    z: Mat<Vec<T>>,
    ka: Mat<Vec<T>>,
    kb: Mat<Vec<T>>,
    scratch: &mut [T],
    accumulate: bool,
) {
    let (a, b) = (ka.rows, kb.rows);
    assert_eq!(z.cols, a * b);
    assert_eq!((y.rows, y.cols), (z.rows, a * b));
    let (ka, kb) =
        (super::par::contiguous(&ka).expect("ka contiguous"), super::par::contiguous(&kb).expect("kb contiguous"));
    let r = a * b;
    let scratch = &mut scratch[..z.rows * r];
    par_rows(y).zip(scratch.par_chunks_mut(r)).for_each(|((i, yr), u)| {
        right(row(&z, i), kb, u, a, b);
        for k in 0..a {
            for l in 0..b {
                let mut s = T::zero();
                for ii in 0..a {
                    s = s + ka[ii * a + k] * u[ii * b + l];
                }
                let o = &mut yr[k * b + l];
                *o = if accumulate { *o + s } else { s };
            }
        }
    });
}

pub fn kron_bwd<T: Scalar>(args: KronBwd<Vec<T>>) {
    let KronBwd { dz, dka, dkb, dy, z, ka, kb, scratch } = args;
    let (a, b) = (ka.rows, kb.rows);
    let r = a * b;
    let rows = z.rows;
    assert_eq!((dz.rows, dz.cols), (rows, r));
    let (ka, kb) =
        (super::par::contiguous(&ka).expect("ka contiguous"), super::par::contiguous(&kb).expect("kb contiguous"));
    let (work, partial) = scratch.split_at_mut(2 * rows * r);
    let partial = &mut partial[..CHUNKS * (a * a + b * b)];
    let per = rows.div_ceil(CHUNKS).max(1);
    let dz_ld = dz.ld;
    let dz_base = SendPtr(dz.buf[dz.off..].as_mut_ptr());
    let work = SendPtr(work.as_mut_ptr());
    partial.par_chunks_mut(a * a + b * b).enumerate().for_each(|(c, part)| {
        part.fill(T::zero());
        let (pa, pb) = part.split_at_mut(a * a);
        for i in (c * per).min(rows)..((c + 1) * per).min(rows) {
            // SAFETY: chunk c owns rows c·per.. of dz and of the work area.
            let (u, du, dzr) = unsafe {
                (
                    std::slice::from_raw_parts_mut(work.get().add(2 * i * r), r),
                    std::slice::from_raw_parts_mut(work.get().add(2 * i * r + r), r),
                    std::slice::from_raw_parts_mut(dz_base.get().add(i * dz_ld), r),
                )
            };
            let (zr, dyr) = (row(&z, i), row(&dy, i));
            right(zr, kb, u, a, b);
            // dU = Ka·dY ; dKa[ii,k] += Σ_l U[ii,l]·dY[k,l]
            for ii in 0..a {
                for l in 0..b {
                    let mut s = T::zero();
                    for k in 0..a {
                        s = s + ka[ii * a + k] * dyr[k * b + l];
                    }
                    du[ii * b + l] = s;
                }
                for k in 0..a {
                    let mut s = T::zero();
                    for l in 0..b {
                        s = s + u[ii * b + l] * dyr[k * b + l];
                    }
                    pa[ii * a + k] = pa[ii * a + k] + s;
                }
            }
            // dZ += dU·Kbᵀ ; dKb[j,l] += Σ_ii Z[ii,j]·dU[ii,l]
            for ii in 0..a {
                for j in 0..b {
                    let mut s = T::zero();
                    for l in 0..b {
                        s = s + du[ii * b + l] * kb[j * b + l];
                    }
                    dzr[ii * b + j] = dzr[ii * b + j] + s;
                }
            }
            for j in 0..b {
                for l in 0..b {
                    let mut s = T::zero();
                    for ii in 0..a {
                        s = s + zr[ii * b + j] * du[ii * b + l];
                    }
                    pb[j * b + l] = pb[j * b + l] + s;
                }
            }
        }
    });
    let add = |dst: MatMut<Vec<T>>, off: usize, n: usize| {
        let d = &mut dst.buf[dst.off..dst.off + n];
        for c in 0..CHUNKS {
            let p = &partial[c * (a * a + b * b) + off..][..n];
            for (o, v) in d.iter_mut().zip(p) {
                *o = *o + *v;
            }
        }
    };
    assert!(dka.is_contiguous() && dkb.is_contiguous());
    add(dka, 0, a * a);
    add(dkb, a * a, b * b);
}
