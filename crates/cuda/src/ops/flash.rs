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
const TENSOR_CORE_HEAD_DIMS: [usize; 3] = [32, 64, 128];
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

/// The three kernels, each an fp32 one (kernels/attention.cu) and its tensor-core instances
/// (kernels/attention_tc.cu).
#[derive(Clone, Copy)]
enum Pass {
    Fwd,
    BwdQ,
    BwdKv,
}

impl Pass {
    fn fp32(self) -> &'static str {
        match self {
            Pass::Fwd => "k_attn_fwd",
            Pass::BwdQ => "k_attn_bwd_q",
            Pass::BwdKv => "k_attn_bwd_kv",
        }
    }

    /// The instance for `head_dim`, one of [`TENSOR_CORE_HEAD_DIMS`].
    fn tensor_core(self, head_dim: usize) -> &'static str {
        let names = match self {
            Pass::Fwd => ["k_attn_tc_fwd_32", "k_attn_tc_fwd_64", "k_attn_tc_fwd_128"],
            Pass::BwdQ => ["k_attn_tc_bwd_q_32", "k_attn_tc_bwd_q_64", "k_attn_tc_bwd_q_128"],
            Pass::BwdKv => ["k_attn_tc_bwd_kv_32", "k_attn_tc_bwd_kv_64", "k_attn_tc_bwd_kv_128"],
        };
        let at = TENSOR_CORE_HEAD_DIMS.iter().position(|&d| d == head_dim);
        names[at.unwrap_or_else(|| unreachable!("no tensor-core attention at head_dim {head_dim}"))]
    }
}

/// Launch `pass` over the sequence's row blocks × `heads` × the batch; its tensor-core
/// instance, when [`tensor_cores`] takes the shape, over `heads` × the row blocks × the batch.
fn grid(be: &Cuda, pass: Pass, heads: usize, sh: &AttnShape, p: &P) {
    let (heads, batch) = (heads as u32, sh.batch as u32);
    let (kernel, at) = if tensor_cores(be, sh) {
        let blocks = sh.seq.div_ceil(TC_ROWS) as u32;
        (pass.tensor_core(sh.head_dim), Launch { grid: (heads, blocks, batch), block: (TC_THREADS, 1, 1) })
    } else {
        let blocks = sh.seq.div_ceil(rows(sh.head_dim)) as u32;
        (pass.fp32(), Launch { grid: (blocks, heads, batch), block: (THREADS, 1, 1) })
    };
    be.launch(kernel, at, p);
}

pub(crate) fn fwd(be: &Cuda, out: MatMut<CudaBuf>, lse: &mut CudaBuf, qkv: &CudaBuf, sh: AttnShape) {
    assert_eq!((out.rows, out.cols), (sh.tokens(), sh.q_width()), "attention: output shape");
    let p = params(&sh, qkv, &[tvm(&out), stats(lse, &sh, "log-sum-exp")]);
    grid(be, Pass::Fwd, sh.heads, &sh, &p);
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
    grid(be, Pass::BwdQ, sh.heads, &sh, &p);
    grid(be, Pass::BwdKv, sh.kv_heads, &sh, &p);
    be.touched_all(dqkv);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name the dispatch launches is a kernel of its file.
    #[test]
    fn every_launched_name_is_a_kernel_of_its_file() {
        let defined =
            |file: &str, name: &str| crate::kernels::FILES.iter().any(|(f, _, ks)| *f == file && ks.contains(&name));
        for pass in [Pass::Fwd, Pass::BwdQ, Pass::BwdKv] {
            assert!(defined("attention", pass.fp32()), "{}", pass.fp32());
            for d in TENSOR_CORE_HEAD_DIMS {
                assert!(defined("attention_tc", pass.tensor_core(d)), "{}", pass.tensor_core(d));
            }
        }
    }

    /// Bf16 takes the tensor cores at their widths; other widths and F32 keep the fp32 kernels.
    #[cfg(feature = "emulate")]
    #[test]
    fn bf16_takes_the_tensor_cores_at_their_widths() {
        let sh = |head_dim| AttnShape { batch: 1, seq: 8, heads: 2, kv_heads: 1, head_dim };
        let (bf16, f32) = (Cuda::emulated(Precision::Bf16), Cuda::emulated(Precision::F32));
        for d in [32, 64, 128] {
            assert!(tensor_cores(&bf16, &sh(d)), "bf16, head_dim {d}");
            assert!(!tensor_cores(&f32, &sh(d)), "f32, head_dim {d}");
        }
        for d in [8, 48, 96] {
            assert!(!tensor_cores(&bf16, &sh(d)), "bf16, head_dim {d}");
        }
    }
}
