//! The fused kernels: the residual add with the next RMSNorm (or its statistic), RMSNorm's backward over whole
//! rows, RoPE on q and k in one launch, SwiGLU's backward with the product rebuilt in the same
//! pass, and the LM head's cross-entropy over chunks of tokens, whose memory high-water mark
//! is compared with the unfused sequence's. Each against the CPU engine (`case!`, at the
//! tolerances of `main.rs`), whose implementation is the unfused sequence.

use crate::{Outs, buf, f32buf, read, rnd};
use boost_cuda::Precision;
use boost_tensor::cpu::IGNORE;
use boost_tensor::trace::{Collector, Ctx, attach};
use boost_tensor::{AttnShape, Backend, HeadXent, HeadXentGrad, Mat, MatMut, rope_inv_freq};
use boost_tensor::{ResidualRmsNorm, RmsNormBwdRows};

fn residual_rmsnorm_case<B: Backend>(be: &B, act: bool) -> Outs {
    // 300 columns: more than one pass of a block's 256 threads; x at a row stride of 301.
    let (t, d, ld) = (7, 300, 301);
    // The residual stream stays fp32 (as the model's); the branch output is an activation.
    let mut x = f32buf(be, &rnd(t * ld, 40));
    let r = buf(be, act, &rnd(t * d, 41));
    let gamma = f32buf(be, &rnd(d, 42).iter().map(|v| 1.0 + 0.5 * v).collect::<Vec<_>>());
    let mut y = buf(be, act, &vec![0.0; t * d]);
    let mut rstd = f32buf(be, &vec![0.0; t]);
    be.residual_rmsnorm(ResidualRmsNorm {
        x: MatMut::at(&mut x, 0, t, d, ld),
        r: Mat::new(&r, t, d),
        y: MatMut::new(&mut y, t, d),
        rstd: MatMut::new(&mut rstd, t, 1),
        gamma: Mat::new(&gamma, 1, d),
        eps: 1e-6,
    });
    let mut outs = vec![
        ("x + r", read(be, Mat::at(&x, 0, t, d, ld))),
        ("rstd", read(be, Mat::new(&rstd, t, 1))),
        ("y", read(be, Mat::new(&y, t, d))),
    ];
    // The add with a shard's sum of squares only, over a copy of x (the stream stays as above).
    let mut x2 = f32buf(be, &read(be, Mat::at(&x, 0, t, d, ld)));
    let mut sumsq = f32buf(be, &vec![0.0; t]);
    be.residual_sumsq(MatMut::new(&mut x2, t, d), Mat::new(&r, t, d), MatMut::new(&mut sumsq, t, 1));
    outs.push(("(x + r) + r", read(be, Mat::new(&x2, t, d))));
    outs.push(("sumsq", read(be, Mat::new(&sumsq, t, 1))));
    let dy = buf(be, act, &rnd(t * d, 43));
    let mut dx = f32buf(be, &rnd(t * d, 44));
    let mut dg = f32buf(be, &rnd(d, 45));
    let mut dot = f32buf(be, &vec![0.0; t]);
    for accumulate in [true, false] {
        be.rmsnorm_bwd_rows(RmsNormBwdRows {
            dx: MatMut::new(&mut dx, t, d),
            dgamma: MatMut::new(&mut dg, 1, d),
            dy: Mat::new(&dy, t, d),
            x: Mat::at(&x, 0, t, d, ld),
            gamma: Mat::new(&gamma, 1, d),
            rstd: Mat::new(&rstd, t, 1),
            dot: MatMut::new(&mut dot, t, 1),
            accumulate,
        });
        outs.push(("dx", read(be, Mat::new(&dx, t, d))));
    }
    outs.push(("dot", read(be, Mat::new(&dot, t, 1))));
    outs.push(("dgamma", read(be, Mat::new(&dg, 1, d))));
    outs
}
case!(residual_add_and_rmsnorm_forward_backward, residual_rmsnorm_case);

