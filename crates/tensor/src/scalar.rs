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

/// The update and norm row formulas, written once: the trait's defaults (f64) and the
/// dispatched f32 kernels in [`simd`] inline the same bodies, so every path computes the same
/// operations in the same order.
mod rows {
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

/// eˣ for f32 (Cephes `expf`): Cody–Waite range reduction by ln 2 and a degree-6
/// polynomial, ≤ 2 ulp on the clamped range. Written with fused multiply-adds (`mul_add`,
/// one rounding each), so every path computes the same bits: the AVX-512 and AVX2+FMA ones
/// in hardware, a CPU without FMA through the C library's correctly rounded `fmaf` (slowly).
/// Fused, it takes two thirds of the unfused version's time (0.47 against 0.70 ns an element
/// on AVX-512); unfused, the softmax's exponentials were a fifth of attention's forward at
/// seq 4096.
#[inline(always)]
pub fn expf(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const C1: f32 = 0.693_359_4;
    const C2: f32 = -2.121_944_4e-4;
    let x = x.clamp(-87.3, 88.3);
    let n = (x * LOG2E).round_ties_even();
    let r = (-n).mul_add(C2, (-n).mul_add(C1, x));
    let p = 1.987_569_1e-4f32
        .mul_add(r, 1.398_199_9e-3)
        .mul_add(r, 8.333_452e-3)
        .mul_add(r, 4.166_579_6e-2)
        .mul_add(r, 1.666_666_5e-1)
        .mul_add(r, 0.5);
    let y = p.mul_add(r * r, r) + 1.0;
    y * pow2i(n)
}

/// 2ⁿ for an integral f32 n in [-126, 128], from n's bits rather than `n as i32`, whose
/// saturating conversion keeps LLVM from vectorising the loops `expf` is inlined into (eight
/// scalar conversions per AVX2 vector): n + 127 ∈ [1, 255] sits in the low mantissa bits of
/// n + 127 + 2²³. A NaN n gives some finite power, but then `expf`'s y is NaN already.
#[inline(always)]
fn pow2i(n: f32) -> f32 {
    let biased = (n + (127.0 + 8_388_608.0)).to_bits().wrapping_sub(8_388_608.0f32.to_bits());
    f32::from_bits(biased << 23)
}

impl Scalar for f32 {
    const NAME: &'static str = "f32";
    #[inline(always)]
    fn of(x: f64) -> Self {
        x as f32
    }
    #[inline(always)]
    fn f64(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn exp_fast(self) -> Self {
        expf(self)
    }
    fn exp_shifted(x: &mut [f32], m: f32) -> f32 {
        // A whole row: its tail after the last whole vector one entry at a time, summed after
        // the lanes as `total` sums it (the same bits).
        simd::exp_shifted_live(x, x.len(), m)
    }
    fn exp_shifted_unsummed(x: &mut [f32], m: f32) {
        simd::exp_shifted(x, m)
    }
    fn exp_shifted_live(x: &mut [f32], live: usize, m: f32) -> f32 {
        simd::exp_shifted_live(x, live, m)
    }
    fn exp_sum(x: &[f32], m: f32) -> f32 {
        simd::exp_sum(x, m)
    }
    fn total(x: &[f32]) -> f32 {
        simd::sum(x)
    }
    fn dot(a: &[f32], b: &[f32]) -> f32 {
        simd::dot(a, b)
    }
    fn dot3(a: &[f32], b: &[f32], c: &[f32]) -> f32 {
        simd::dot3(a, b, c)
    }
    fn max_of(x: &[f32]) -> f32 {
        simd::max_of(x)
    }
    fn silu_row(y: &mut [f32], x: &[f32]) {
        simd::silu_row(y, x)
    }
    fn silu_grad_row(d: &mut [f32], x: &[f32]) {
        simd::silu_grad_row(d, x)
    }
    fn swiglu_row(m: &mut [f32], g: &[f32], u: &[f32], outer: bool) {
        simd::swiglu_row(m, g, u, outer)
    }
    fn swiglu_bwd_row(
        dg: &mut [f32],
        du: &mut [f32],
        dm: &mut [f32],
        g: &[f32],
        u: &[f32],
        outer: bool,
        rebuild: bool,
    ) {
        simd::swiglu_bwd_row(dg, du, dm, g, u, outer, rebuild)
    }
    fn sumsq_lanes(x: &[f32]) -> f64 {
        simd::sumsq_lanes(x)
    }
    fn silu_norm_row(d: &mut [f32], x: &[f32], p: &[f32], st: f32) -> f32 {
        simd::silu_norm_row(d, x, p, st)
    }
    fn softmax_grad_row(d: &mut [f32], p: &[f32], dsum: f32) {
        simd::softmax_grad_row(d, p, dsum)
    }
    fn add_products(acc: &mut [f32], a: &[f32], b: &[f32]) {
        simd::add_products(acc, a, b)
    }
    fn norm_grad_row(o: &mut [f32], g: &[f32], x: &[f32], gamma: &[f32], s: f32, accumulate: bool) {
        simd::norm_grad_row(o, g, x, gamma, s, accumulate)
    }
    fn axpy_row(d: &mut [f32], s: &[f32], a: f32) {
        simd::axpy_row(d, s, a)
    }
    fn scale_row(x: &mut [f32], f: f32) {
        simd::scale_row(x, f)
    }
    fn rotate_halves(a: &mut [f32], b: &mut [f32], c: &[f32], s: &[f32], inverse: bool) {
        simd::rotate_halves(a, b, c, s, inverse)
    }
    fn adamw_chunk(p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], k: &AdamConsts<f32>) {
        simd::adamw_chunk(p, g, m, v, k)
    }
}

impl Scalar for f64 {
    const NAME: &'static str = "f64";
    #[inline(always)]
    fn of(x: f64) -> Self {
        x
    }
    #[inline(always)]
    fn f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn exp_fast(self) -> Self {
        self.exp()
    }
}

/// f32 row kernels compiled for several instruction sets, chosen once at run time.
mod simd {
    use super::expf;
    use multiversion::multiversion;

