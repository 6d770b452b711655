//! Every kernel of the CUDA backend against the CPU reference (`Cpu<f32>`), on strided views.
//!
//! Each case runs three ways: fp32 storage under `Precision::F32` (tolerance 1e-5: only
//! summation order and the math library differ); bf16 activations (`alloc_act`) under
//! `Precision::Bf16` (1e-2: inputs and outputs are rounded to bf16's 8-bit significand,
//! relative error 2⁻⁹ each, and GEMMs round their inputs); fp32 storage under
//! `Precision::Bf16` (1e-2: GEMMs multiply in bf16). Both measures are checked:
//! ‖a−b‖/‖b‖ and max|a−b|/max|b|.
#![cfg(any(feature = "cuda", feature = "emulate"))]

mod common;

use boost_cuda::{Cuda, Precision};
use boost_tensor::cpu::{Cpu, IGNORE};
use boost_tensor::{AdamStep, AttnShape, Backend, Mat, MatMut};
use boost_tensor::{AdamUpdate, KronBwd, LayerNormBwd, LayerNormFwd, OnlineNormBwd, RmsNormBwd, XentFinish};
use common::*;

type Outs = Vec<(&'static str, Vec<f64>)>;

const TOL_F32: f64 = 1e-5;
const TOL_BF16: f64 = 1e-2;

/// Deterministic values in [-1, 1).
fn rnd(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        })
        .collect()
}

/// A buffer holding `data` (bf16 when `act` and the backend stores activations so).
fn buf<B: Backend>(be: &B, act: bool, data: &[f64]) -> B::Buf {
    let mut b = if act { be.alloc_act(data.len()) } else { be.alloc(data.len()) };
    be.write_mat(MatMut::new(&mut b, 1, data.len()), data);
    b
}

/// An fp32 buffer (statistics, gradients of parameters).
fn f32buf<B: Backend>(be: &B, data: &[f64]) -> B::Buf {
    buf(be, false, data)
}

fn read<B: Backend>(be: &B, m: Mat<B::Buf>) -> Vec<f64> {
    be.read_mat(m)
}

/// Run `cpu` for the reference and `gpu` under each configuration, and compare.
fn check(name: &str, cpu: impl Fn(&Cpu<f32>) -> Outs, gpu: impl Fn(&Cuda, bool) -> Outs) {
    let reference = cpu(&Cpu::<f32>::new());
    for (prec, act, tol) in
        [(Precision::F32, false, TOL_F32), (Precision::Bf16, true, TOL_BF16), (Precision::Bf16, false, TOL_BF16)]
    {
        let Some(be) = backend(prec) else { return };
        let got = gpu(&be, act);
        assert_eq!(got.len(), reference.len());
        for ((what, g), (_, r)) in got.iter().zip(&reference) {
            assert_close(&format!("{name} {what} [{}, act bf16: {act}]", be.name()), g, r, tol);
        }
    }
}

macro_rules! case {
    ($test:ident, $f:ident) => {
        #[test]
        fn $test() {
            check(stringify!($test), |be| $f(be, false), |be, act| $f(be, act));
        }
    };
}

// ---- dense algebra ----

