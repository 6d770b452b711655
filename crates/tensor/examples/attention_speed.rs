//! The CPU attention kernels alone, at a step's shape, in GFLOP/s.
//!
//! `cargo run --release -p boost-tensor --example attention_speed [THREADS] [ROUNDS] [SEQ] [BATCH] [HEADS] [KV_HEADS]`
//!
//! HEADS (default 8) heads of 64 sharing KV_HEADS (default HEADS) key and value heads; a
//! tensor-parallel rank holds heads / tp of them.
//!
//! FLOPs are the causal model FLOPs: 2·S²·d_h per head for QKᵀ and PV together in the forward
//! (half of the full S × S products), twice that in the backward (the recompute of QKᵀ is
//! not counted).

use boost_tensor::cpu::Cpu;
use boost_tensor::{AttentionBwd, AttnShape, Backend, Mat, MatMut};
use std::time::Instant;

fn main() {
    let arg = |i: usize, default: usize| std::env::args().nth(i).and_then(|v| v.parse().ok()).unwrap_or(default);
    let (threads, rounds, seq, batch, heads) = (arg(1, 2), arg(2, 10), arg(3, 256), arg(4, 8), arg(5, 8));
    let kv_heads = arg(6, heads);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a rayon pool");
    let sh = AttnShape { batch, seq, heads, kv_heads, head_dim: 64 };
    let cpu = Cpu::<f32>::new();
    let qkv: Vec<f32> = (0..sh.qkv_len()).map(|i| ((i * 7919 % 1013) as f32) * 2e-3 - 1.0).collect();
    let dout: Vec<f32> = (0..sh.tokens() * sh.q_width()).map(|i| ((i * 104729 % 997) as f32) * 1e-3 - 0.5).collect();
    let mut out = vec![0f32; sh.tokens() * sh.q_width()];
    let mut lse = vec![0f32; cpu.attention_saved_len(&sh)];
    let mut dqkv = vec![0f32; sh.qkv_len()];
    let mut scratch = vec![0f32; cpu.attention_scratch_len(&sh)];
    let fwd_flops = 2.0 * (sh.batch * sh.heads * seq * seq * sh.head_dim) as f64;
    let (mut f, mut b) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        pool.install(|| {
            let t = Instant::now();
            cpu.attention_fwd(MatMut::new(&mut out, sh.tokens(), sh.q_width()), &mut lse, &qkv, sh);
            f.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            let d = Mat::new(&dout, sh.tokens(), sh.q_width());
            let out = Mat::new(&out, sh.tokens(), sh.q_width());
            let args = AttentionBwd {
                dqkv: &mut dqkv,
                dout: d,
                out,
                saved: &lse,
                scratch: &mut scratch,
                qkv: &qkv,
                shape: sh,
            };
            cpu.attention_bwd(args);
            b.push(t.elapsed().as_secs_f64());
        });
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (fm, bm) = (med(&mut f), med(&mut b));
    println!(
        "seq {seq} × batch {batch}, {heads} heads of 64 over {kv_heads} kv heads, {threads} threads: forward {:.2} ms ({:.1} GFLOP/s), backward {:.2} ms ({:.1} GFLOP/s)",
        fm * 1e3,
        fwd_flops / fm * 1e-9,
        bm * 1e3,
        2.0 * fwd_flops / bm * 1e-9
    );
}
