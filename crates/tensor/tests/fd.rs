//! Finite-difference checks of every kernel's backward, in f64.
//!
//! Each check builds a scalar L = Σ w ⊙ f(inputs) with random weights w, runs the backward
//! kernels with dL/dy = w, and compares every input gradient with central differences
//! (step 1e-6). Central differences in f64 carry ~1e-9 relative error on these smooth
//! functions, so the bound 1e-6 (relative to the largest gradient) leaves margin yet fails
//! on any wrong term.

use boost_tensor::cpu::{Cpu, IGNORE};
use boost_tensor::{AdamStep, AttnShape, Backend, Mat, MatMut};
use boost_tensor::{AdamUpdate, KronBwd, LayerNormBwd, LayerNormFwd, OnlineNormBwd, RmsNormBwd, XentFinish};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

type B = Cpu<f64>;
const CPU: B = Cpu::<f64>::new();

fn rnd(rng: &mut ChaCha8Rng, n: usize, scale: f64) -> Vec<f64> {
    (0..n).map(|_| (rng.random::<f64>() * 2.0 - 1.0) * scale).collect()
}

/// Compare an analytic gradient with central differences of `f` around `x`.
fn check(name: &str, x: &[f64], analytic: &[f64], f: impl Fn(&[f64]) -> f64) {
    assert_eq!(x.len(), analytic.len(), "{name}: gradient length");
    let h = 1e-6;
    let mut xp = x.to_vec();
    let mut worst: f64 = 0.0;
    let scale = analytic.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-12);
    for i in 0..x.len() {
        xp[i] = x[i] + h;
        let fp = f(&xp);
        xp[i] = x[i] - h;
        let fm = f(&xp);
        xp[i] = x[i];
        let num = (fp - fm) / (2.0 * h);
        worst = worst.max((num - analytic[i]).abs() / scale);
    }
    assert!(worst < 1e-6, "{name}: finite differences disagree, worst relative error {worst:e}");
    assert!(scale > 1e-9, "{name}: gradient is identically zero, the check is vacuous");
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn mat(v: &Vec<f64>, r: usize, c: usize) -> Mat<'_, Vec<f64>> {
    Mat::new(v, r, c)
}

fn mat_mut(v: &mut Vec<f64>, r: usize, c: usize) -> MatMut<'_, Vec<f64>> {
    MatMut::new(v, r, c)
}

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