fn gemm_case<B: Backend>(be: &B, act: bool) -> Outs {
    let mut outs = Vec::new();
    // A: 5×7 view (ld 9, offset 2), B: 7×6 view (ld 8, offset 3), and their transposes.
    let (m, k, n) = (5, 7, 6);
    for (ta, tb, name_acc) in [(false, false, "nn"), (true, false, "tn"), (false, true, "nt"), (true, true, "tt")] {
        let (ar, ac) = if ta { (k, m) } else { (m, k) };
        let (br, bc) = if tb { (n, k) } else { (k, n) };
        let a = buf(be, act, &rnd(2 + ar * 9, 1));
        let b = buf(be, act, &rnd(3 + br * 8, 2));
        let mut c = f32buf(be, &rnd(1 + m * 10, 3));
        let mut av = Mat::at(&a, 2, ar, ac, 9);
        let mut bv = Mat::at(&b, 3, br, bc, 8);
        if ta {
            av = av.t();
        }
        if tb {
            bv = bv.t();
        }
        be.gemm(MatMut::at(&mut c, 1, m, n, 10), av, bv, 0.5, false);
        be.gemm(MatMut::at(&mut c, 1, m, n, 10), av, bv, -1.5, true);
        outs.push((name_acc, read(be, Mat::at(&c, 0, 1, 1 + m * 10, 1 + m * 10))));
    }
    // A parameter operand (fp32 master, bf16 copy under mixed precision) and k = 0.
    let mut w = be.alloc_param(k * n);
    be.write_mat(MatMut::new(&mut w, k, n), &rnd(k * n, 4));
    let x = buf(be, act, &rnd(m * k, 5));
    let mut y = f32buf(be, &rnd(m * n, 6));
    be.gemm(MatMut::new(&mut y, m, n), Mat::new(&x, m, k), Mat::new(&w, k, n), 1.0, true);
    outs.push(("param", read(be, Mat::new(&y, m, n))));
    let e = buf(be, act, &[]);
    be.gemm(MatMut::new(&mut y, m, n), Mat::new(&e, m, 0), Mat::new(&e, 0, n), 1.0, false);
    outs.push(("k=0", read(be, Mat::new(&y, m, n))));
    outs
}
case!(gemm_all_layouts, gemm_case);

fn elementwise_case<B: Backend>(be: &B, act: bool) -> Outs {
    let (r, c, ld) = (6, 5, 7);
    let mut x = buf(be, act, &rnd(r * ld + 1, 10));
    let src = buf(be, act, &rnd(r * ld, 11));
    let rows = f32buf(be, &rnd(r, 12));
    let cols = f32buf(be, &rnd(c, 13));
    let mut outs = Vec::new();
    be.fill(MatMut::at(&mut x, 1, 2, c, ld), 0.25);
    be.axpy(MatMut::at(&mut x, 1, r, c, ld), Mat::at(&src, 0, r, c, ld), -0.75);
    be.scale(MatMut::at(&mut x, 1, r, c, ld), 1.5);
    be.mul_rows(MatMut::at(&mut x, 1, r, c, ld), Mat::new(&rows, r, 1));
    outs.push(("fill·axpy·scale·mul_rows", read(be, Mat::new(&x, 1, r * ld + 1))));
    let mut y = buf(be, act, &rnd(r * c, 14));
    be.mul_cols(MatMut::new(&mut y, r, c), Mat::at(&src, 1, r, c, ld), Mat::new(&cols, 1, c));
    outs.push(("mul_cols", read(be, Mat::new(&y, r, c))));
    be.copy(MatMut::at(&mut x, 0, r, c, ld), Mat::new(&y, r, c));
    outs.push(("copy", read(be, Mat::new(&x, 1, r * ld + 1))));
    be.add_bias(MatMut::new(&mut y, r, c), Mat::new(&cols, 1, c));
    outs.push(("add_bias", read(be, Mat::new(&y, r, c))));
    let mut db = f32buf(be, &rnd(c, 15));
    be.bias_grad(MatMut::new(&mut db, 1, c), Mat::at(&src, 2, r, c, ld));
    outs.push(("bias_grad", read(be, Mat::new(&db, 1, c))));
    let big = f32buf(be, &rnd(3000, 16));
    outs.push((
        "sumsq, sum",
        vec![
            be.sumsq(Mat::new(&big, 1, 3000)),
            be.sum(Mat::new(&big, 1, 3000)),
            be.sumsq(Mat::at(&src, 1, r, c, ld)),
            be.sum(Mat::at(&src, 1, r, c, ld)),
        ],
    ));
    outs
}
case!(elementwise_and_reductions, elementwise_case);

// ---- norms ----