    #[inline(always)]
    fn sig(x: f32) -> f32 {
        1.0 / (1.0 + expf(-x))
    }

    /// Lanes of the fixed-order reductions.
    const L: usize = 16;

    /// Combine lane partials pairwise in a fixed order, then add the tail in order.
    #[inline(always)]
    fn fold_lanes(mut acc: [f32; L], tail: f32) -> f32 {
        let mut w = L;
        while w > 1 {
            w /= 2;
            for i in 0..w {
                acc[i] += acc[i + w];
            }
        }
        acc[0] + tail
    }

    #[multiversion(targets("x86_64+avx512f+avx512bw+avx512dq+avx512vl", "x86_64+avx2+fma"))]
    pub fn sum(x: &[f32]) -> f32 {
        let mut acc = [0.0f32; L];
        let mut chunks = x.chunks_exact(L);
        for c in &mut chunks {
            for i in 0..L {
                acc[i] += c[i];
            }
        }
        fold_lanes(acc, chunks.remainder().iter().fold(0.0, |s, v| s + *v))
    }

    #[multiversion(targets("x86_64+avx512f+avx512bw+avx512dq+avx512vl", "x86_64+avx2+fma"))]
    pub fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (a, b) = (&a[..n], &b[..n]);
        let mut acc = [0.0f32; L];
        let (ca, cb) = (a.chunks_exact(L), b.chunks_exact(L));
        let (ra, rb) = (ca.remainder(), cb.remainder());
        for (x, y) in ca.zip(cb) {
            for i in 0..L {
                acc[i] += x[i] * y[i];
            }
        }
        fold_lanes(acc, ra.iter().zip(rb).fold(0.0, |s, (x, y)| s + *x * *y))
    }

    #[multiversion(targets("x86_64+avx512f+avx512bw+avx512dq+avx512vl", "x86_64+avx2+fma"))]
    pub fn dot3(a: &[f32], b: &[f32], c: &[f32]) -> f32 {
        let n = a.len().min(b.len()).min(c.len());
        let (a, b, c) = (&a[..n], &b[..n], &c[..n]);
        let mut acc = [0.0f32; L];
        let (ca, cb, cc) = (a.chunks_exact(L), b.chunks_exact(L), c.chunks_exact(L));
        let (ra, rb, rc) = (ca.remainder(), cb.remainder(), cc.remainder());
        for ((x, y), z) in ca.zip(cb).zip(cc) {
            for i in 0..L {
                acc[i] += x[i] * y[i] * z[i];
            }
        }
        fold_lanes(acc, ra.iter().zip(rb).zip(rc).fold(0.0, |s, ((x, y), z)| s + *x * *y * *z))
    }

