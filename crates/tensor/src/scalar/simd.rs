//! f32 row kernels compiled for several instruction sets, chosen once at run time.

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
