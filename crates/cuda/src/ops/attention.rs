//! Causal attention with GQA. Heads of at most `FLASH_MAX_HEAD_DIM` take the kernels of
//! `flash.rs`, which keep one log-sum-exp per row; wider heads take the path below: cuBLAS
//! strided-batched GEMMs for the products, the softmax kernels of kernels/softmax.cu for the
//! rows, and the whole probability matrices kept for the backward.
//!
//! `qkv` holds q (T × heads·d_h), k and v (T × kv_heads·d_h each) one after the other.
//! Probabilities are [batch][head][query][key]. For sequence `b` and `j < heads/kv_heads`,
//! one batched GEMM covers the heads `g·group + j` over the kv heads `g`: their q columns,
//! probability blocks and output columns are equally spaced, and head `g·group + j` reads kv
//! head `g`. The full S×S products are computed; the softmax zeroes the masked part, so the
//! products that follow it see zeros there.

use crate::backend::{Cuda, WS_ATTN};
use crate::blas::{Operand, Out};
use crate::buf::{CudaBuf, DType};
use crate::device::{P, Tv};
use crate::launch::{tv_f32, tv_of};
use boost_tensor::{AttentionBwd, AttnShape, DeviceBuf, MatMut};

struct Geom {
    b: usize,
    s: usize,
    dh: usize,
    hq: usize,
    hk: usize,
    group: usize,
    qw: usize,
    kw: usize,
    k_off: usize,
    v_off: usize,
}

impl Geom {
    fn new(sh: &AttnShape, qkv_len: usize) -> Self {
        assert!(
            sh.kv_heads > 0 && sh.heads.is_multiple_of(sh.kv_heads),
            "attention: {} heads over {} kv heads",
            sh.heads,
            sh.kv_heads
        );
        assert!(qkv_len >= sh.qkv_len(), "attention: q, k, v need {} elements, buffer has {qkv_len}", sh.qkv_len());
        let t = sh.tokens();
        let (qw, kw) = (sh.q_width(), sh.kv_width());
        Self {
            b: sh.batch,
            s: sh.seq,
            dh: sh.head_dim,
            hq: sh.heads,
            hk: sh.kv_heads,
            group: sh.heads / sh.kv_heads,
            qw,
            kw,
            k_off: t * qw,
            v_off: t * (qw + kw),
        }
    }
    /// Element offset of the probability block of (sequence bi, head h).
    fn unit(&self, bi: usize, h: usize) -> usize {
        (bi * self.hq + h) * self.s * self.s
    }
    fn unit_stride(&self) -> usize {
        self.group * self.s * self.s
    }
}

/// One block per row of probabilities: `rows` rows of `s` keys.
fn softmax_rows(be: &Cuda, kernel: &'static str, rows: usize, s: usize, v0: Tv, v1: Tv) {
    be.per_row(kernel, rows, s, &mut P::of(&[v0, v1]));
}

pub(crate) fn attention_fwd(be: &Cuda, out: MatMut<CudaBuf>, probs: &mut CudaBuf, qkv: &CudaBuf, sh: AttnShape) {
    #[cfg(feature = "cudnn")]
    if let Some(s) = be.cudnn().filter(|s| s.takes(be, &sh)) {
        return s.fwd(be, out, probs, qkv, sh);
    }
    if super::flash::takes(&sh) {
        return super::flash::fwd(be, out, probs, qkv, sh);
    }
    let g = Geom::new(&sh, qkv.len());
    assert_eq!((out.rows, out.cols), (sh.tokens(), g.qw), "attention: output shape");
    assert!(probs.len() >= sh.probs_len(), "attention: probs hold {} < {}", probs.len(), sh.probs_len());
    let scale = 1.0 / (g.dh as f64).sqrt();
    let (s, dh) = (g.s, g.dh);
    for bi in 0..g.b {
        for j in 0..g.group {
            let q = Operand::of(qkv, bi * s * g.qw + j * dh, s, dh, g.qw, false, g.group * dh);
            let k = Operand::of(qkv, g.k_off + bi * s * g.kw, s, dh, g.kw, true, dh);
            let c = Out::of(probs, g.unit(bi, j), s, g.unit_stride());
            be.gemm_batched(c, q, k, (s, s, dh), g.hk, (scale, 0.0));
        }
    }
    let rows = g.b * g.hq * s;
    let pv = tv_of(probs, 0, s);
    softmax_rows(be, "k_softmax_causal", rows, s, pv, Tv::default());
    for bi in 0..g.b {
        for j in 0..g.group {
            let pm = Operand::of(probs, g.unit(bi, j), s, s, s, false, g.unit_stride());
            let v = Operand::of(qkv, g.v_off + bi * s * g.kw, s, dh, g.kw, false, dh);
            let c = Out::of(out.buf, out.off + bi * s * out.ld + j * dh, out.ld, g.group * dh);
            be.gemm_batched(c, pm, v, (s, dh, s), g.hk, (1.0, 0.0));
        }
    }
    be.touched(&out);
}