    #[multiversion(targets("x86_64+avx512f+avx512bw+avx512dq+avx512vl", "x86_64+avx2+fma"))]
    pub fn max_of(x: &[f32]) -> f32 {
        let mut acc = [f32::NEG_INFINITY; L];
        let mut chunks = x.chunks_exact(L);
        for c in &mut chunks {
            for i in 0..L {
                acc[i] = acc[i].max(c[i]);
            }
        }
        let m = acc.iter().fold(f32::NEG_INFINITY, |m, v| m.max(*v));
        chunks.remainder().iter().fold(m, |m, v| m.max(*v))
    }

    #[multiversion(targets("x86_64+avx512f+avx512bw+avx512dq+avx512vl", "x86_64+avx2+fma"))]
    pub fn exp_shifted(x: &mut [f32], m: f32) {
        for v in x.iter_mut() {
            *v = expf(*v - m);
        }
    }

    /// Lane i of a vector keeps its value when i < `tail`, else becomes +0 (a bit mask, which
    /// vectorises to an `and` and clears a NaN or infinity as well).
    #[inline(always)]
    fn lanes_below(tail: usize) -> [u32; L] {
        std::array::from_fn(|i| if i < tail { u32::MAX } else { 0 })
    }

    #[inline(always)]
    fn keep(v: f32, bits: u32) -> f32 {
        f32::from_bits(v.to_bits() & bits)
    }

    /// [`super::Scalar::exp_shifted_live`]: whole vectors up to `live`, then the vector holding
    /// the last live entries with its later lanes zero (when the row has room for it; else
    /// they go one at a time and are summed after the lanes, as `total` sums a tail), then
    /// zeros. Which entries enter which lane depends on `live` and the row's length only.
    #[multiversion(targets("x86_64+avx512f+avx512bw+avx512dq+avx512vl", "x86_64+avx2+fma"))]
    pub fn exp_shifted_live(x: &mut [f32], live: usize, m: f32) -> f32 {
        let mut acc = [0.0f32; L];
        let (whole, rest) = x.split_at_mut(live / L * L);
        for c in whole.chunks_exact_mut(L) {
            for i in 0..L {
                c[i] = expf(c[i] - m);
                acc[i] += c[i];
            }
        }
        let tail = live % L;
        let mut last = 0.0;
        if tail > 0 && rest.len() >= L {
            let (c, dead) = rest.split_at_mut(L);
            let bits = lanes_below(tail);
            for i in 0..L {
                // Lanes past the live entries may hold anything (even NaN): masked to zero.
                c[i] = keep(expf(c[i] - m), bits[i]);
                acc[i] += c[i];
            }
            dead.fill(0.0);
        } else {
            let (c, dead) = rest.split_at_mut(tail);
            for v in c.iter_mut() {
                *v = expf(*v - m);
                last += *v;
            }
            dead.fill(0.0);
        }
        fold_lanes(acc, last)
    }

    /// Σ e^(x − m) in `sum`'s order, without writing the exponentials.
    #[multiversion(targets("x86_64+avx512f+avx512bw+avx512dq+avx512vl", "x86_64+avx2+fma"))]
    pub fn exp_sum(x: &[f32], m: f32) -> f32 {
        let mut acc = [0.0f32; L];
        let mut chunks = x.chunks_exact(L);
        for c in &mut chunks {
            for i in 0..L {
                acc[i] += expf(c[i] - m);
            }
        }
        fold_lanes(acc, chunks.remainder().iter().fold(0.0, |s, v| s + expf(*v - m)))
    }

    #[multiversion(targets("x86_64+avx512f+avx512bw+avx512dq+avx512vl", "x86_64+avx2+fma"))]
    pub fn silu_row(y: &mut [f32], x: &[f32]) {
        for (o, v) in y.iter_mut().zip(x) {
            *o = *v * sig(*v);
        }
    }

    #[multiversion(targets("x86_64+avx512f+avx512bw+avx512dq+avx512vl", "x86_64+avx2+fma"))]
    pub fn silu_grad_row(d: &mut [f32], x: &[f32]) {
        for (o, v) in d.iter_mut().zip(x) {
            let s = sig(*v);
            *o *= s * (1.0 + *v * (1.0 - s));
        }
    }

