//! `cuda_bench --attention B,S,H,KV,D [--attention ...] [--kernels boost,cudnn]`: causal
//! attention alone, forward and backward, timed on one backend per kernels' name, one JSON
//! line per shape and kernels. Operands are bf16 buffers (`alloc_act`), as PyTorch's SDPA
//! takes them, so no staging is timed.
//!
//! FLOPs counted (causal: the products over the lower triangle, half the full square):
//! forward 4·b·h·s²·d/2 (Q·Kᵀ and P·V, 2 FLOPs a multiply-add), backward 2.5× the forward
//! (Q·Kᵀ recomputed, dV, dP, dQ, dK), FlashAttention's convention.

use boost_cuda::{AttentionKernels, Cuda};
use boost_perf::median;
use boost_tensor::{AttentionBwd, AttnShape, Backend, Mat, MatMut};
use serde_json::json;
use std::time::Instant;

pub const FLOPS: &str = "causal: forward 4·b·h·s²·d/2 (Q·Kᵀ and P·V over the lower triangle), backward 2.5× forward";

/// One line per (shape, kernels): seconds and TFLOP/s of each pass, or why it did not run.
pub fn run(be_for: impl Fn() -> Result<Cuda, String>, shapes: &[[usize; 5]], kernels: &[String]) -> Result<(), String> {
    for k in kernels {
        let want = if k == "cudnn" { AttentionKernels::Cudnn } else { AttentionKernels::Boost };
        let be = be_for()?;
        for &[batch, seq, heads, kv_heads, head_dim] in shapes {
            let sh = AttnShape { batch, seq, heads, kv_heads, head_dim };
            let mut line = json!({
                "attention": { "batch": batch, "seq": seq, "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim },
                "kernels": k, "flops_counted": FLOPS, "device": be.info().name, "buffers": "bf16",
            });
            match be.choose_attention(Some(want), &sh) {
                Err(e) => line["error"] = json!(e),
                Ok((_, why)) => {
                    let (fwd, bwd) = time(&be, sh);
                    let f = 4.0 * (batch * heads * head_dim) as f64 * (seq * seq) as f64 / 2.0;
                    line["chosen"] = json!(why);
                    line["fwd_s"] = json!(fwd);
                    line["bwd_s"] = json!(bwd);
                    line["fwd_flops"] = json!(f);
                    line["bwd_flops"] = json!(2.5 * f);
                    line["fwd_tflops"] = json!(f / fwd / 1e12);
                    line["bwd_tflops"] = json!(2.5 * f / bwd / 1e12);
                }
            }
            println!("{line}");
        }
    }
    Ok(())
}

/// Median seconds of the forward and of the backward: five runs of back-to-back calls lasting
/// about 50 ms each (one call on the emulator), after a warm-up that builds cuDNN's graphs.
fn time(be: &Cuda, sh: AttnShape) -> (f64, f64) {
    let (t, qw) = (sh.tokens(), sh.q_width());
    let fill = |n: usize, seed: f64| {
        let mut b = be.alloc_act(n);
        let v: Vec<f64> = (0..n).map(|i| ((i as f64 * 0.618 + seed).fract() - 0.5) * 2.0).collect();
        be.write_mat(MatMut::new(&mut b, 1, n), &v);
        b
    };
    let qkv = fill(sh.qkv_len(), 0.1);
    let dout = fill(t * qw, 0.3);
    let mut out = be.alloc_act(t * qw);
    let mut saved = be.alloc(be.attention_saved_len(&sh));
    let mut dqkv = be.alloc_act(sh.qkv_len());
    let mut scratch = be.alloc(be.attention_scratch_len(&sh));
    let mut fwd = || be.attention_fwd(MatMut::new(&mut out, t, qw), &mut saved, &qkv, sh);
    let fwd_s = repeat(be, &mut fwd);
    let mut bwd = || {
        be.attention_bwd(AttentionBwd {
            dqkv: &mut dqkv,
            dout: Mat::new(&dout, t, qw),
            out: Mat::new(&out, t, qw),
            saved: &saved,
            scratch: &mut scratch,
            qkv: &qkv,
            shape: sh,
        })
    };
    (fwd_s, repeat(be, &mut bwd))
}

/// Seconds a call takes: the median of [`time_calls`]' five runs, or one call on the emulator
/// (a smoke test, not a timing).
fn repeat(be: &Cuda, call: &mut dyn FnMut()) -> f64 {
    median(time_calls(be, call, if be.is_emulated() { 0 } else { 5 }))
}

/// After a warm-up call, `runs` timings of back-to-back calls lasting at least ~50 ms each
/// (the first timed call sets how many), in seconds a call; that first call's time alone when
/// `runs` is 0.
pub fn time_calls(be: &Cuda, call: &mut dyn FnMut(), runs: usize) -> Vec<f64> {
    call();
    be.sync();
    let t0 = Instant::now();
    call();
    be.sync();
    let one = t0.elapsed().as_secs_f64();
    if runs == 0 {
        return vec![one];
    }
    let reps = ((0.05 / one.max(1e-9)).ceil() as usize).clamp(1, 1000);
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..reps {
                call();
            }
            be.sync();
            t.elapsed().as_secs_f64() / reps as f64
        })
        .collect()
}
