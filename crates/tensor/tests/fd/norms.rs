//! RMSNorm, the online-statistics norm against its derivation, and LayerNorm.

use crate::{CPU, check, dot, mat, mat_mut, rnd};
use boost_tensor::Backend;
use boost_tensor::{LayerNormBwd, LayerNormFwd, OnlineNormBwd, RmsNormBwd};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

#[test]
fn rmsnorm() {
    let (t, d) = (5, 12);
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let x = rnd(&mut rng, t * d, 1.0);
    let g = rnd(&mut rng, d, 1.0).iter().map(|v| 1.0 + 0.3 * v).collect::<Vec<_>>();
    let w = rnd(&mut rng, t * d, 1.0);
    let eps = 1e-6;
    let fwd = |x: &Vec<f64>, g: &Vec<f64>| {
        let mut s = vec![0.0; t];
        CPU.row_sumsq(mat_mut(&mut s, t, 1), mat(x, t, d));
        CPU.rstd_from_sumsq(mat_mut(&mut s, t, 1), d, eps);
        let mut y = vec![0.0; t * d];
        CPU.rmsnorm_apply(mat_mut(&mut y, t, d), mat(x, t, d), mat(g, 1, d), mat(&s, t, 1));
        (y, s)
    };
    let (_, rstd) = fwd(&x, &g);
    let mut dotv = vec![0.0; t];
    CPU.rmsnorm_bwd_dot(mat_mut(&mut dotv, t, 1), mat(&w, t, d), mat(&x, t, d), mat(&g, 1, d));
    // accumulate = true onto a non-zero dx checks the accumulation path too.
    let base = rnd(&mut rng, t * d, 1.0);
    let mut dx = base.clone();
    let mut dg = vec![0.0; d];
    CPU.rmsnorm_bwd(RmsNormBwd {
        dx: mat_mut(&mut dx, t, d),
        dgamma: mat_mut(&mut dg, 1, d),
        dy: mat(&w, t, d),
        x: mat(&x, t, d),
        gamma: mat(&g, 1, d),
        rstd: mat(&rstd, t, 1),
        dot: mat(&dotv, t, 1),
        n: d,
        accumulate: true,
    });
    let dx: Vec<f64> = dx.iter().zip(&base).map(|(a, b)| a - b).collect();
    check("rmsnorm dx", &x, &dx, |xp| dot(&fwd(&xp.to_vec(), &g).0, &w));
    check("rmsnorm dgamma", &g, &dg, |gp| dot(&fwd(&x, &gp.to_vec()).0, &w));
}

/// Shapes of the online-norm tests: t tokens, a d-wide shard, r outputs.
const T: usize = 4;
const D: usize = 10;
const R: usize = 6;
const EPS: f64 = 1e-6;

/// Inputs of an online-norm test: x (T×D), γ near 1, A (D×R) and dY (T×R), and the generator
/// for anything more.
fn online_inputs(seed: u64) -> (ChaCha8Rng, [Vec<f64>; 4]) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let x = rnd(&mut rng, T * D, 1.0);
    let g = rnd(&mut rng, D, 1.0).iter().map(|v| 1.0 + 0.3 * v).collect::<Vec<_>>();
    let a = rnd(&mut rng, D * R, 0.5);
    let w = rnd(&mut rng, T * R, 1.0);
    (rng, [x, g, a, w])
}

/// `y ← y·rstd(x)` row by row; returns rstd (the statistic taken over the shard's D features).
fn times_rstd(y: &mut Vec<f64>, x: &Vec<f64>) -> Vec<f64> {
    let mut s = vec![0.0; T];
    CPU.row_sumsq(mat_mut(&mut s, T, 1), mat(x, T, D));
    CPU.rstd_from_sumsq(mat_mut(&mut s, T, 1), D, EPS);
    CPU.mul_rows(mat_mut(y, T, R), mat(&s, T, 1));
    s
}