    #[multiversion(targets("x86_64+avx512f+avx512bw+avx512dq+avx512vl", "x86_64+avx2+fma"))]
    pub fn swiglu_row(m: &mut [f32], g: &[f32], u: &[f32], outer: bool) {
        if outer {
            for ((o, gv), uv) in m.iter_mut().zip(g).zip(u) {
                *o = *gv * sig(*gv) * *uv;
            }
        } else {
            for ((o, gv), uv) in m.iter_mut().zip(g).zip(u) {
                *o = *gv * *uv;
            }
        }
    }

    /// One loop for each of the four cases, so each vectorises without a test inside.
    #[multiversion(targets("x86_64+avx512f+avx512bw+avx512dq+avx512vl", "x86_64+avx2+fma"))]
    pub fn swiglu_bwd_row(
        dg: &mut [f32],
        du: &mut [f32],
        dm: &mut [f32],
        g: &[f32],
        u: &[f32],
        outer: bool,
        rebuild: bool,
    ) {
        let n = dg.len().min(du.len()).min(dm.len()).min(g.len()).min(u.len());
        let (dg, du, dm, g, u) = (&mut dg[..n], &mut du[..n], &mut dm[..n], &g[..n], &u[..n]);
        match (outer, rebuild) {
            (true, false) => {
                for i in 0..n {
                    let s = sig(g[i]);
                    dg[i] = dm[i] * u[i] * (s * (1.0 + g[i] * (1.0 - s)));
                    du[i] = dm[i] * g[i] * s;
                }
            }
            (true, true) => {
                for i in 0..n {
                    let s = sig(g[i]);
                    dg[i] = dm[i] * u[i] * (s * (1.0 + g[i] * (1.0 - s)));
                    du[i] = dm[i] * g[i] * s;
                    dm[i] = g[i] * s * u[i];
                }
            }
            (false, false) => {
                for i in 0..n {
                    dg[i] = dm[i] * u[i];
                    du[i] = dm[i] * g[i];
                }
            }
            (false, true) => {
                for i in 0..n {
                    dg[i] = dm[i] * u[i];
                    du[i] = dm[i] * g[i];
                    dm[i] = g[i] * u[i];
                }
            }
        }
    }
    #[multiversion(targets("x86_64+avx512f+avx512bw+avx512dq+avx512vl", "x86_64+avx2+fma"))]
    pub fn sumsq_lanes(x: &[f32]) -> f64 {
        super::lane_sum(x, &|v: f32| {
            let v = v as f64;
            v * v
        })
    }

    /// One loop: each lane's product enters the sum before the row is scaled, as in
    /// `silu_grad_row`, `dot` and `scale_row` in turn (the same bits).
    #[multiversion(targets("x86_64+avx512f+avx512bw+avx512dq+avx512vl", "x86_64+avx2+fma"))]
    pub fn silu_norm_row(d: &mut [f32], x: &[f32], p: &[f32], st: f32) -> f32 {
        let n = d.len().min(x.len()).min(p.len());
        let (d, x, p) = (&mut d[..n], &x[..n], &p[..n]);
        let grad = |d: f32, v: f32| {
            let s = sig(v);
            d * (s * (1.0 + v * (1.0 - s)))
        };
        let mut acc = [0.0f32; L];
        let mut cd = d.chunks_exact_mut(L);
        let (cx, cp) = (x.chunks_exact(L), p.chunks_exact(L));
        let (rx, rp) = (cx.remainder(), cp.remainder());
        for ((dc, xc), pc) in (&mut cd).zip(cx).zip(cp) {
            for i in 0..L {
                let g = grad(dc[i], xc[i]);
                acc[i] += g * pc[i];
                dc[i] = g * st;
            }
        }
        let mut tail = 0.0f32;
        for ((dv, xv), pv) in cd.into_remainder().iter_mut().zip(rx).zip(rp) {
            let g = grad(*dv, *xv);
            tail += g * *pv;
            *dv = g * st;
        }
        fold_lanes(acc, tail)
    }

    #[multiversion(targets("x86_64+avx512f+avx512bw+avx512dq+avx512vl", "x86_64+avx2+fma"))]
    pub fn softmax_grad_row(d: &mut [f32], p: &[f32], dsum: f32) {
        super::rows::softmax_grad(d, p, dsum)
    }