fn rope_qk_case<B: Backend>(be: &B, act: bool) -> Outs {
    let sh = AttnShape { batch: 2, seq: 6, heads: 4, kv_heads: 2, head_dim: 8 };
    let table = be.rope_table(sh.seq, &rope_inv_freq(sh.head_dim, 10000.0, None));
    let n = sh.qkv_len();
    let mut qkv = buf(be, act, &rnd(n, 61));
    be.rope_qk(&mut qkv, &table, sh, false);
    let fwd = read(be, Mat::new(&qkv, 1, n));
    be.rope_qk(&mut qkv, &table, sh, true);
    // v is left as it was.
    vec![("rope_qk", fwd), ("inverse", read(be, Mat::new(&qkv, 1, n)))]
}
case!(rope_on_q_and_k_in_one_pass, rope_qk_case);

/// `t` tokens (some ignored) over a vocabulary of `v`, chunks of `chunk` rows.
fn head_xent_case<B: Backend>(be: &B, act: bool) -> Outs {
    let (t, d, v) = (37, 24, 50);
    let h = buf(be, act, &rnd(t * d, 80));
    let mut w = be.alloc_param(v * d);
    be.write_mat(MatMut::new(&mut w, v, d), &rnd(v * d, 81).iter().map(|x| 2.0 * x).collect::<Vec<_>>());
    let ids: Vec<u32> = (0..t as u32).map(|i| if i % 9 == 4 { IGNORE } else { (i * 13) % v as u32 }).collect();
    let mut targets = be.alloc_ids(t);
    be.write_ids(&mut targets, &ids);
    let mut outs = Vec::new();
    // A chunk that divides nothing, one row, and the whole: the same values.
    for chunk in [8, 1, t] {
        let mut losses = f32buf(be, &vec![0.0; t]);
        let mut dh = buf(be, act, &rnd(t * d, 82));
        let mut dw = f32buf(be, &rnd(v * d, 83));
        be.head_xent(HeadXent {
            losses: MatMut::new(&mut losses, t, 1),
            h: Mat::new(&h, t, d),
            w: Mat::new(&w, v, d),
            targets: &targets,
            chunk_rows: chunk,
            grad: Some(HeadXentGrad {
                scale: 1.0 / 33.0,
                dh: MatMut::new(&mut dh, t, d),
                dw: MatMut::new(&mut dw, v, d),
            }),
        });
        outs.push(("losses", read(be, Mat::new(&losses, t, 1))));
        outs.push(("dh", read(be, Mat::new(&dh, t, d))));
        outs.push(("dw (accumulated)", read(be, Mat::new(&dw, v, d))));
    }
    // Forward only: losses, and dh/dw untouched.
    let mut losses = f32buf(be, &vec![0.0; t]);
    be.head_xent(HeadXent {
        losses: MatMut::new(&mut losses, t, 1),
        h: Mat::new(&h, t, d),
        w: Mat::new(&w, v, d),
        targets: &targets,
        chunk_rows: 5,
        grad: None,
    });
    outs.push(("losses, no backward", read(be, Mat::new(&losses, t, 1))));
    outs
}
case!(head_cross_entropy_in_chunks, head_xent_case);

/// The kernels the emulator launches while `f` runs, by name (the emulated stream's trace).
fn launches(f: impl FnOnce()) -> Vec<String> {
    let collector = Collector::default();
    let sink = collector.sink(0, "rank 0".into());
    sink.set_active(true);
    {
        let _t = attach(Some(Ctx { sink: sink.clone(), track: "compute".into() }));
        f();
    }
    sink.spans().into_iter().filter(|s| s.track == "gpu stream (emulated)").map(|s| s.name.to_string()).collect()
}

