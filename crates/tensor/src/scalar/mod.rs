//! Element types the CPU backend computes in: f32 for training, f64 for gradient checks, and
//! the row-level elementwise math of the hot kernels (exp, sigmoid, SiLU), which for f32 is
//! vectorised and dispatched at run time to the widest SIMD the CPU has.

use num_traits::Float;
use std::fmt::Debug;

pub trait Scalar: Float + Default + Debug + Send + Sync + 'static + std::iter::Sum {
    const NAME: &'static str;
    fn of(x: f64) -> Self;
    fn f64(self) -> f64;

    /// eˣ to a few ulp (f32: a polynomial that vectorises; f64: the library exp).
    fn exp_fast(self) -> Self;

    /// `x[i] ← e^(x[i] − m)`, returning Σ of the results ([`Scalar::total`]).
    fn exp_shifted(x: &mut [Self], m: Self) -> Self {
        Self::exp_shifted_unsummed(x, m);
        Self::total(x)
    }
    /// `Σ e^(x[i] − m)`, `x` unchanged (f32: in [`Scalar::total`]'s lanes).
    fn exp_sum(x: &[Self], m: Self) -> Self {
        x.iter().fold(Self::zero(), |s, v| s + (*v - m).exp_fast())
    }
    /// `x[i] ← e^(x[i] − m)`, for callers that do not need the sum.
    fn exp_shifted_unsummed(x: &mut [Self], m: Self) {
        for v in x.iter_mut() {
            *v = (*v - m).exp_fast();
        }
    }
    /// A causal row: `x[..live] ← e^(x − m)` and `x[live..] ← 0`, returning the live part's
    /// sum. f32 takes the last live entries in a masked vector rather than one at a time
    /// (rows of every length 1..=S: a scalar tail of 7.5 entries on average took a third of
    /// the exponentials' time at seq 256), summed in [`Scalar::total`]'s lanes.
    fn exp_shifted_live(x: &mut [Self], live: usize, m: Self) -> Self {
        let (l, dead) = x.split_at_mut(live);
        let s = Self::exp_shifted(l, m);
        dead.fill(Self::zero());
        s
    }
    /// Σ x. f32 sums in 16 fixed lanes combined in a fixed order (vectorises; the same bits
    /// on every machine); f64 in index order.
    fn total(x: &[Self]) -> Self {
        x.iter().fold(Self::zero(), |s, v| s + *v)
    }
    /// Σ a·b (lanes as [`Scalar::total`]).
    fn dot(a: &[Self], b: &[Self]) -> Self {
        a.iter().zip(b).fold(Self::zero(), |s, (x, y)| s + *x * *y)
    }
    /// Σ a·b·c (lanes as [`Scalar::total`]).
    fn dot3(a: &[Self], b: &[Self], c: &[Self]) -> Self {
        a.iter().zip(b).zip(c).fold(Self::zero(), |s, ((x, y), z)| s + *x * *y * *z)
    }
    /// max x (−∞ for an empty slice).
    fn max_of(x: &[Self]) -> Self {
        x.iter().fold(Self::neg_infinity(), |m, v| m.max(*v))
    }
    /// `y = x·σ(x)`.
    fn silu_row(y: &mut [Self], x: &[Self]) {
        for (o, v) in y.iter_mut().zip(x) {
            *o = *v * sigmoid(*v);
        }
    }
    /// `d ← d·silu'(x)`.
    fn silu_grad_row(d: &mut [Self], x: &[Self]) {
        for (o, v) in d.iter_mut().zip(x) {
            *o = *o * silu_grad(*v);
        }
    }
    /// Σ x² in f64, in [`lane_sum`]'s order (the same bits on every path).
    fn sumsq_lanes(x: &[Self]) -> f64 {
        lane_sum(x, &|v: Self| {
            let v = v.f64();
            v * v
        })
    }
    /// `d ← d·silu'(x)`, then `Σ d·p` ([`Scalar::dot`]'s order), then `d ← d·st`: one row of
    /// [`crate::Backend::silu_norm_bwd`], returning the sum.
    fn silu_norm_row(d: &mut [Self], x: &[Self], p: &[Self], st: Self) -> Self {
        Self::silu_grad_row(d, x);
        let s = Self::dot(d, p);
        Self::scale_row(d, st);
        s
    }
    /// `d ← p·(d − D)`: a softmax row's gradient from dP and D = Σ p·dP.
    fn softmax_grad_row(d: &mut [Self], p: &[Self], dsum: Self) {
        rows::softmax_grad(d, p, dsum)
    }
    /// `acc ← acc + a·b` (a column reduction's row step).
    fn add_products(acc: &mut [Self], a: &[Self], b: &[Self]) {
        rows::add_products(acc, a, b)
    }
    /// `o ← γ·g + s·x`, or `o ← o + (γ·g + s·x)` when `accumulate` (the online norm's dx row).
    fn norm_grad_row(o: &mut [Self], g: &[Self], x: &[Self], gamma: &[Self], s: Self, accumulate: bool) {
        rows::norm_grad(o, g, x, gamma, s, accumulate)
    }
    /// `d ← d + a·s`.
    fn axpy_row(d: &mut [Self], s: &[Self], a: Self) {
        rows::axpy(d, s, a)
    }
    /// `x ← x·f`.
    fn scale_row(x: &mut [Self], f: Self) {
        rows::scale(x, f)
    }
    /// Rotate each pair `(a[j], b[j])` of the halves of a head by the angle whose cosine and
    /// sine are `c[j]`, `s[j]` (by its negative when `inverse`).
    fn rotate_halves(a: &mut [Self], b: &mut [Self], c: &[Self], s: &[Self], inverse: bool) {
        rows::rotate_halves(a, b, c, s, inverse)
    }
    /// One AdamW update of a chunk, in PyTorch's arithmetic order ([`AdamConsts`]).
    fn adamw_chunk(p: &mut [Self], g: &[Self], m: &mut [Self], v: &mut [Self], k: &AdamConsts<Self>) {
        rows::adamw(p, g, m, v, k)
    }
    /// `m = act(g)·u` (act = SiLU when `outer`).
    fn swiglu_row(m: &mut [Self], g: &[Self], u: &[Self], outer: bool) {
        for ((o, gv), uv) in m.iter_mut().zip(g).zip(u) {
            *o = if outer { *gv * sigmoid(*gv) } else { *gv } * *uv;
        }
    }
    /// `dg, du` of `m = act(g)·u` given `dm`; with `rebuild`, each element of `dm` is then
    /// overwritten by the product, the bits of [`swiglu_row`](Self::swiglu_row) (act(g)
    /// computed once for both).
    fn swiglu_bwd_row(
        dg: &mut [Self],
        du: &mut [Self],
        dm: &mut [Self],
        g: &[Self],
        u: &[Self],
        outer: bool,
        rebuild: bool,
    ) {
        for ((((dg, du), d), gv), uv) in dg.iter_mut().zip(du.iter_mut()).zip(dm.iter_mut()).zip(g).zip(u) {
            if outer {
                let s = sigmoid(*gv);
                *dg = *d * *uv * (s * (Self::one() + *gv * (Self::one() - s)));
                *du = *d * *gv * s;
                if rebuild {
                    *d = *gv * s * *uv;
                }
            } else {
                *dg = *d * *uv;
                *du = *d * *gv;
                if rebuild {
                    *d = *gv * *uv;
                }
            }
        }
    }
}