    #[multiversion(targets("x86_64+avx512f+avx512bw+avx512dq+avx512vl", "x86_64+avx2+fma"))]
    pub fn add_products(acc: &mut [f32], a: &[f32], b: &[f32]) {
        super::rows::add_products(acc, a, b)
    }

    #[multiversion(targets("x86_64+avx512f+avx512bw+avx512dq+avx512vl", "x86_64+avx2+fma"))]
    pub fn norm_grad_row(o: &mut [f32], g: &[f32], x: &[f32], gamma: &[f32], s: f32, accumulate: bool) {
        super::rows::norm_grad(o, g, x, gamma, s, accumulate)
    }

    #[multiversion(targets("x86_64+avx512f+avx512bw+avx512dq+avx512vl", "x86_64+avx2+fma"))]
    pub fn axpy_row(d: &mut [f32], s: &[f32], a: f32) {
        super::rows::axpy(d, s, a)
    }

    #[multiversion(targets("x86_64+avx512f+avx512bw+avx512dq+avx512vl", "x86_64+avx2+fma"))]
    pub fn scale_row(x: &mut [f32], f: f32) {
        super::rows::scale(x, f)
    }

    #[multiversion(targets("x86_64+avx512f+avx512bw+avx512dq+avx512vl", "x86_64+avx2+fma"))]
    pub fn rotate_halves(a: &mut [f32], b: &mut [f32], c: &[f32], s: &[f32], inverse: bool) {
        super::rows::rotate_halves(a, b, c, s, inverse)
    }