#[test]
fn online_norm_matches_its_derivation() {
    // Y = ((x ⊙ γ)·A) · rstd(x); the backward of spec §3, on one shard.
    let (t, d, r) = (4, 10, 6);
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let x = rnd(&mut rng, t * d, 1.0);
    let g = rnd(&mut rng, d, 1.0).iter().map(|v| 1.0 + 0.3 * v).collect::<Vec<_>>();
    let a = rnd(&mut rng, d * r, 0.5);
    let w = rnd(&mut rng, t * r, 1.0);
    let eps = 1e-6;
    let fwd = |x: &Vec<f64>, g: &Vec<f64>, a: &Vec<f64>| {
        let mut xg = vec![0.0; t * d];
        CPU.mul_cols(mat_mut(&mut xg, t, d), mat(x, t, d), mat(g, 1, d));
        let mut y = vec![0.0; t * r];
        CPU.gemm(mat_mut(&mut y, t, r), mat(&xg, t, d), mat(a, d, r), 1.0, false);
        let mut s = vec![0.0; t];
        CPU.row_sumsq(mat_mut(&mut s, t, 1), mat(x, t, d));
        CPU.rstd_from_sumsq(mat_mut(&mut s, t, 1), d, eps);
        CPU.mul_rows(mat_mut(&mut y, t, r), mat(&s, t, 1));
        (y, s, xg)
    };
    let (y, rstd, xg) = fwd(&x, &g, &a);
    // dH = dY·rstd ; dS = −Σ(dY ⊙ Y)·rstd² / (2d)
    let mut dh = w.clone();
    CPU.mul_rows(mat_mut(&mut dh, t, r), mat(&rstd, t, 1));
    let mut ds = vec![0.0; t];
    CPU.row_dot(
        mat_mut(&mut ds, t, 1),
        mat(&w, t, r),
        mat(&y, t, r),
        Some(mat(&rstd, t, 1)),
        -1.0 / (2.0 * d as f64),
        false,
    );
    let mut gm = vec![0.0; t * d];
    CPU.gemm(mat_mut(&mut gm, t, d), mat(&dh, t, r), mat(&a, d, r).t(), 1.0, false);
    let mut dx = vec![0.0; t * d];
    let mut dg = vec![0.0; d];
    CPU.online_norm_bwd(OnlineNormBwd {
        dx: mat_mut(&mut dx, t, d),
        dgamma: mat_mut(&mut dg, 1, d),
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

#[test]
fn silu_and_swiglu() {
    let (t, n) = (3, 7);
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let x = rnd(&mut rng, t * n, 3.0);
    let w = rnd(&mut rng, t * n, 1.0);
    let f = |x: &[f64]| {
        let mut y = vec![0.0; t * n];
        CPU.silu(mat_mut(&mut y, t, n), mat(&x.to_vec(), t, n));
        dot(&y, &w)
    };
    let mut d = w.clone();
    CPU.silu_bwd(mat_mut(&mut d, t, n), mat(&x, t, n));
    check("silu", &x, &d, f);

    for outer in [true, false] {
        let gu = rnd(&mut rng, t * 2 * n, 2.0);
        let f = |p: &[f64]| {
            let mut m = vec![0.0; t * n];
            CPU.swiglu(mat_mut(&mut m, t, n), mat(&p.to_vec(), 2 * t, n), outer);
            dot(&m, &w)
        };
        let mut dgu = vec![0.0; t * 2 * n];
        CPU.swiglu_bwd(mat_mut(&mut dgu, 2 * t, n), mat(&w, t, n), mat(&gu, 2 * t, n), outer);
        check(if outer { "swiglu" } else { "gated product" }, &gu, &dgu, f);
    }
}

#[test]
fn bias() {
    let (t, n) = (6, 5);
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let b = rnd(&mut rng, n, 1.0);
    let y0 = rnd(&mut rng, t * n, 1.0);
    let w = rnd(&mut rng, t * n, 1.0);
    let f = |p: &[f64]| {
        let mut y = y0.clone();
        CPU.add_bias(mat_mut(&mut y, t, n), mat(&p.to_vec(), 1, n));
        dot(&y, &w)
    };
    let mut db = vec![0.0; n];
    CPU.bias_grad(mat_mut(&mut db, 1, n), mat(&w, t, n));
    check("bias", &b, &db, f);
}

#[test]
fn rope_backward_is_the_inverse_rotation() {
    let (seq, heads, dh) = (5, 2, 6);
    let t = 2 * seq;
    let mut rng = ChaCha8Rng::seed_from_u64(6);
    let x = rnd(&mut rng, t * heads * dh, 1.0);
    let w = rnd(&mut rng, t * heads * dh, 1.0);
    let table = CPU.rope_table(seq, dh, 10000.0);
    let f = |p: &[f64]| {
        let mut y = p.to_vec();
        CPU.rope(mat_mut(&mut y, t, heads * dh), &table, seq, dh, false);
        dot(&y, &w)
    };
    let mut d = w.clone();
    CPU.rope(mat_mut(&mut d, t, heads * dh), &table, seq, dh, true);
    check("rope", &x, &d, f);
    // Position 0 is the identity, and rows of the second sequence restart at position 0.
    let mut y = x.clone();
    CPU.rope(mat_mut(&mut y, t, heads * dh), &table, seq, dh, false);
    let w0 = heads * dh;
    assert_eq!(&y[..w0], &x[..w0]);
    assert_eq!(&y[seq * w0..(seq + 1) * w0], &x[seq * w0..(seq + 1) * w0]);
}

fn naive_attention(qkv: &[f64], sh: AttnShape) -> Vec<f64> {
    let (s, dh, t) = (sh.seq, sh.head_dim, sh.tokens());
    let (qw, kw) = (sh.q_width(), sh.kv_width());
    let q_at = |r: usize, h: usize| &qkv[r * qw + h * dh..][..dh];
    let k_at = |r: usize, g: usize| &qkv[t * qw + r * kw + g * dh..][..dh];
    let v_at = |r: usize, g: usize| &qkv[t * (qw + kw) + r * kw + g * dh..][..dh];
    let mut out = vec![0.0; t * qw];
    for b in 0..sh.batch {
        for h in 0..sh.heads {
            let g = h / (sh.heads / sh.kv_heads);
            for i in 0..s {
                let mut sc: Vec<f64> =
                    (0..=i).map(|j| dot(q_at(b * s + i, h), k_at(b * s + j, g)) / (dh as f64).sqrt()).collect();
                let m = sc.iter().cloned().fold(f64::MIN, f64::max);
                let z: f64 = sc
                    .iter_mut()
                    .map(|v| {
                        *v = (*v - m).exp();
                        *v
                    })
                    .sum();
                for (j, p) in sc.iter().enumerate() {
                    for k in 0..dh {
                        out[(b * s + i) * qw + h * dh + k] += p / z * v_at(b * s + j, g)[k];
                    }
                }
            }
        }
    }
    out
}

#[test]
fn attention_matches_naive_and_finite_differences() {
    // seq 70 crosses the 64-row block boundary.
    let sh = AttnShape { batch: 2, seq: 70, heads: 4, kv_heads: 2, head_dim: 4 };
    let t = sh.tokens();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let qkv = rnd(&mut rng, sh.qkv_len(), 1.0);
    let w = rnd(&mut rng, t * sh.q_width(), 1.0);
    let fwd = |p: &Vec<f64>| {
        let mut out = vec![0.0; t * sh.q_width()];
        let mut probs = vec![0.0; sh.probs_len()];
        CPU.attention_fwd(mat_mut(&mut out, t, sh.q_width()), &mut probs, p, sh);
        (out, probs)
    };
    let (out, probs) = fwd(&qkv);
    let naive = naive_attention(&qkv, sh);
    let err = out.iter().zip(&naive).fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    assert!(err < 1e-12, "attention forward differs from the naive loop by {err:e}");
    let mut dqkv = vec![7.0; sh.qkv_len()]; // overwritten, not accumulated
    let mut scratch = vec![0.0; sh.probs_len()];
    CPU.attention_bwd(&mut dqkv, mat(&w, t, sh.q_width()), &probs, &mut scratch, &qkv, sh);
    // Finite differences on every 7th coordinate (all of q, k and v are covered).
    let idx: Vec<usize> = (0..qkv.len()).step_by(7).collect();
    let sub: Vec<f64> = idx.iter().map(|&i| qkv[i]).collect();
    let dsub: Vec<f64> = idx.iter().map(|&i| dqkv[i]).collect();
    check("attention", &sub, &dsub, |p| {
        let mut q = qkv.clone();
        for (k, &i) in idx.iter().enumerate() {
            q[i] = p[k];
        }
        dot(&fwd(&q).0, &w)
    });
}

#[test]
fn embedding_with_offset_and_out_of_range_ids() {
    let (v, d) = (6, 4);
    let ids: Vec<u32> = vec![3, 9, 5, 3, 4, 2];
    let first = 2; // this table holds ids 2..8
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    let table = rnd(&mut rng, v * d, 1.0);
    let w = rnd(&mut rng, ids.len() * d, 1.0);
    let n = ids.len();
    let f = |p: &[f64]| {
        let mut out = vec![0.0; n * d];
        CPU.embed(mat_mut(&mut out, n, d), mat(&p.to_vec(), v, d), &ids, first);
        dot(&out, &w)
    };
    let mut dt = vec![0.0; v * d];
    CPU.embed_bwd(mat_mut(&mut dt, v, d), mat(&w, n, d), &ids, first);
    check("embedding", &table, &dt, f);
    let mut out = vec![1.0; n * d];
    CPU.embed(mat_mut(&mut out, n, d), mat(&table, v, d), &ids, first);
    assert!(out[d..2 * d].iter().all(|x| *x == 0.0), "id 9 is outside this table and must read zeros");
}

#[test]
fn cross_entropy() {
    let (t, v) = (5, 7);
    let targets: Vec<u32> = vec![1, 6, IGNORE, 0, 3];
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let logits = rnd(&mut rng, t * v, 3.0);
    let c = 0.37;
    let f = |p: &[f64]| {
        let mut l = p.to_vec();
        let mut losses = vec![0.0; t];
        CPU.cross_entropy(mat_mut(&mut losses, t, 1), mat_mut(&mut l, t, v), &targets, None);
        assert_eq!(l, p, "without a gradient the logits are left unchanged");
        c * losses.iter().sum::<f64>()
    };
    let mut g = logits.clone();
    let mut losses = vec![0.0; t];
    CPU.cross_entropy(mat_mut(&mut losses, t, 1), mat_mut(&mut g, t, v), &targets, Some(c));
    check("cross entropy", &logits, &g, f);
    assert_eq!(losses[2], 0.0);
    let row0 = &logits[..v];
    let lse = row0.iter().map(|x| x.exp()).sum::<f64>().ln();
    assert!((losses[0] - (lse - row0[1])).abs() < 1e-12);
}

#[test]
fn kronecker_gate() {
    let (t, a, b) = (5, 2, 3);
    let r = a * b;
    let mut rng = ChaCha8Rng::seed_from_u64(10);
    let z = rnd(&mut rng, t * r, 1.0);
    let ka = rnd(&mut rng, a * a, 1.0);
    let kb = rnd(&mut rng, b * b, 1.0);
    let w = rnd(&mut rng, t * r, 1.0);
    let mut scratch = vec![0.0; 2 * t * r + 64 * (a * a + b * b)];
    let fwd = |z: &Vec<f64>, ka: &Vec<f64>, kb: &Vec<f64>| {
        let mut y = vec![0.0; t * r];
        let mut s = vec![0.0; t * r];
        CPU.kron_fwd(mat_mut(&mut y, t, r), mat(z, t, r), mat(ka, a, a), mat(kb, b, b), &mut s, false);
        y
    };
    // Against the explicit Kronecker product z·kron(Ka, Kb).
    let y = fwd(&z, &ka, &kb);
    for i in 0..t {
        for col in 0..r {
            let (k, l) = (col / b, col % b);
            let mut s = 0.0;
            for row in 0..r {
                let (ii, j) = (row / b, row % b);
                s += z[i * r + row] * ka[ii * a + k] * kb[j * b + l];
            }
            assert!((s - y[i * r + col]).abs() < 1e-12);
        }
    }
    let (mut dz, mut dka, mut dkb) = (vec![0.0; t * r], vec![0.0; a * a], vec![0.0; b * b]);
    CPU.kron_bwd(KronBwd {
        dz: mat_mut(&mut dz, t, r),
        dka: mat_mut(&mut dka, a, a),
        dkb: mat_mut(&mut dkb, b, b),
        dy: mat(&w, t, r),
        z: mat(&z, t, r),
        ka: mat(&ka, a, a),
        kb: mat(&kb, b, b),
        scratch: &mut scratch,
    });
    check("kron dz", &z, &dz, |p| dot(&fwd(&p.to_vec(), &ka, &kb), &w));
    check("kron dKa", &ka, &dka, |p| dot(&fwd(&z, &p.to_vec(), &kb), &w));
    check("kron dKb", &kb, &dkb, |p| dot(&fwd(&z, &ka, &p.to_vec()), &w));
}

#[test]
fn gemm_transposes_strides_and_accumulation() {
    let (m, k, n) = (5, 7, 3);
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    // a stored transposed (k×m) inside a wider buffer; b plain.
    let a_t = rnd(&mut rng, k * (m + 2), 1.0);
    let b = rnd(&mut rng, k * n, 1.0);
    let c0 = rnd(&mut rng, m * (n + 1), 1.0);
    let mut c = c0.clone();
    let av = Mat::at(&a_t, 1, k, m, m + 2).t();
    CPU.gemm(MatMut::at(&mut c, 0, m, n, n + 1), av, mat(&b, k, n), 0.5, true);
    for i in 0..m {
        for j in 0..n {
            let s: f64 = (0..k).map(|p| a_t[1 + p * (m + 2) + i] * b[p * n + j]).sum();
            let want = c0[i * (n + 1) + j] + 0.5 * s;
            assert!((c[i * (n + 1) + j] - want).abs() < 1e-12);
        }
        assert_eq!(c[i * (n + 1) + n], c0[i * (n + 1) + n], "column outside the view untouched");
    }
}

#[test]
fn adamw_step() {
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let p0 = rnd(&mut rng, 10, 1.0);
    let g = rnd(&mut rng, 10, 1.0);
    let (mut p, mut m, mut v) = (p0.clone(), vec![0.1; 10], vec![0.2; 10]);
    let s = AdamStep {
        lr: 0.01,
        beta1: 0.9,
        beta2: 0.99,
        eps: 1e-8,
        weight_decay: 0.1,
        bias_corr1: 0.5,
        bias_corr2: 0.3,
        grad_scale: 0.5,
    };
    CPU.adamw(AdamUpdate { p: &mut p, g: &g, m: &mut m, v: &mut v, off: 0, n: 10, step: &s, decay: true });
    for i in 0..10 {
        let gi = g[i] * 0.5;
        let mi = 0.9 * 0.1 + 0.1 * gi;
        let vi = 0.99 * 0.2 + 0.01 * gi * gi;
        let want = p0[i] * (1.0 - 0.01 * 0.1) - 0.01 / 0.5 * mi / (vi.sqrt() / 0.3f64.sqrt() + 1e-8);
        assert!((p[i] - want).abs() < 1e-15 && (m[i] - mi).abs() < 1e-15 && (v[i] - vi).abs() < 1e-15);
    }
}

#[test]
fn vocab_parallel_cross_entropy_equals_the_fused_kernel() {
    let (t, v) = (6, 10);
    let targets: Vec<u32> = vec![1, 9, IGNORE, 0, 3, 7];
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    let logits = rnd(&mut rng, t * v, 3.0);
    let c = 0.25;
    let mut fused = logits.clone();
    let mut fused_loss = vec![0.0; t];
    CPU.cross_entropy(mat_mut(&mut fused_loss, t, 1), mat_mut(&mut fused, t, v), &targets, Some(c));
    // Three ranks holding columns 0..4, 4..8, 8..10 (uneven on purpose).
    let shards = [(0usize, 4usize), (4, 8), (8, 10)];
    let local = |k: usize| -> Vec<f64> {
        let (a, b) = shards[k];
        (0..t).flat_map(|i| logits[i * v + a..i * v + b].to_vec()).collect()
    };
    let mut gmax = vec![f64::NEG_INFINITY; t];
    for (k, &(a, b)) in shards.iter().enumerate() {
        let w = b - a;
        let mut m = vec![0.0; t];
        CPU.row_max(mat_mut(&mut m, t, 1), mat(&local(k), t, w));
        for i in 0..t {
            gmax[i] = gmax[i].max(m[i]);
        }
    }
    let mut gstats = vec![0.0; 2 * t];
    for (k, &(a, b)) in shards.iter().enumerate() {
        let mut st = vec![0.0; 2 * t];
        CPU.xent_partials(mat_mut(&mut st, t, 2), mat(&local(k), t, b - a), mat(&gmax, t, 1), &targets, a);
        for i in 0..2 * t {
            gstats[i] += st[i];
        }
    }
    for (k, &(a, b)) in shards.iter().enumerate() {
        let mut l = local(k);
        let mut losses = vec![0.0; t];
        CPU.xent_finish(XentFinish {
            losses: mat_mut(&mut losses, t, 1),
            logits: mat_mut(&mut l, t, b - a),
            max: mat(&gmax, t, 1),
            stats: mat(&gstats, t, 2),
            targets: &targets,
            first: a,
            grad_scale: Some(c),
        });
        for i in 0..t {
            assert!((losses[i] - fused_loss[i]).abs() < 1e-12, "loss row {i}");
            for j in a..b {
                assert!((l[i * (b - a) + j - a] - fused[i * v + j]).abs() < 1e-12, "grad ({i},{j})");
            }
        }
    }
}