pub(crate) fn attention_bwd(be: &Cuda, args: AttentionBwd<CudaBuf>) {
    #[cfg(feature = "cudnn")]
    if let Some(s) = be.cudnn().filter(|s| s.takes(be, &args.shape)) {
        return s.bwd(be, args);
    }
    if super::flash::takes(&args.shape) {
        return super::flash::bwd(be, args);
    }
    // The probabilities are kept whole: D comes from them, not from the output.
    let AttentionBwd { dqkv, dout, out: _, saved: probs, scratch, qkv, shape: sh } = args;
    let g = Geom::new(&sh, qkv.len());
    Geom::new(&sh, dqkv.len());
    assert_eq!((dout.rows, dout.cols), (sh.tokens(), g.qw), "attention: dout shape");
    let n = sh.probs_len();
    assert!(probs.len() >= n && scratch.len() >= n, "attention: probs and scratch need {n} elements");
    let scale = 1.0 / (g.dh as f64).sqrt();
    let (s, dh) = (g.s, g.dh);
    // dP and dS in fp32: the caller's scratch when it is fp32, else a workspace.
    let ds_ptr = if scratch.dtype() == DType::F32 { scratch.ptr(0) } else { be.ws(WS_ATTN, 4 * n) };
    let ds_out = |off: usize| Out { ptr: ds_ptr + 4 * off as u64, dtype: DType::F32, ld: s, stride: g.unit_stride() };
    let ds_in = |off: usize, trans: bool| Operand {
        f32: Some(ds_ptr + 4 * off as u64),
        bf16: None,
        rows: s,
        cols: s,
        ld: s,
        trans,
        stride: g.unit_stride(),
    };
    let d_o = |bi: usize, j: usize| {
        Operand::of(dout.buf, dout.off + bi * s * dout.ld + j * dh, s, dh, dout.ld, false, g.group * dh)
    };
    // dP = dO·Vᵀ
    for bi in 0..g.b {
        for j in 0..g.group {
            let v = Operand::of(qkv, g.v_off + bi * s * g.kw, s, dh, g.kw, true, dh);
            be.gemm_batched(ds_out(g.unit(bi, j)), d_o(bi, j), v, (s, s, dh), g.hk, (1.0, 0.0));
        }
    }
    // dS = P ⊙ (dP − Σ_j P·dP)
    let rows = g.b * g.hq * s;
    let dsv = tv_f32(ds_ptr, s);
    softmax_rows(be, "k_softmax_causal_bwd", rows, s, dsv, tv_of(probs, 0, s));
    for bi in 0..g.b {
        for j in 0..g.group {
            let u = g.unit(bi, j);
            let beta = if j > 0 { 1.0 } else { 0.0 };
            // dQ = scale·dS·K
            let k = Operand::of(qkv, g.k_off + bi * s * g.kw, s, dh, g.kw, false, dh);
            let dq = Out::of(dqkv, bi * s * g.qw + j * dh, g.qw, g.group * dh);
            be.gemm_batched(dq, ds_in(u, false), k, (s, dh, s), g.hk, (scale, 0.0));
            // dK += scale·dSᵀ·Q (heads of a kv head in order j = 0, 1, …)
            let q = Operand::of(qkv, bi * s * g.qw + j * dh, s, dh, g.qw, false, g.group * dh);
            let dk = Out::of(dqkv, g.k_off + bi * s * g.kw, g.kw, dh);
            be.gemm_batched(dk, ds_in(u, true), q, (s, dh, s), g.hk, (scale, beta));
            // dV += Pᵀ·dO
            let pt = Operand::of(probs, u, s, s, s, true, g.unit_stride());
            let dv = Out::of(dqkv, g.v_off + bi * s * g.kw, g.kw, dh);
            be.gemm_batched(dv, pt, d_o(bi, j), (s, dh, s), g.hk, (1.0, beta));
        }
    }
    be.touched_all(dqkv);
}
