//! Causal attention without the S×S matrix (kernels/attention.cu): the forward keeps one
//! log-sum-exp per (sequence, head, query row), the backward recomputes the probabilities
//! from it, with D = Σ_j P·dP (= dO·O) per row in `scratch`. Used for head_dim ≤
//! [`FLASH_MAX_HEAD_DIM`]; wider heads take the cuBLAS path of `attention.rs`. Under
//! `Precision::Bf16` the head widths of [`TENSOR_CORE_HEAD_DIMS`] take the tensor-core
//! kernels of kernels/attention_tc.cu (bf16 products, as every GEMM there); the rest, and all
//! of `Precision::F32`, the fp32 kernels of kernels/attention.cu.

use crate::backend::{Cuda, Precision};
use crate::buf::{CudaBuf, DType};
use crate::device::{Launch, P};
use crate::launch::{tv, tv_f32, tv_of, tvm};
use boost_tensor::{AttentionBwd, AttnShape, DeviceBuf, MatMut};

/// `FA_DH` in kernels/attention.cu.
pub(crate) const FLASH_MAX_HEAD_DIM: usize = 128;
/// `FA_NT`: threads per block.
const THREADS: u32 = 256;

/// Head widths with a tensor-core instance (`k_attn_tc_*_{32,64,128}`).
pub(crate) const TENSOR_CORE_HEAD_DIMS: [usize; 3] = [32, 64, 128];
/// `TC_NT` and `TC_ROWS` of kernels/attention_tc.cu: threads and rows of a block.
const TC_THREADS: u32 = 128;
const TC_ROWS: usize = 64;

/// The tensor-core kernels take a shape under `Precision::Bf16` when they have its head width.
fn tensor_cores(be: &Cuda, sh: &AttnShape) -> bool {
    be.precision() == Precision::Bf16 && TENSOR_CORE_HEAD_DIMS.contains(&sh.head_dim)
}

/// Rows of a block's tile (`fa_rows` of kernels/attention.cu): as many as fit `FA_BUF` floats
/// at head_dim + 1 a row, at most `FA_R`.
fn rows(head_dim: usize) -> usize {
    const FA_BUF: usize = 2080;
    const FA_R: usize = 32;
    (FA_BUF / (head_dim + 1)).min(FA_R)
}

/// Whether the flash kernels take this shape.
pub(crate) fn takes(sh: &AttnShape) -> bool {
    sh.head_dim <= FLASH_MAX_HEAD_DIM
}

/// The shape, the scale and `qkv` (v0) in a parameter block; `views` follow from v1 on.
fn params(sh: &AttnShape, qkv: &CudaBuf, views: &[crate::device::Tv]) -> P {
    assert!(qkv.len() >= sh.qkv_len(), "attention: q, k, v need {} elements, buffer has {}", sh.qkv_len(), qkv.len());
    assert!(
        sh.kv_heads > 0 && sh.heads.is_multiple_of(sh.kv_heads),
        "attention: {} heads over {} kv heads",
        sh.heads,
        sh.kv_heads
    );
    let mut p = P::of(&[tv_of(qkv, 0, 0)]);
    p.v[1..=views.len()].copy_from_slice(views);
    p.n[..5].copy_from_slice(&[sh.batch, sh.seq, sh.heads, sh.kv_heads, sh.head_dim].map(|x| x as i64));
    p.f[0] = 1.0 / (sh.head_dim as f64).sqrt();
    p
}

/// A per-row fp32 statistic buffer (log-sum-exps, D) of at least `rows_len` elements.
fn stats(b: &CudaBuf, sh: &AttnShape, what: &str) -> crate::device::Tv {
    assert!(b.dtype() == DType::F32, "attention: the {what} buffer must be fp32");
    assert!(b.len() >= sh.rows_len(), "attention: {what} needs {} elements, buffer has {}", sh.rows_len(), b.len());
    tv_f32(b.ptr(0), 1)
}

/// Launch `kernel` (the fp32 one's name) over the sequence's row blocks × `heads` × the batch;
/// or its tensor-core instance when [`tensor_cores`], over `heads` × the row blocks × the batch.
fn grid(be: &Cuda, kernel: &'static str, heads: usize, sh: &AttnShape, p: &P) {
    let (heads, batch) = (heads as u32, sh.batch as u32);
    let at = if tensor_cores(be, sh) {
        let blocks = sh.seq.div_ceil(TC_ROWS) as u32;
        (tensor_core_kernel(kernel, sh.head_dim), Launch { grid: (heads, blocks, batch), block: (TC_THREADS, 1, 1) })
    } else {
        let blocks = sh.seq.div_ceil(rows(sh.head_dim)) as u32;
        (kernel, Launch { grid: (blocks, heads, batch), block: (THREADS, 1, 1) })
    };
    be.launch(at.0, at.1, p);
}

/// `k_attn_X` → `k_attn_tc_X_<head_dim>`.
fn tensor_core_kernel(kernel: &str, head_dim: usize) -> &'static str {
    const NAMES: [[&str; 3]; 3] = [
        ["k_attn_tc_fwd_32", "k_attn_tc_fwd_64", "k_attn_tc_fwd_128"],
        ["k_attn_tc_bwd_q_32", "k_attn_tc_bwd_q_64", "k_attn_tc_bwd_q_128"],
        ["k_attn_tc_bwd_kv_32", "k_attn_tc_bwd_kv_64", "k_attn_tc_bwd_kv_128"],
    ];
    let which = ["k_attn_fwd", "k_attn_bwd_q", "k_attn_bwd_kv"].iter().position(|k| *k == kernel);
    let width = TENSOR_CORE_HEAD_DIMS.iter().position(|&d| d == head_dim);
    match (which, width) {
        (Some(k), Some(w)) => NAMES[k][w],
        _ => unreachable!("no tensor-core instance of {kernel} at head_dim {head_dim}"),
    }
}

pub(crate) fn fwd(be: &Cuda, out: MatMut<CudaBuf>, lse: &mut CudaBuf, qkv: &CudaBuf, sh: AttnShape) {
    assert_eq!((out.rows, out.cols), (sh.tokens(), sh.q_width()), "attention: output shape");
    let p = params(&sh, qkv, &[tvm(&out), stats(lse, &sh, "log-sum-exp")]);
    grid(be, "k_attn_fwd", sh.heads, &sh, &p);
    be.touched(&out);
}

pub(crate) fn bwd(be: &Cuda, args: AttentionBwd<CudaBuf>) {
    let AttentionBwd { dqkv, dout, out, saved: lse, scratch: d, qkv, shape: sh } = args;
    assert!(dqkv.len() >= sh.qkv_len(), "attention: dq, dk, dv need {} elements", sh.qkv_len());
    assert!(dqkv.dtype() == qkv.dtype(), "attention: qkv and dqkv differ in dtype");
    assert_eq!((dout.rows, dout.cols), (sh.tokens(), sh.q_width()), "attention: dout shape");
    assert_eq!((out.rows, out.cols), (sh.tokens(), sh.q_width()), "attention: output shape");
    let views = [tv(&dout), stats(lse, &sh, "log-sum-exp"), stats(d, &sh, "scratch"), tv_of(dqkv, 0, 0), tv(&out)];
    let p = params(&sh, qkv, &views);
    // dQ and D first; the key side reads D (kernels run in order on the stream).
    grid(be, "k_attn_bwd_q", sh.heads, &sh, &p);
    grid(be, "k_attn_bwd_kv", sh.kv_heads, &sh, &p);
    be.touched_all(dqkv);
}
