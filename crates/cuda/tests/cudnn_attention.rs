//! cuDNN's fused attention (feature `cudnn`, `train.attention = cudnn`) against our kernels
//! and the CPU engine, on a GPU: forward output and the q, k, v gradients at head_dim 64 and
//! 128, grouped-query and multi-head, seq 128 to 4096. Skipped, saying why, without a GPU or
//! without libcudnn 9 (`BOOST_CUDNN_LIB`, or PyTorch's wheels in python3's site-packages).
//!
//! Inputs are bf16 values (rounded on the host), so the three see the same numbers and the
//! bf16 staging of the fp32 buffers is exact. Tolerances, on both ‖a−b‖/‖b‖ and
//! max|a−b|/max|b| against the CPU engine (fp32):
//! - forward 1e-2: both GPU kernels round the probabilities to bf16 before P·V and cuDNN
//!   rounds O to bf16, 2⁻⁹ relative each (the bound of kernels/main.rs's bf16 cases);
//! - backward 2e-2: dS = P ⊙ (dP − D) subtracts nearly equal terms, and P, dP and dS are each
//!   rounded to bf16 before their products (two roundings more than the forward's), then
//!   dQ, dK, dV to bf16 by cuDNN.
//!
//! cuDNN against ours: the sum of both bounds. The deterministic backward gives the same
//! bits twice.
#![cfg(feature = "cudnn")]

mod common;

use boost_cuda::{AttentionKernels, Cuda, Precision};
use boost_tensor::cpu::Cpu;
use boost_tensor::{AttentionBwd, AttnShape, Backend, Mat, MatMut};
use boost_testkit::assert_close;

const TOL_FWD: f64 = 1e-2;
const TOL_BWD: f64 = 2e-2;

/// (batch, seq, heads, kv_heads, head_dim).
const SHAPES: [(usize, usize, usize, usize, usize); 7] = [
    (2, 128, 8, 2, 64),
    (2, 128, 4, 4, 128),
    (1, 512, 8, 8, 64),
    (1, 1024, 8, 2, 128),
    (1, 2048, 4, 1, 64),
    (1, 4096, 4, 2, 128),
    (1, 4096, 2, 2, 64),
];

/// Deterministic bf16 values in [-1, 1): `common::rnd`'s, rounded on the host.
fn rnd(n: usize, seed: u64) -> Vec<f64> {
    common::rnd(n, seed).into_iter().map(|x| half::bf16::from_f64(x).to_f64()).collect()
}

/// The forward output and dq|dk|dv of `sh` on `be` (fp32 buffers, as the trainer's).
fn run<B: Backend>(be: &B, sh: AttnShape) -> (Vec<f64>, Vec<f64>) {
    let (t, qw) = (sh.tokens(), sh.q_width());
    let put = |data: &[f64]| {
        let mut b = be.alloc(data.len());
        be.write_mat(MatMut::new(&mut b, 1, data.len()), data);
        b
    };
    let qkv = put(&rnd(sh.qkv_len(), 1));
    let mut out = be.alloc(t * qw);
    let mut saved = be.alloc(be.attention_saved_len(&sh));
    be.attention_fwd(MatMut::new(&mut out, t, qw), &mut saved, &qkv, sh);
    let dout = put(&rnd(t * qw, 2));
    let mut dqkv = be.alloc(sh.qkv_len());
    let mut scratch = be.alloc(be.attention_scratch_len(&sh));
    be.attention_bwd(AttentionBwd {
        dqkv: &mut dqkv,
        dout: Mat::new(&dout, t, qw),
        out: Mat::new(&out, t, qw),
        saved: &saved,
        scratch: &mut scratch,
        qkv: &qkv,
        shape: sh,
    });
    (be.read_mat(Mat::new(&out, t, qw)), be.read_mat(Mat::new(&dqkv, 1, sh.qkv_len())))
}

/// Two bf16 backends on GPU 0, ours and cuDNN's, or None after saying why not.
fn backends(probe: &AttnShape) -> Option<(Cuda, Cuda)> {
    if let Err(e) = boost_cuda::probe() {
        eprintln!("SKIPPED: no GPU ({e})");
        return None;
    }
    let ours = Cuda::new(0, Precision::Bf16).expect("the probe found a GPU");
    let cudnn = Cuda::new(0, Precision::Bf16).expect("the probe found a GPU");
    ours.choose_attention(Some(AttentionKernels::Boost), probe).unwrap();
    match cudnn.choose_attention(Some(AttentionKernels::Cudnn), probe) {
        Ok((_, why)) => eprintln!("attention: {why}"),
        Err(e) => {
            eprintln!("SKIPPED: cuDNN cannot run here: {e}");
            return None;
        }
    }
    assert_eq!(cudnn.attention_kernels(), AttentionKernels::Cudnn);
    Some((ours, cudnn))
}

#[test]
fn cudnn_attention_matches_ours_and_the_cpu_engine() {
    let shape = |(batch, seq, heads, kv_heads, head_dim)| AttnShape { batch, seq, heads, kv_heads, head_dim };
    let Some((ours, cudnn)) = backends(&shape(SHAPES[0])) else { return };
    let cpu = Cpu::<f32>::new();
    for s in SHAPES {
        let sh = shape(s);
        let what = format!("{sh:?}");
        let (o_ref, d_ref) = run(&cpu, sh);
        let (o_ours, d_ours) = run(&ours, sh);
        let (o_cd, d_cd) = run(&cudnn, sh);
        assert_close(&format!("ours forward, {what}"), &o_ours, &o_ref, TOL_FWD);
        assert_close(&format!("cuDNN forward, {what}"), &o_cd, &o_ref, TOL_FWD);
        assert_close(&format!("cuDNN vs ours forward, {what}"), &o_cd, &o_ours, 2.0 * TOL_FWD);
        for (name, range) in [
            ("dq", 0..sh.tokens() * sh.q_width()),
            ("dk", sh.tokens() * sh.q_width()..sh.tokens() * (sh.q_width() + sh.kv_width())),
            ("dv", sh.tokens() * (sh.q_width() + sh.kv_width())..sh.qkv_len()),
        ] {
            let r = range.clone();
            assert_close(&format!("ours {name}, {what}"), &d_ours[r.clone()], &d_ref[r.clone()], TOL_BWD);
            assert_close(&format!("cuDNN {name}, {what}"), &d_cd[r.clone()], &d_ref[r.clone()], TOL_BWD);
            assert_close(&format!("cuDNN vs ours {name}, {what}"), &d_cd[r.clone()], &d_ours[r], 2.0 * TOL_BWD);
        }
        // The deterministic backward: the same bits again.
        let (_, again) = run(&cudnn, sh);
        assert!(
            again.iter().zip(&d_cd).all(|(a, b)| a.to_bits() == b.to_bits()),
            "cuDNN backward not deterministic, {what}"
        );
        eprintln!("{what}: cuDNN, ours and the CPU engine agree");
    }
}
