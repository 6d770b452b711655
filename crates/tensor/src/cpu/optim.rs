//! AdamW with decoupled weight decay, in PyTorch's arithmetic order.

use crate::args::AdamUpdate;
use crate::scalar::Scalar;
use rayon::prelude::*;

const CHUNK: usize = 4096;

/// AdamW over elements `off..off + n` of p, g, m and v.
pub fn adamw<T: Scalar>(args: AdamUpdate<Vec<T>>) {
    let AdamUpdate { p, g, m, v, off, n, step: s, decay } = args;
    let r = off..off + n;
    let (p, g, m, v) = (&mut p[r.clone()], &g[r.clone()], &mut m[r.clone()], &mut v[r]);
    let (b1, b2) = (T::of(s.beta1), T::of(s.beta2));
    let (ob1, ob2) = (T::of(1.0 - s.beta1), T::of(1.0 - s.beta2));
    let keep = T::of(if decay { 1.0 - s.lr * s.weight_decay } else { 1.0 });
    let step = T::of(s.lr / s.bias_corr1);
    let sq_bc2 = T::of(s.bias_corr2.sqrt());
    let eps = T::of(s.eps);
    let gs = T::of(s.grad_scale);
    p.par_chunks_mut(CHUNK)
        .zip(g.par_chunks(CHUNK))
        .zip(m.par_chunks_mut(CHUNK))
        .zip(v.par_chunks_mut(CHUNK))
        .for_each(|(((p, g), m), v)| {
            for (((p, g), m), v) in p.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()) {
                let g = *g * gs;
                *m = b1 * *m + ob1 * g;
                *v = b2 * *v + ob2 * g * g;
                let denom = v.sqrt() / sq_bc2 + eps;
                *p = *p * keep - step * *m / denom;
            }
        });
}
