//! AdamW with decoupled weight decay, in PyTorch's arithmetic order.

use crate::args::AdamUpdate;
use crate::scalar::{AdamConsts, Scalar};
use rayon::prelude::*;

const CHUNK: usize = 4096;

/// AdamW over elements `off..off + n` of p, g, m and v.
pub fn adamw<T: Scalar>(args: AdamUpdate<Vec<T>>) {
    let AdamUpdate { p, g, m, v, off, n, step: s, decay } = args;
    let r = off..off + n;
    let (p, g, m, v) = (&mut p[r.clone()], &g[r.clone()], &mut m[r.clone()], &mut v[r]);
    let k = AdamConsts {
        b1: T::of(s.beta1),
        b2: T::of(s.beta2),
        ob1: T::of(1.0 - s.beta1),
        ob2: T::of(1.0 - s.beta2),
        keep: T::of(if decay { 1.0 - s.lr * s.weight_decay } else { 1.0 }),
        step: T::of(s.lr / s.bias_corr1),
        sq_bc2: T::of(s.bias_corr2.sqrt()),
        eps: T::of(s.eps),
        gs: T::of(s.grad_scale),
    };
    p.par_chunks_mut(CHUNK)
        .zip(g.par_chunks(CHUNK))
        .zip(m.par_chunks_mut(CHUNK))
        .zip(v.par_chunks_mut(CHUNK))
        .for_each(|(((p, g), m), v)| T::adamw_chunk(p, g, m, v, &k));
}