fn rmsnorm_case<B: Backend>(be: &B, act: bool) -> Outs {
    let (t, d, ld) = (7, 300, 301);
    let x = buf(be, act, &rnd(t * ld, 20));
    let dy = buf(be, act, &rnd(t * d, 21));
    let gamma = f32buf(be, &rnd(d, 22).iter().map(|v| 1.0 + 0.5 * v).collect::<Vec<_>>());
    let mut s = f32buf(be, &vec![0.0; t]);
    be.row_sumsq(MatMut::new(&mut s, t, 1), Mat::at(&x, 0, t, d, ld));
    let sumsq = read(be, Mat::new(&s, t, 1));
    be.rstd_from_sumsq(MatMut::new(&mut s, t, 1), d, 1e-6);
    let mut y = buf(be, act, &vec![0.0; t * d]);
    be.rmsnorm_apply(MatMut::new(&mut y, t, d), Mat::at(&x, 0, t, d, ld), Mat::new(&gamma, 1, d), Mat::new(&s, t, 1));
    let mut dot = f32buf(be, &vec![0.0; t]);
    be.rmsnorm_bwd_dot(
        MatMut::new(&mut dot, t, 1),
        Mat::new(&dy, t, d),
        Mat::at(&x, 0, t, d, ld),
        Mat::new(&gamma, 1, d),
    );
    let mut dx = buf(be, act, &rnd(t * d, 23));
    let mut dg = f32buf(be, &rnd(d, 24));
    for acc in [true, false] {
        be.rmsnorm_bwd(RmsNormBwd {
            dx: MatMut::new(&mut dx, t, d),
            dgamma: MatMut::new(&mut dg, 1, d),
            dy: Mat::new(&dy, t, d),
            x: Mat::at(&x, 0, t, d, ld),
            gamma: Mat::new(&gamma, 1, d),
            rstd: Mat::new(&s, t, 1),
            dot: Mat::new(&dot, t, 1),
            n: d,
            accumulate: acc,
        });
    }
    vec![
        ("row_sumsq", sumsq),
        ("rstd", read(be, Mat::new(&s, t, 1))),
        ("y", read(be, Mat::new(&y, t, d))),
        ("dot", read(be, Mat::new(&dot, t, 1))),
        ("dx", read(be, Mat::new(&dx, t, d))),
        ("dgamma", read(be, Mat::new(&dg, 1, d))),
    ]
}
case!(rmsnorm_forward_backward, rmsnorm_case);

fn online_norm_case<B: Backend>(be: &B, act: bool) -> Outs {
    let (t, d) = (9, 70);
    let a = buf(be, act, &rnd(t * d, 30));
    let b = buf(be, act, &rnd(t * d, 31));
    let row = f32buf(be, &rnd(t, 32));
    let gamma = f32buf(be, &rnd(d, 33));
    let mut out = f32buf(be, &rnd(t, 34));
    be.row_dot(
        MatMut::new(&mut out, t, 1),
        Mat::new(&a, t, d),
        Mat::new(&b, t, d),
        Some(Mat::new(&row, t, 1)),
        -0.5,
        true,
    );
    let with_row = read(be, Mat::new(&out, t, 1));
    be.row_dot(MatMut::new(&mut out, t, 1), Mat::new(&a, t, d), Mat::new(&b, t, d), None, 2.0, false);
    let mut dx = buf(be, act, &rnd(t * d, 35));
    let mut dg = f32buf(be, &rnd(d, 36));
    for acc in [true, false, true] {
        be.online_norm_bwd(OnlineNormBwd {
            dx: MatMut::new(&mut dx, t, d),
            dgamma: MatMut::new(&mut dg, 1, d),
            g: Mat::new(&a, t, d),
            x: Mat::new(&b, t, d),
            gamma: Mat::new(&gamma, 1, d),
            ds: Mat::new(&row, t, 1),
            accumulate: acc,
        });
    }
    vec![
        ("row_dot (row², acc)", with_row),
        ("row_dot", read(be, Mat::new(&out, t, 1))),
        ("dx", read(be, Mat::new(&dx, t, d))),
        ("dgamma", read(be, Mat::new(&dg, 1, d))),
    ]
}
case!(online_norm_pieces, online_norm_case);