#[test]
fn fused_kernels_launch_once() {
    for prec in [Precision::F32, Precision::Bf16] {
        let Some(be) = crate::common::backend(prec) else { return };
        if crate::common::on_gpu(&be) {
            return; // launches are counted on the emulator's trace
        }
        let (t, d) = (3, 40);
        let (mut x, r, g) =
            (buf(&be, false, &rnd(t * d, 4)), buf(&be, true, &rnd(t * d, 5)), buf(&be, false, &rnd(d, 6)));
        let (mut y, mut rstd, mut dx, mut dg, mut dot) =
            (buf(&be, true, &rnd(t * d, 7)), be.alloc(t), be.alloc(t * d), be.alloc(d), be.alloc(t));
        let fwd = launches(|| {
            be.residual_rmsnorm(ResidualRmsNorm {
                x: MatMut::new(&mut x, t, d),
                r: Mat::new(&r, t, d),
                y: MatMut::new(&mut y, t, d),
                rstd: MatMut::new(&mut rstd, t, 1),
                gamma: Mat::new(&g, 1, d),
                eps: 1e-5,
            })
        });
        assert_eq!(fwd, ["k_residual_rmsnorm"], "the residual add and RMSNorm (four kernels unfused)");
        let add =
            launches(|| be.residual_sumsq(MatMut::new(&mut x, t, d), Mat::new(&r, t, d), MatMut::new(&mut rstd, t, 1)));
        assert_eq!(add, ["k_residual_sumsq"], "the residual add and a sum of squares (two unfused)");
        let bwd = launches(|| {
            be.rmsnorm_bwd_rows(RmsNormBwdRows {
                dx: MatMut::new(&mut dx, t, d),
                dgamma: MatMut::new(&mut dg, 1, d),
                dy: Mat::new(&y, t, d),
                x: Mat::new(&x, t, d),
                gamma: Mat::new(&g, 1, d),
                rstd: Mat::new(&rstd, t, 1),
                dot: MatMut::new(&mut dot, t, 1),
                accumulate: true,
            })
        });
        assert_eq!(bwd, ["k_rmsnorm_dgamma", "k_rmsnorm_bwd_rows"], "RMSNorm's backward (three kernels unfused)");

        let sh = AttnShape { batch: 1, seq: 4, heads: 2, kv_heads: 1, head_dim: 8 };
        let table = be.rope_table(sh.seq, &rope_inv_freq(sh.head_dim, 10000.0, None));
        let mut qkv = buf(&be, true, &rnd(sh.qkv_len(), 1));
        assert_eq!(launches(|| be.rope_qk(&mut qkv, &table, sh, false)), ["k_rope_qk"], "RoPE on q and k");

        // SwiGLU: forward one pass; backward one pass, the rebuilt product included, and
        // that product has the forward's bits.
        let (t, n) = (6, 10);
        let gu = buf(&be, true, &rnd(2 * t * n, 2).iter().map(|x| 3.0 * x).collect::<Vec<_>>());
        for outer in [true, false] {
            let mut m = buf(&be, true, &vec![0.0; t * n]);
            let fwd = launches(|| be.swiglu(MatMut::new(&mut m, t, n), Mat::new(&gu, 2 * t, n), outer));
            assert_eq!(fwd, ["k_swiglu"]);
            let (mut dgu, mut dm) = (buf(&be, true, &vec![0.0; 2 * t * n]), buf(&be, true, &rnd(t * n, 3)));
            let bwd = launches(|| {
                be.swiglu_bwd(
                    MatMut::new(&mut dgu, 2 * t, n),
                    MatMut::new(&mut dm, t, n),
                    Mat::new(&gu, 2 * t, n),
                    outer,
                    true,
                )
            });
            assert_eq!(bwd, ["k_swiglu_bwd"], "SwiGLU backward and the rebuilt product");
            let (a, b): (Vec<f32>, Vec<f32>) = (be.read_mat(Mat::new(&dm, t, n)), be.read_mat(Mat::new(&m, t, n)));
            assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "the rebuilt product is the forward's");
        }
    }
}