/// Y = ((x ⊙ γ)·A)·rstd(x); also returns rstd and x ⊙ γ.
fn online_forward(x: &Vec<f64>, g: &Vec<f64>, a: &Vec<f64>) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut xg = vec![0.0; T * D];
    CPU.mul_cols(mat_mut(&mut xg, T, D), mat(x, T, D), mat(g, 1, D));
    let mut y = vec![0.0; T * R];
    CPU.gemm(mat_mut(&mut y, T, R), mat(&xg, T, D), mat(a, D, R), 1.0, false);
    let s = times_rstd(&mut y, x);
    (y, s, xg)
}

/// The same Y as x·(diag(γ)·A)·rstd(x); also returns rstd.
fn folded_forward(x: &Vec<f64>, g: &Vec<f64>, a: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let mut ag = a.to_vec();
    CPU.mul_rows(mat_mut(&mut ag, D, R), mat(g, D, 1));
    let mut y = vec![0.0; T * R];
    CPU.gemm(mat_mut(&mut y, T, R), mat(x, T, D), mat(&ag, D, R), 1.0, false);
    let s = times_rstd(&mut y, x);
    (y, s)
}

/// The online norm's backward through the statistic and A, from dY = w (spec §3):
/// dH = dY·rstd, dS = −Σ(dY ⊙ Y)·rstd² / (2d), and dH·Aᵀ (the gradient of A's input).
struct Latent {
    dh: Vec<f64>,
    ds: Vec<f64>,
    gm: Vec<f64>,
}

fn latent_backward(w: &Vec<f64>, y: &Vec<f64>, rstd: &Vec<f64>, a: &Vec<f64>) -> Latent {
    let mut dh = w.clone();
    CPU.mul_rows(mat_mut(&mut dh, T, R), mat(rstd, T, 1));
    let mut ds = vec![0.0; T];
    CPU.row_dot(
        mat_mut(&mut ds, T, 1),
        mat(w, T, R),
        mat(y, T, R),
        Some(mat(rstd, T, 1)),
        -1.0 / (2.0 * D as f64),
        false,
    );
    let mut gm = vec![0.0; T * D];
    CPU.gemm(mat_mut(&mut gm, T, D), mat(&dh, T, R), mat(a, D, R).t(), 1.0, false);
    Latent { dh, ds, gm }
}

#[test]
fn online_norm_matches_its_derivation() {
    // Y = ((x ⊙ γ)·A) · rstd(x); the backward of spec §3, on one shard.
    let (_, [x, g, a, w]) = online_inputs(2);
    let (t, d, r) = (T, D, R);
    let fwd = online_forward;
    let (y, rstd, xg) = fwd(&x, &g, &a);
    let Latent { dh, ds, gm } = latent_backward(&w, &y, &rstd, &a);
    let mut dx = vec![0.0; t * d];
    let mut dg = vec![0.0; d];
    CPU.online_norm_bwd(OnlineNormBwd {
        dx: mat_mut(&mut dx, t, d),
        dgamma: Some(mat_mut(&mut dg, 1, d)),
        g: mat(&gm, t, d),
        x: mat(&x, t, d),
        gamma: mat(&g, 1, d),
        ds: mat(&ds, t, 1),
        accumulate: false,
    });
    let mut da = vec![0.0; d * r];
    CPU.gemm(mat_mut(&mut da, d, r), mat(&xg, t, d).t(), mat(&dh, t, r), 1.0, false);
    check("online dx", &x, &dx, |p| dot(&fwd(&p.to_vec(), &g, &a).0, &w));
    check("online dgamma", &g, &dg, |p| dot(&fwd(&x, &p.to_vec(), &a).0, &w));
    check("online dA", &a, &da, |p| dot(&fwd(&x, &g, &p.to_vec()).0, &w));
}

