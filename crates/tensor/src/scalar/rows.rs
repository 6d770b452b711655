//! The update and norm row formulas, written once: the trait's defaults (f64) and the
//! dispatched f32 kernels in [`super::simd`] inline the same bodies, so every path computes the same
//! operations in the same order.

use super::AdamConsts;
use num_traits::Float;

#[inline(always)]
pub fn axpy<T: Float>(d: &mut [T], s: &[T], a: T) {
    for (o, v) in d.iter_mut().zip(s) {
        *o = *o + a * *v;
    }
}

#[inline(always)]
pub fn scale<T: Float>(x: &mut [T], f: T) {
    x.iter_mut().for_each(|v| *v = *v * f);
}

#[inline(always)]
pub fn softmax_grad<T: Float>(d: &mut [T], p: &[T], dsum: T) {
    for (d, pv) in d.iter_mut().zip(p) {
        *d = *pv * (*d - dsum);
    }
}

#[inline(always)]
pub fn add_products<T: Float>(acc: &mut [T], a: &[T], b: &[T]) {
    for ((o, x), y) in acc.iter_mut().zip(a).zip(b) {
        *o = *o + *x * *y;
    }
}

#[inline(always)]
pub fn norm_grad<T: Float>(o: &mut [T], g: &[T], x: &[T], gamma: &[T], s: T, accumulate: bool) {
    let rows = o.iter_mut().zip(g).zip(x).zip(gamma);
    // The branch outside the loops, so each loop vectorises on its own.
    if accumulate {
        rows.for_each(|(((o, gv), v), gj)| *o = *o + (*gj * *gv + s * *v));
    } else {
        rows.for_each(|(((o, gv), v), gj)| *o = *gj * *gv + s * *v);
    }
}

/// The inverse rotation multiplies the sine by −1 outside the loop (exact: −1·s = −s), so
/// the loop has no branch.
#[inline(always)]
pub fn rotate_halves<T: Float>(a: &mut [T], b: &mut [T], c: &[T], s: &[T], inverse: bool) {
    let sign = if inverse { -T::one() } else { T::one() };
    for (((a, b), c), s) in a.iter_mut().zip(b.iter_mut()).zip(c).zip(s) {
        let (x1, x2, sj) = (*a, *b, sign * *s);
        *a = x1 * *c - x2 * sj;
        *b = x2 * *c + x1 * sj;
    }
}

#[inline(always)]
pub fn adamw<T: Float>(p: &mut [T], g: &[T], m: &mut [T], v: &mut [T], k: &AdamConsts<T>) {
    for (((p, g), m), v) in p.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()) {
        let g = *g * k.gs;
        *m = k.b1 * *m + k.ob1 * g;
        *v = k.b2 * *v + k.ob2 * g * g;
        let denom = v.sqrt() / k.sq_bc2 + k.eps;
        *p = *p * k.keep - k.step * *m / denom;
    }
}