/// Bytes the device holds at most while the head's loss and gradients are computed, above
/// the operands (h, w, targets, losses, dh, dw), fused (`chunk` rows of logits) or not (the
/// whole logits as the model allocates them, `alloc_act`). The emulator's: a GPU's mark is
/// its memory pool's, shared by every backend of the process.
#[cfg(feature = "emulate")]
fn loss_peak(prec: Precision, t: usize, d: usize, v: usize, chunk: Option<usize>) -> (u64, Vec<f64>) {
    let be = boost_cuda::Cuda::emulated(prec);
    let h = buf(&be, true, &rnd(t * d, 90));
    let mut w = be.alloc_param(v * d);
    be.write_mat(MatMut::new(&mut w, v, d), &rnd(v * d, 91));
    let ids: Vec<u32> = (0..t as u32).map(|i| (i * 31) % v as u32).collect();
    let mut targets = be.alloc_ids(t);
    be.write_ids(&mut targets, &ids);
    let mut losses = be.alloc(t);
    let mut dh = be.alloc_act(t * d);
    let mut dw = be.alloc(v * d);
    let base = be.peak_memory_bytes().unwrap();
    let scale = 1.0 / t as f64;
    match chunk {
        Some(rows) => be.head_xent(HeadXent {
            losses: MatMut::new(&mut losses, t, 1),
            h: Mat::new(&h, t, d),
            w: Mat::new(&w, v, d),
            targets: &targets,
            chunk_rows: rows,
            grad: Some(HeadXentGrad { scale, dh: MatMut::new(&mut dh, t, d), dw: MatMut::new(&mut dw, v, d) }),
        }),
        None => {
            let mut logits = be.alloc_act(t * v);
            be.gemm(MatMut::new(&mut logits, t, v), Mat::new(&h, t, d), Mat::new(&w, v, d).t(), 1.0, false);
            be.cross_entropy(MatMut::new(&mut losses, t, 1), MatMut::new(&mut logits, t, v), &targets, Some(scale));
            be.gemm(MatMut::new(&mut dw, v, d), Mat::new(&logits, t, v).t(), Mat::new(&h, t, d), 1.0, true);
            be.gemm(MatMut::new(&mut dh, t, d), Mat::new(&logits, t, v), Mat::new(&w, v, d), 1.0, false);
        }
    }
    let peak = be.peak_memory_bytes().unwrap() - base;
    let mut out = be.read_mat(Mat::new(&losses, t, 1));
    out.extend(be.read_mat::<f64>(Mat::new(&dh, t, d)));
    out.extend(be.read_mat::<f64>(Mat::new(&dw, v, d)));
    (peak, out)
}

/// The chunk of logits is kept by the backend: a second loss (the next step's) allocates
/// nothing, so a step with the chunked loss stays free of allocations after the first.
#[test]
fn chunked_head_loss_allocates_only_the_first_time() {
    let (t, d, v) = (64, 8, 96);
    let Some(be) = crate::common::backend(Precision::Bf16) else { return };
    let h = buf(&be, true, &rnd(t * d, 92));
    let mut w = be.alloc_param(v * d);
    be.write_mat(MatMut::new(&mut w, v, d), &rnd(v * d, 93));
    let ids: Vec<u32> = (0..t as u32).map(|i| (i * 7) % v as u32).collect();
    let mut targets = be.alloc_ids(t);
    be.write_ids(&mut targets, &ids);
    let (mut losses, mut dh, mut dw) = (be.alloc(t), be.alloc_act(t * d), be.alloc(v * d));
    let allocs: Vec<u64> = (0..3)
        .map(|_| {
            let c0 = be.counters();
            be.head_xent(HeadXent {
                losses: MatMut::new(&mut losses, t, 1),
                h: Mat::new(&h, t, d),
                w: Mat::new(&w, v, d),
                targets: &targets,
                chunk_rows: 16,
                grad: Some(HeadXentGrad {
                    scale: 1.0 / t as f64,
                    dh: MatMut::new(&mut dh, t, d),
                    dw: MatMut::new(&mut dw, v, d),
                }),
            });
            be.counters().since(&c0).allocs
        })
        .collect();
    assert_eq!(allocs, [1, 0, 0], "allocations of three chunked losses");
}

#[cfg(feature = "emulate")]
#[test]
fn chunked_head_loss_never_holds_the_logits() {
    // Logits dominate: t·v = 1024·4096 elements against t·d and v·d of 32 columns.
    let (t, d, v, chunk) = (1024, 32, 4096, 128);
    for (prec, tol) in [(Precision::F32, crate::TOL_F32), (Precision::Bf16, crate::TOL_BF16)] {
        let (unfused, want) = loss_peak(prec, t, d, v, None);
        let (fused, got) = loss_peak(prec, t, d, v, Some(chunk));
        eprintln!("{prec:?}: peak above the operands, unfused {unfused} B, chunks of {chunk} rows {fused} B");
        let act = if prec == Precision::Bf16 { 2 } else { 4 };
        assert!(unfused >= (t * v * act) as u64, "the unfused loss holds the whole logits");
        // One chunk of logits, stored as the whole would be: t/chunk = 8 times less.
        assert_eq!(fused, (chunk * v * act) as u64, "the fused loss holds one chunk");
        crate::common::assert_close(&format!("chunked head loss, {prec:?}"), &got, &want, tol);
    }
}