fn layernorm_case<B: Backend>(be: &B, act: bool) -> Outs {
    let (t, r) = (6, 40);
    let x = buf(be, act, &rnd(t * r, 40).iter().map(|v| 3.0 + v).collect::<Vec<_>>());
    let w = f32buf(be, &rnd(r, 41));
    let b = f32buf(be, &rnd(r, 42));
    let dy = buf(be, act, &rnd(t * r, 43));
    let mut y = buf(be, act, &vec![0.0; t * r]);
    let mut mean = f32buf(be, &vec![0.0; t]);
    let mut rstd = f32buf(be, &vec![0.0; t]);
    be.layernorm_fwd(LayerNormFwd {
        y: MatMut::new(&mut y, t, r),
        mean: MatMut::new(&mut mean, t, 1),
        rstd: MatMut::new(&mut rstd, t, 1),
        x: Mat::new(&x, t, r),
        w: Mat::new(&w, 1, r),
        b: Mat::new(&b, 1, r),
        eps: 1e-6,
    });
    let mut dx = buf(be, act, &vec![0.0; t * r]);
    let mut dw = f32buf(be, &rnd(r, 44));
    let mut db = f32buf(be, &rnd(r, 45));
    be.layernorm_bwd(LayerNormBwd {
        dx: MatMut::new(&mut dx, t, r),
        dw: MatMut::new(&mut dw, 1, r),
        db: MatMut::new(&mut db, 1, r),
        dy: Mat::new(&dy, t, r),
        x: Mat::new(&x, t, r),
        w: Mat::new(&w, 1, r),
        mean: Mat::new(&mean, t, 1),
        rstd: Mat::new(&rstd, t, 1),
    });
    vec![
        ("y", read(be, Mat::new(&y, t, r))),
        ("mean", read(be, Mat::new(&mean, t, 1))),
        ("rstd", read(be, Mat::new(&rstd, t, 1))),
        ("dx", read(be, Mat::new(&dx, t, r))),
        ("dw", read(be, Mat::new(&dw, 1, r))),
        ("db", read(be, Mat::new(&db, 1, r))),
    ]
}
case!(layernorm_forward_backward, layernorm_case);

// ---- activations ----

fn act_case<B: Backend>(be: &B, act: bool) -> Outs {
    let (t, n) = (5, 33);
    let x = buf(be, act, &rnd(t * n, 50).iter().map(|v| 4.0 * v).collect::<Vec<_>>());
    let mut y = buf(be, act, &vec![0.0; t * n]);
    be.silu(MatMut::new(&mut y, t, n), Mat::new(&x, t, n));
    let mut d = buf(be, act, &rnd(t * n, 51));
    be.silu_bwd(MatMut::new(&mut d, t, n), Mat::new(&x, t, n));
    let gu = buf(be, act, &rnd(2 * t * n, 52).iter().map(|v| 3.0 * v).collect::<Vec<_>>());
    let dm = buf(be, act, &rnd(t * n, 53));
    let mut outs = vec![("silu", read(be, Mat::new(&y, t, n))), ("silu_bwd", read(be, Mat::new(&d, t, n)))];
    for outer in [true, false] {
        let mut m = buf(be, act, &vec![0.0; t * n]);
        be.swiglu(MatMut::new(&mut m, t, n), Mat::new(&gu, 2 * t, n), outer);
        let mut dgu = buf(be, act, &vec![0.0; 2 * t * n]);
        be.swiglu_bwd(MatMut::new(&mut dgu, 2 * t, n), Mat::new(&dm, t, n), Mat::new(&gu, 2 * t, n), outer);
        outs.push(("swiglu", read(be, Mat::new(&m, t, n))));
        outs.push(("swiglu_bwd", read(be, Mat::new(&dgu, 2 * t, n))));
    }
    outs
}
case!(silu_and_swiglu, act_case);

// ---- rotary embedding and attention ----

fn rope_case<B: Backend>(be: &B, act: bool) -> Outs {
    let (seq, hd, heads, batch) = (6, 8, 3, 2);
    let t = seq * batch;
    let table = be.rope_table(seq, hd, 10000.0);
    let mut x = buf(be, act, &rnd(t * heads * hd, 60));
    be.rope(MatMut::new(&mut x, t, heads * hd), &table, seq, hd, false);
    let fwd = read(be, Mat::new(&x, t, heads * hd));
    be.rope(MatMut::new(&mut x, t, heads * hd), &table, seq, hd, true);
    vec![("rope", fwd), ("inverse", read(be, Mat::new(&x, t, heads * hd)))]
}
case!(rope_forward_and_inverse, rope_case);

