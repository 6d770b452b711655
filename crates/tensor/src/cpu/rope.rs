//! Rotary position embedding, Hugging Face LLaMA layout (rotate_half).

use super::par::par_rows;
use crate::backend::AttnShape;
use crate::scalar::Scalar;
use crate::view::MatMut;
use rayon::prelude::*;

/// `[cos | sin]`, each `seq × head_dim/2` (one column per entry of `inv_freq`), computed in f64.
pub fn rope_table<T: Scalar>(seq: usize, inv_freq: &[f64]) -> Vec<T> {
    let half = inv_freq.len();
    let mut t = vec![T::zero(); 2 * seq * half];
    for p in 0..seq {
        for (i, &inv) in inv_freq.iter().enumerate() {
            let a = p as f64 * inv;
            t[p * half + i] = T::of(a.cos());
            t[seq * half + p * half + i] = T::of(a.sin());
        }
    }
    t
}

pub fn rope<T: Scalar>(x: MatMut<Vec<T>>, table: &[T], seq: usize, head_dim: usize, inverse: bool) {
    let half = head_dim / 2;
    assert_eq!(x.cols % head_dim, 0, "rope: width {} is not a multiple of the head dim {head_dim}", x.cols);
    assert_eq!(table.len(), 2 * seq * half, "rope: table for another shape");
    let (cos, sin) = table.split_at(seq * half);
    par_rows(x).for_each(|(i, r)| {
        let p = i % seq;
        let (c, s) = (&cos[p * half..(p + 1) * half], &sin[p * half..(p + 1) * half]);
        for h in r.chunks_exact_mut(head_dim) {
            let (a, b) = h.split_at_mut(half);
            T::rotate_halves(a, b, c, s, inverse);
        }
    });
}

/// [`rope`] on q, then on k: the CPU runs the two as the model did before they were one kernel.
pub fn rope_qk<T: Scalar>(qkv: &mut Vec<T>, table: &[T], sh: AttnShape, inverse: bool) {
    let (t, qw, kw) = (sh.tokens(), sh.q_width(), sh.kv_width());
    rope(MatMut::at(qkv, 0, t, qw, qw), table, sh.seq, sh.head_dim, inverse);
    rope(MatMut::at(qkv, t * qw, t, kw, kw), table, sh.seq, sh.head_dim, inverse);
}