    #[multiversion(targets("x86_64+avx512f+avx512bw+avx512dq+avx512vl", "x86_64+avx2+fma"))]
    pub fn adamw_chunk(p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], k: &super::AdamConsts<f32>) {
        super::rows::adamw(p, g, m, v, k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_exp_is_within_two_ulp_of_the_library() {
        let mut worst: f64 = 0.0;
        let mut x = -87.0f32;
        while x < 88.0 {
            let (a, b) = (expf(x) as f64, (x as f64).exp());
            worst = worst.max(((a - b) / b).abs());
            x += 0.0137;
        }
        assert!(worst < 2.5e-7, "relative error {worst:e}");
        assert_eq!(expf(0.0), 1.0);
        assert!(expf(f32::NAN).is_nan());
        assert!(expf(-1e30) >= 0.0 && expf(-1e30) < 1e-37);
    }

    #[test]
    fn two_to_the_n_from_bits_equals_the_integer_conversion_on_its_whole_domain() {
        // After the clamp, n = round(x·log₂e) is an integer in [-126, 128]: every one of them.
        for n in -126..=128 {
            let want = f32::from_bits(((n + 127) as u32) << 23);
            assert_eq!(pow2i(n as f32).to_bits(), want.to_bits(), "2^{n}");
        }
        assert_eq!(pow2i(0.0), 1.0);
        assert_eq!(pow2i(128.0), f32::INFINITY);
    }

    #[test]
    fn lane_reductions_are_exact_and_fixed() {
        let x: Vec<f32> = (0..1037).map(|i| ((i * 7919 % 1000) as f32 - 500.0) * 1e-3).collect();
        let y: Vec<f32> = (0..1037).map(|i| ((i * 104729 % 997) as f32 - 498.0) * 1e-3).collect();
        let exact: f64 = x.iter().zip(&y).map(|(a, b)| *a as f64 * *b as f64).sum();
        assert!((f32::dot(&x, &y) as f64 - exact).abs() < 1e-5);
        assert!((f32::total(&x) as f64 - x.iter().map(|v| *v as f64).sum::<f64>()).abs() < 1e-4);
        assert_eq!(f32::max_of(&x), x.iter().cloned().fold(f32::MIN, f32::max));
        assert_eq!(f32::dot3(&x, &y, &x).to_bits(), f32::dot3(&x, &y, &x).to_bits());
        // The lane order is part of the contract: the same bits as this scalar rendering.
        let mut acc = [0.0f32; 16];
        for (i, (a, b)) in x.iter().zip(&y).enumerate().take(1024) {
            acc[i % 16] += a * b;
        }
        let mut w = 16;
        while w > 1 {
            w /= 2;
            for i in 0..w {
                acc[i] += acc[i + w];
            }
        }
        let tail = x[1024..].iter().zip(&y[1024..]).fold(0.0f32, |s, (a, b)| s + a * b);
        assert_eq!(f32::dot(&x, &y).to_bits(), (acc[0] + tail).to_bits());
    }

    #[test]
    fn dispatched_rows_equal_the_scalar_formulas() {
        let x: Vec<f32> = (0..1000).map(|i| (i as f32 - 500.0) * 0.037).collect();
        let mut y = vec![0.0f32; 1000];
        f32::silu_row(&mut y, &x);
        for (a, v) in y.iter().zip(&x) {
            assert_eq!(a.to_bits(), (*v * (1.0 / (1.0 + expf(-*v)))).to_bits());
        }
        let mut e = x.clone();
        let s = f32::exp_shifted(&mut e, 1.5);
        for (a, v) in e.iter().zip(&x) {
            assert_eq!(a.to_bits(), expf(*v - 1.5).to_bits());
        }
        // Exponentials and sum in one pass: the sum in `total`'s lane order, the same bits.
        assert_eq!(s.to_bits(), f32::total(&e).to_bits());
        let mut u = x.clone();
        f32::exp_shifted_unsummed(&mut u, 1.5);
        assert_eq!(u, e);
        // The sum alone: the same bits again, the input untouched.
        assert_eq!(f32::exp_sum(&x, 1.5).to_bits(), s.to_bits());
        // Against the unvectorised scalar fold (f64 here): within f32 rounding of the terms.
        let naive: f64 = x.iter().map(|v| (*v as f64 - 1.5).exp()).sum();
        assert!((s as f64 - naive).abs() < 1e-6 * naive, "{s} vs {naive}");
    }

    #[test]
    fn causal_rows_take_their_last_entries_masked_and_zero_the_rest() {
        let x: Vec<f32> = (0..70).map(|i| ((i * 7919 % 1000) as f32 - 500.0) * 7e-3).collect();
        for n in [1, 5, 16, 17, 37, 64, 70] {
            for live in 0..=n {
                let mut row = x[..n].to_vec();
                // What lies past the live entries is the caller's old tile: even NaN or ∞.
                for (j, v) in row[live..].iter_mut().enumerate() {
                    *v = [f32::NAN, f32::INFINITY, 1e30][j % 3];
                }
                let s = f32::exp_shifted_live(&mut row, live, 0.25);
                for j in 0..live {
                    assert_eq!(row[j].to_bits(), expf(x[j] - 0.25).to_bits(), "n {n} live {live} entry {j}");
                }
                assert!(row[live..].iter().all(|v| v.to_bits() == 0), "n {n} live {live}: dead entries not +0");
                // The sum: the lanes' order (a masked last vector when the row has room for
                // one), within f32 rounding of the f64 sum.
                let exact: f64 = x[..live].iter().map(|v| (*v as f64 - 0.25).exp()).sum();
                assert!((s as f64 - exact).abs() <= 1e-6 * exact.max(1e-30), "n {n} live {live}: {s} vs {exact}");
                if live / 16 * 16 + 16 <= n || live % 16 == 0 {
                    assert_eq!(s.to_bits(), f32::total(&row).to_bits(), "n {n} live {live}: not in lane order");
                }
            }
        }
    }

    /// The dispatched (SIMD) f32 row kernels against element-by-element scalar renderings of
    /// their formulas: the same bits, so a CPU's SIMD path never changes a result.
    #[test]
    fn dispatched_update_and_norm_rows_equal_the_scalar_formulas() {
        let n = 1037;
        let a: Vec<f32> = (0..n).map(|i| ((i * 7919 % 1000) as f32 - 500.0) * 1e-3).collect();
        let b: Vec<f32> = (0..n).map(|i| ((i * 104729 % 997) as f32 - 498.0) * 1e-3).collect();
        let c: Vec<f32> = (0..n).map(|i| ((i * 31 % 101) as f32 - 50.0) * 2e-2).collect();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();

        let mut d = a.clone();
        f32::axpy_row(&mut d, &b, -0.37);
        let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + -0.37 * y).collect();
        assert_eq!(bits(&d), bits(&want));

        let mut d = a.clone();
        f32::scale_row(&mut d, 1.7);
        assert_eq!(bits(&d), bits(&a.iter().map(|x| x * 1.7).collect::<Vec<_>>()));

        for inverse in [false, true] {
            let (mut x1, mut x2) = (a.clone(), b.clone());
            f32::rotate_halves(&mut x1, &mut x2, &c, &b, inverse);
            for j in 0..n {
                let sj = if inverse { -b[j] } else { b[j] };
                assert_eq!(x1[j].to_bits(), (a[j] * c[j] - b[j] * sj).to_bits());
                assert_eq!(x2[j].to_bits(), (b[j] * c[j] + a[j] * sj).to_bits());
            }
        }

        let mut d = a.clone();
        let sum = f32::silu_norm_row(&mut d, &b, &c, 0.7);
        let mut g = a.clone();
        f32::silu_grad_row(&mut g, &b);
        assert_eq!(sum.to_bits(), f32::dot(&g, &c).to_bits());
        f32::scale_row(&mut g, 0.7);
        assert_eq!(bits(&d), bits(&g));

        for outer in [false, true] {
            // The gradient of swiglu_bwd_row and the product of swiglu_row, bit for bit.
            let (mut dg, mut du, mut dm) = (vec![0.0f32; n], vec![0.0f32; n], a.clone());
            f32::swiglu_bwd_row(&mut dg, &mut du, &mut dm, &b, &c, outer, true);
            let (mut dg2, mut du2, mut dm2, mut m) = (vec![0.0f32; n], vec![0.0f32; n], a.clone(), vec![0.0f32; n]);
            f32::swiglu_bwd_row(&mut dg2, &mut du2, &mut dm2, &b, &c, outer, false);
            assert_eq!(dm2, a, "without rebuild, dm is only read");
            f32::swiglu_row(&mut m, &b, &c, outer);
            assert_eq!((bits(&dg), bits(&du), bits(&dm)), (bits(&dg2), bits(&du2), bits(&m)), "outer {outer}");
        }

        let mut d = a.clone();
        f32::softmax_grad_row(&mut d, &b, 0.3);
        assert_eq!(bits(&d), bits(&(0..n).map(|j| b[j] * (a[j] - 0.3)).collect::<Vec<_>>()));

        let mut acc = c.clone();
        f32::add_products(&mut acc, &a, &b);
        let want: Vec<f32> = (0..n).map(|j| c[j] + a[j] * b[j]).collect();
        assert_eq!(bits(&acc), bits(&want));

        for accumulate in [false, true] {
            let mut o = c.clone();
            f32::norm_grad_row(&mut o, &a, &b, &c, 0.25, accumulate);
            let want: Vec<f32> = (0..n)
                .map(|j| {
                    let val = c[j] * a[j] + 0.25 * b[j];
                    if accumulate { c[j] + val } else { val }
                })
                .collect();
            assert_eq!(bits(&o), bits(&want));
        }

        // Σ x² in f64: element k into lane k mod 8, lanes folded pairwise, the tail in order.
        let mut lanes = [0.0f64; 8];
        for (k, v) in a.iter().enumerate().take(n / 8 * 8) {
            lanes[k % 8] += (*v as f64) * (*v as f64);
        }
        let mut w = 8;
        while w > 1 {
            w /= 2;
            for i in 0..w {
                lanes[i] += lanes[i + w];
            }
        }
        let want = a[n / 8 * 8..].iter().fold(lanes[0], |s, v| s + (*v as f64) * (*v as f64));
        assert_eq!(f32::sumsq_lanes(&a).to_bits(), want.to_bits());

        let k = AdamConsts {
            b1: 0.9,
            b2: 0.95,
            ob1: 0.1,
            ob2: 0.05,
            keep: 0.999,
            step: 3e-3,
            sq_bc2: 0.3,
            eps: 1e-8,
            gs: 0.5,
        };
        let (mut p, mut m, mut v) =
            (a.clone(), b.iter().map(|x| x * 0.1).collect::<Vec<_>>(), c.iter().map(|x| x * x).collect::<Vec<_>>());
        let (p0, m0, v0) = (p.clone(), m.clone(), v.clone());
        f32::adamw_chunk(&mut p, &b, &mut m, &mut v, &k);
        for j in 0..n {
            let g = b[j] * k.gs;
            let mj = k.b1 * m0[j] + k.ob1 * g;
            let vj = k.b2 * v0[j] + k.ob2 * g * g;
            let pj = p0[j] * k.keep - k.step * mj / (vj.sqrt() / k.sq_bc2 + k.eps);
            assert_eq!((p[j].to_bits(), m[j].to_bits(), v[j].to_bits()), (pj.to_bits(), mj.to_bits(), vj.to_bits()));
        }
    }
}