fn attention_case<B: Backend>(be: &B, act: bool) -> Outs {
    let mut outs = Vec::new();
    for (batch, seq, heads, kv_heads, head_dim) in [(2, 5, 4, 2, 4), (1, 7, 3, 3, 6), (2, 3, 4, 1, 2)] {
        let sh = AttnShape { batch, seq, heads, kv_heads, head_dim };
        let t = sh.tokens();
        let qkv = buf(be, act, &rnd(sh.qkv_len(), 70));
        let mut out = buf(be, act, &vec![0.0; t * sh.q_width()]);
        let mut probs = f32buf(be, &vec![0.0; sh.probs_len()]);
        be.attention_fwd(MatMut::new(&mut out, t, sh.q_width()), &mut probs, &qkv, sh);
        let dout = buf(be, act, &rnd(t * sh.q_width(), 71));
        let mut dqkv = buf(be, act, &rnd(sh.qkv_len(), 72));
        let mut scratch = f32buf(be, &vec![0.0; sh.probs_len()]);
        be.attention_bwd(&mut dqkv, Mat::new(&dout, t, sh.q_width()), &probs, &mut scratch, &qkv, sh);
        outs.push(("out", read(be, Mat::new(&out, t, sh.q_width()))));
        outs.push(("probs", read(be, Mat::new(&probs, 1, sh.probs_len()))));
        outs.push(("dq|dk|dv", read(be, Mat::new(&dqkv, 1, sh.qkv_len()))));
    }
    outs
}
case!(causal_attention_gqa, attention_case);

// ---- embedding and loss ----

fn embed_case<B: Backend>(be: &B, act: bool) -> Outs {
    let (rows, d, first) = (10, 12, 5);
    let table = buf(be, act, &rnd(rows * d, 80));
    let id_list: Vec<u32> = vec![5, 7, 14, 3, 9, 9, 15, 5, 20, 6, 9];
    let mut ids = be.alloc_ids(id_list.len());
    be.write_ids(&mut ids, &id_list);
    let t = id_list.len();
    let mut out = buf(be, act, &rnd(t * d, 81));
    be.embed(MatMut::new(&mut out, t, d), Mat::new(&table, rows, d), &ids, first);
    let dout = buf(be, act, &rnd(t * d, 82));
    let mut dtable = f32buf(be, &rnd(rows * d, 83));
    be.embed_bwd(MatMut::new(&mut dtable, rows, d), Mat::new(&dout, t, d), &ids, first);
    vec![("embed", read(be, Mat::new(&out, t, d))), ("embed_bwd", read(be, Mat::new(&dtable, rows, d)))]
}
case!(embedding_forward_backward, embed_case);