#[test]
fn online_norm_with_gamma_folded_into_a_matches_its_derivation() {
    // The same Y, computed as x·(diag(γ)·A) · rstd(x); the backward reads x, not x ⊙ γ:
    // dA = diag(γ)·(xᵀ·dH), dγ_j = Σ_k A_jk·(xᵀ·dH)_jk, dx = γ ⊙ (dH·Aᵀ) + 2·dS·x.
    let (mut rng, [x, g, a, w]) = online_inputs(5);
    let (t, d, r) = (T, D, R);
    let fwd = folded_forward;
    // The folded forward is the unfolded one: (x ⊙ γ)·A.
    let (y, rstd) = fwd(&x, &g, &a);
    let (y_unfolded, _, _) = online_forward(&x, &g, &a);
    let worst = y.iter().zip(&y_unfolded).fold(0.0f64, |m, (p, q)| m.max((p - q).abs()));
    assert!(worst < 1e-13, "folded and unfolded forwards differ by {worst:e}");

    let Latent { dh, ds, gm } = latent_backward(&w, &y, &rstd, &a);
    // Accumulating onto non-zero gradients checks the accumulation paths too.
    let (dx0, dg0, da0) = (rnd(&mut rng, t * d, 1.0), rnd(&mut rng, d, 1.0), rnd(&mut rng, d * r, 1.0));
    let (mut dx, mut dg, mut da) = (dx0.clone(), dg0.clone(), da0.clone());
    CPU.online_norm_bwd(OnlineNormBwd {
        dx: mat_mut(&mut dx, t, d),
        dgamma: None,
        g: mat(&gm, t, d),
        x: mat(&x, t, d),
        gamma: mat(&g, 1, d),
        ds: mat(&ds, t, 1),
        accumulate: true,
    });
    let mut xt_dh = vec![0.0; d * r];
    CPU.gemm(mat_mut(&mut xt_dh, d, r), mat(&x, t, d).t(), mat(&dh, t, r), 1.0, false);
    CPU.row_dot(mat_mut(&mut dg, d, 1), mat(&a, d, r), mat(&xt_dh, d, r), None, 1.0, true);
    CPU.mul_rows(mat_mut(&mut xt_dh, d, r), mat(&g, d, 1));
    CPU.axpy(mat_mut(&mut da, d, r), mat(&xt_dh, d, r), 1.0);
    let minus = |v: &[f64], v0: &[f64]| v.iter().zip(v0).map(|(p, q)| p - q).collect::<Vec<_>>();
    check("folded dx", &x, &minus(&dx, &dx0), |p| dot(&fwd(&p.to_vec(), &g, &a).0, &w));
    check("folded dgamma", &g, &minus(&dg, &dg0), |p| dot(&fwd(&x, &p.to_vec(), &a).0, &w));
    check("folded dA", &a, &minus(&da, &da0), |p| dot(&fwd(&x, &g, p).0, &w));
}

#[test]
fn layernorm() {
    let (t, n) = (4, 9);
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let x = rnd(&mut rng, t * n, 1.0);
    let wv = rnd(&mut rng, n, 1.0);
    let b = rnd(&mut rng, n, 1.0);
    let w = rnd(&mut rng, t * n, 1.0);
    let fwd = |x: &Vec<f64>, wv: &Vec<f64>, b: &Vec<f64>| {
        let (mut y, mut m, mut r) = (vec![0.0; t * n], vec![0.0; t], vec![0.0; t]);
        CPU.layernorm_fwd(LayerNormFwd {
            y: mat_mut(&mut y, t, n),
            mean: mat_mut(&mut m, t, 1),
            rstd: mat_mut(&mut r, t, 1),
            x: mat(x, t, n),
            w: mat(wv, 1, n),
            b: mat(b, 1, n),
            eps: 1e-6,
        });
        (y, m, r)
    };
    let (_, m, r) = fwd(&x, &wv, &b);
    let (mut dx, mut dw, mut db) = (vec![0.0; t * n], vec![0.0; n], vec![0.0; n]);
    CPU.layernorm_bwd(LayerNormBwd {
        dx: mat_mut(&mut dx, t, n),
        dw: mat_mut(&mut dw, 1, n),
        db: mat_mut(&mut db, 1, n),
        dy: mat(&w, t, n),
        x: mat(&x, t, n),
        w: mat(&wv, 1, n),
        mean: mat(&m, t, 1),
        rstd: mat(&r, t, 1),
    });
    check("layernorm dx", &x, &dx, |p| dot(&fwd(&p.to_vec(), &wv, &b).0, &w));
    check("layernorm dw", &wv, &dw, |p| dot(&fwd(&x, &p.to_vec(), &b).0, &w));
    check("layernorm db", &b, &db, |p| dot(&fwd(&x, &wv, &p.to_vec()).0, &w));
}
