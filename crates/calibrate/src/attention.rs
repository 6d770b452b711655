//! The CPU engine's causal attention (forward and backward) on this machine at a few head
//! dimensions and sequence lengths, as the fraction of the fitted GEMM peak it reaches.

/// (head_dim, seq) points measured: the head widths of the presets, short to long sequences.
pub const POINTS: &[(usize, usize)] = &[(64, 128), (64, 512), (64, 1024), (128, 128), (128, 512), (128, 1024)];

/// Heads per call and tokens per call (whole sequences): enough work for the pool's threads.
const HEADS: usize = 4;
const TOKENS: usize = 2048;

#[derive(Debug, Clone)]
pub struct AttentionSample {
    pub head_dim: usize,
    pub seq: usize,
    /// FLOPs per second on executed FLOPs (see `executed_flops`).
    pub flops_per_s: f64,
}

/// The FLOPs one forward and backward executes under the cost model's convention
/// (`ops::Attention::executed_flops`): the causal half of the S² products, 2·b·s²·h·d_h
/// forward, and a backward that recomputes the scores at 2.5× that.
pub fn executed_flops(head_dim: usize, seq: usize) -> f64 {
    let batch = (TOKENS / seq).max(1);
    3.5 * 2.0 * (batch * seq * seq * HEADS * head_dim) as f64
}

/// Time one forward and backward of the engine's attention at `head_dim` × `seq`, in its pool
/// with the workers held awake as a training step runs them; the median of a few timed runs
/// (`typical_seconds`), in executed FLOPs per second.
pub fn measure_attention(head_dim: usize, seq: usize) -> f64 {
    use boost_tensor::{AttentionBwd, AttnShape, Backend, Mat, MatMut, cpu::Cpu};
    let sh = AttnShape { batch: (TOKENS / seq).max(1), seq, heads: HEADS, kv_heads: HEADS, head_dim };
    let cpu = Cpu::<f32>::new();
    let qkv: Vec<f32> = (0..sh.qkv_len()).map(|i| ((i * 7919 % 1013) as f32) * 2e-3 - 1.0).collect();
    let dout: Vec<f32> = (0..sh.tokens() * sh.q_width()).map(|i| ((i * 104729 % 997) as f32) * 1e-3 - 0.5).collect();
    let mut out = vec![0f32; sh.tokens() * sh.q_width()];
    let mut saved = vec![0f32; cpu.attention_saved_len(&sh)];
    let mut dqkv = vec![0f32; sh.qkv_len()];
    let mut scratch = vec![0f32; cpu.attention_scratch_len(&sh)];
    let (t, w) = (sh.tokens(), sh.q_width());
    let run = || {
        cpu.attention_fwd(MatMut::new(&mut out, t, w), &mut saved, &qkv, sh);
        cpu.attention_bwd(AttentionBwd {
            dqkv: &mut dqkv,
            dout: Mat::new(&dout, t, w),
            out: Mat::new(&out, t, w),
            saved: &saved,
            scratch: &mut scratch,
            qkv: &qkv,
            shape: sh,
        });
    };
    let secs = super::typical_seconds(run);
    std::hint::black_box(&dqkv);
    executed_flops(head_dim, seq) / secs
}