/// Independent accumulators of [`lane_sum`].
const LANES: usize = 8;

/// `Σ f(v)` over a slice with element k going to accumulator k mod 8, the accumulators then
/// combined pairwise and the tail added in order: a fixed order, and no chain of dependent
/// additions for the CPU to wait on (one accumulator made the gradient norm latency-bound).
#[inline(always)]
pub fn lane_sum<T: Copy>(x: &[T], f: &impl Fn(T) -> f64) -> f64 {
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

/// The per-step constants of an AdamW update, in the element type.
#[derive(Clone, Copy, Debug)]
pub struct AdamConsts<T> {
    pub b1: T,
    pub b2: T,
    /// 1 − β₁, 1 − β₂.
    pub ob1: T,
    pub ob2: T,
    /// 1 − lr·λ (1 without decay).
    pub keep: T,
    /// lr / (1 − β₁ᵗ).
    pub step: T,
    /// √(1 − β₂ᵗ).
    pub sq_bc2: T,
    pub eps: T,
    /// The gradient's scale (1 / loss scale, clipping).
    pub gs: T,
}

#[inline(always)]
pub fn sigmoid<T: Scalar>(x: T) -> T {
    T::one() / (T::one() + (-x).exp_fast())
}

#[inline(always)]
pub fn silu_grad<T: Scalar>(x: T) -> T {
    let s = sigmoid(x);
    s * (T::one() + x * (T::one() - s))
}

mod exp;
mod impls;
mod rows;
mod simd;
#[cfg(test)]
mod tests;

pub use exp::expf;