fn xent_case<B: Backend>(be: &B, act: bool) -> Outs {
    let (t, v) = (6, 301);
    let targets: Vec<u32> = vec![0, 300, IGNORE, 17, 150, 299];
    let mut ids = be.alloc_ids(t);
    be.write_ids(&mut ids, &targets);
    // Logits in ±3: bf16 storage then perturbs exp(x) by up to 3·2⁻⁹ relative.
    let data: Vec<f64> = rnd(t * v, 90).iter().map(|x| 3.0 * x).collect();
    let mut outs = Vec::new();
    for grad in [None, Some(0.125)] {
        let mut logits = buf(be, act, &data);
        let mut losses = f32buf(be, &vec![0.0; t]);
        be.cross_entropy(MatMut::new(&mut losses, t, 1), MatMut::new(&mut logits, t, v), &ids, grad);
        outs.push(("loss", read(be, Mat::new(&losses, t, 1))));
        outs.push(("logits/grad", read(be, Mat::new(&logits, t, v))));
    }
    // Vocabulary-parallel: two shards of columns [0, 150) and [150, 301) on one backend,
    // their statistics combined here as the all-reduces would.
    let mut shards: Vec<B::Buf> = [(0usize, 150usize), (150, 301)]
        .iter()
        .map(|&(c0, c1)| {
            let s: Vec<f64> = (0..t).flat_map(|i| data[i * v + c0..i * v + c1].to_vec()).collect();
            buf(be, act, &s)
        })
        .collect();
    let widths = [150, 151];
    let mut maxes = Vec::new();
    for (s, w) in shards.iter().zip(widths) {
        let mut m = f32buf(be, &vec![0.0; t]);
        be.row_max(MatMut::new(&mut m, t, 1), Mat::new(s, t, w));
        maxes.push(read(be, Mat::new(&m, t, 1)));
    }
    let gmax: Vec<f64> = (0..t).map(|i| maxes[0][i].max(maxes[1][i])).collect();
    outs.push(("row_max", maxes.concat()));
    let gm = f32buf(be, &gmax);
    let mut stats = vec![0.0; 2 * t];
    for ((s, w), first) in shards.iter().zip(widths).zip([0, 150]) {
        let mut st = f32buf(be, &vec![0.0; 2 * t]);
        be.xent_partials(MatMut::new(&mut st, t, 2), Mat::new(s, t, w), Mat::new(&gm, t, 1), &ids, first);
        for (a, b) in stats.iter_mut().zip(read(be, Mat::new(&st, t, 2))) {
            *a += b;
        }
    }
    outs.push(("xent_partials", stats.clone()));
    let gs = f32buf(be, &stats);
    for ((s, w), first) in shards.iter_mut().zip(widths).zip([0, 150]) {
        let mut losses = f32buf(be, &vec![0.0; t]);
        be.xent_finish(XentFinish {
            losses: MatMut::new(&mut losses, t, 1),
            logits: MatMut::new(s, t, w),
            max: Mat::new(&gm, t, 1),
            stats: Mat::new(&gs, t, 2),
            targets: &ids,
            first,
            grad_scale: Some(0.5),
        });
        outs.push(("xent_finish loss", read(be, Mat::new(&losses, t, 1))));
        outs.push(("xent_finish grad", read(be, Mat::new(s, t, w))));
    }
    outs
}
case!(cross_entropy_whole_and_vocab_parallel, xent_case);

// ---- LaX Kronecker gate ----

fn kron_case<B: Backend>(be: &B, act: bool) -> Outs {
    let (rows, a, b) = (70, 3, 4);
    let r = a * b;
    let z = buf(be, act, &rnd(rows * r, 100));
    let ka = f32buf(be, &rnd(a * a, 101));
    let kb = f32buf(be, &rnd(b * b, 102));
    let dy = buf(be, act, &rnd(rows * r, 103));
    let mut scratch = be.alloc(2 * rows * r + 64 * (a * a + b * b));
    let mut y = buf(be, act, &rnd(rows * r, 104));
    be.kron_fwd(
        MatMut::new(&mut y, rows, r),
        Mat::new(&z, rows, r),
        Mat::new(&ka, a, a),
        Mat::new(&kb, b, b),
        &mut scratch,
        true,
    );
    let acc = read(be, Mat::new(&y, rows, r));
    be.kron_fwd(
        MatMut::new(&mut y, rows, r),
        Mat::new(&z, rows, r),
        Mat::new(&ka, a, a),
        Mat::new(&kb, b, b),
        &mut scratch,
        false,
    );
    let mut dz = buf(be, act, &rnd(rows * r, 105));
    let mut dka = f32buf(be, &rnd(a * a, 106));
    let mut dkb = f32buf(be, &rnd(b * b, 107));
    be.kron_bwd(KronBwd {
        dz: MatMut::new(&mut dz, rows, r),
        dka: MatMut::new(&mut dka, a, a),
        dkb: MatMut::new(&mut dkb, b, b),
        dy: Mat::new(&dy, rows, r),
        z: Mat::new(&z, rows, r),
        ka: Mat::new(&ka, a, a),
        kb: Mat::new(&kb, b, b),
        scratch: &mut scratch,
    });
    vec![
        ("y (acc)", acc),
        ("y", read(be, Mat::new(&y, rows, r))),
        ("dz", read(be, Mat::new(&dz, rows, r))),
        ("dka", read(be, Mat::new(&dka, a, a))),
        ("dkb", read(be, Mat::new(&dkb, b, b))),
    ]
}
case!(kronecker_gate_forward_backward, kron_case);

// ---- optimizer ----

fn adamw_case<B: Backend>(be: &B, _act: bool) -> Outs {
    let n = 1000;
    let mut p = be.alloc_param(n);
    be.write_mat(MatMut::new(&mut p, 1, n), &rnd(n, 110));
    let g = f32buf(be, &rnd(n, 111));
    let mut m = f32buf(be, &rnd(n, 112).iter().map(|v| 0.1 * v).collect::<Vec<_>>());
    let mut v = f32buf(be, &rnd(n, 113).iter().map(|v| 0.01 * v * v).collect::<Vec<_>>());
    for (t, decay, off, len) in [(1, true, 0, n), (2, false, 100, 500), (3, true, 7, 993)] {
        let s = AdamStep {
            lr: 1e-2,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.1,
            bias_corr1: 1.0 - 0.9f64.powi(t),
            bias_corr2: 1.0 - 0.999f64.powi(t),
            grad_scale: 0.5,
        };
        be.adamw(AdamUpdate { p: &mut p, g: &g, m: &mut m, v: &mut v, off, n: len, step: &s, decay });
    }
    // The GEMM reads the bf16 copy of a parameter under mixed precision: x·p with x = e₀
    // must give p's first row (rounded to bf16 there).
    let e = f32buf(be, &[1.0]);
    let mut row = f32buf(be, &[0.0; 10]);
    be.gemm(MatMut::new(&mut row, 1, 10), Mat::new(&e, 1, 1), Mat::new(&p, 1, 10), 1.0, false);
    vec![
        ("p", read(be, Mat::new(&p, 1, n))),
        ("m", read(be, Mat::new(&m, 1, n))),
        ("v", read(be, Mat::new(&v, 1, n))),
        ("p through gemm", read(be, Mat::new(&row, 1, 10))),
    ]
}
case!(adamw_updates_master_and_copy, adamw_case);

/// The bf16 copy of a parameter follows every write: after AdamW, a GEMM (which reads the
/// copy under mixed precision) sees the master weights rounded to bf16, exactly.
#[test]
fn parameter_copy_tracks_the_master_weights() {
    let Some(be) = backend(Precision::Bf16) else { return };
    let n = 64;
    let mut p = be.alloc_param(n);
    assert!(p.has_bf16_copy());
    be.write_mat(MatMut::new(&mut p, 1, n), &rnd(n, 120));
    let g = be.alloc(n);
    let (mut m, mut v) = (be.alloc(n), be.alloc(n));
    let mut gh = be.alloc(n);
    be.write_mat(MatMut::new(&mut gh, 1, n), &rnd(n, 121));
    let s = AdamStep {
        lr: 0.1,
        beta1: 0.9,
        beta2: 0.99,
        eps: 1e-8,
        weight_decay: 0.0,
        bias_corr1: 0.1,
        bias_corr2: 0.01,
        grad_scale: 1.0,
    };
    be.adamw(AdamUpdate { p: &mut p, g: &gh, m: &mut m, v: &mut v, off: 0, n, step: &s, decay: false });
    drop(g);
    let master: Vec<f64> = be.read_mat(Mat::new(&p, 1, n));
    let e = be.alloc_act(1);
    let mut e = e;
    be.write_mat(MatMut::new(&mut e, 1, 1), &[1.0f64]);
    let mut out = be.alloc(n);
    be.gemm(MatMut::new(&mut out, 1, n), Mat::new(&e, 1, 1), Mat::new(&p, 1, n), 1.0, false);
    let through: Vec<f64> = be.read_mat(Mat::new(&out, 1, n));
    for (a, b) in through.iter().zip(&master) {
        assert_eq!(*a, half::bf16::from_f64(*b).to_f64(), "the GEMM must read the bf16 copy of the master weight");
    }
}
