//! GEMMs and attention give the same bits for any number of threads: work is split over output
//! panels (attention: heads, query blocks and key chunks) only and K is summed in one fixed order (results
//! must not depend on `train.threads`, and data parallel ranks with different pools must agree).

use boost_tensor::cpu::Cpu;
use boost_tensor::{Backend, Mat, MatMut};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Elements whose bits differ between `a` and `b`.
fn differing(a: &[f32], b: &[f32]) -> usize {
    a.iter().zip(b).filter(|(x, y)| x.to_bits() != y.to_bits()).count()
}

fn random(rng: &mut ChaCha8Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

/// `c (m×n) [+]= op(a)·op(b)` with `threads` threads; `a` stored k×m when `ta`, `b` n×k when `tb`.
fn product(shape: (usize, usize, usize), ta: bool, tb: bool, accumulate: bool, threads: usize) -> Vec<f32> {
    let (m, n, k) = shape;
    let mut rng = ChaCha8Rng::seed_from_u64((m * 31 + n * 7 + k) as u64);
    let a = random(&mut rng, m * k);
    let b = random(&mut rng, k * n);
    let mut c = random(&mut rng, m * n);
    let a = if ta { Mat::new(&a, k, m).t() } else { Mat::new(&a, m, k) };
    let b = if tb { Mat::new(&b, n, k).t() } else { Mat::new(&b, k, n) };
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    pool.install(|| Cpu::<f32>::default().gemm(MatMut::new(&mut c, m, n), a, b, 0.7, accumulate));
    c
}

#[test]
fn gemm_results_do_not_depend_on_the_thread_count() {
    // The low-rank step's shapes (r = 128, d = 512, d_ff = 1376, 2048 tokens, cut to 1024 to
    // keep the test short) in their transposes, a tall-and-narrow output split by columns,
    // sizes that leave ragged panels, and small products whose panels would be small enough
    // for the gemm crate's other kernels (its horizontal ones at 16 × 16 outputs or fewer):
    // 8 tokens through a 64-wide layer, and one token (generation) through a 512-wide one.
    let cases = [
        ((128, 512, 1024), true, false, true),
        ((512, 128, 1024), true, false, true),
        ((1376, 128, 1024), true, false, true),
        ((1024, 128, 512), false, false, false),
        ((1024, 512, 128), false, true, false),
        ((40, 1376, 256), false, false, false),
        ((333, 77, 501), true, true, true),
        ((8, 64, 16), false, true, false),
        ((1, 512, 64), false, true, false),
    ];
    for (shape, ta, tb, acc) in cases {
        let one = product(shape, ta, tb, acc, 1);
        for threads in [2, 3, 5] {
            let many = product(shape, ta, tb, acc, threads);
            let differ = differing(&one, &many);
            assert_eq!(
                differ, 0,
                "{shape:?} (ta {ta}, tb {tb}): {differ} elements differ between 1 and {threads} threads"
            );
        }
    }
}

/// Attention's forward and backward at `threads` threads: (out, lse, dqkv).
fn attention(sh: boost_tensor::AttnShape, threads: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let cpu = Cpu::<f32>::default();
    let mut rng = ChaCha8Rng::seed_from_u64(sh.seq as u64);
    let (t, w) = (sh.tokens(), sh.q_width());
    let qkv = random(&mut rng, sh.qkv_len());
    let dout = random(&mut rng, t * w);
    let mut out = vec![0.0; t * w];
    let mut lse = vec![0.0; cpu.attention_saved_len(&sh)];
    let mut dqkv = vec![0.0; sh.qkv_len()];
    let mut scratch = vec![0.0; cpu.attention_scratch_len(&sh)];
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    pool.install(|| {
        cpu.attention_fwd(MatMut::new(&mut out, t, w), &mut lse, &qkv, sh);
        cpu.attention_bwd(boost_tensor::AttentionBwd {
            dqkv: &mut dqkv,
            dout: Mat::new(&dout, t, w),
            out: Mat::new(&out, t, w),
            saved: &lse,
            scratch: &mut scratch,
            qkv: &qkv,
            shape: sh,
        })
    });
    (out, lse, dqkv)
}

#[test]
fn attention_results_do_not_depend_on_the_thread_count() {
    // One sequence with few heads, so that the forward's (sequence, head, query block) units
    // outnumber its heads, and lengths ending on ragged blocks of 1 to 63 rows (and, at 600,
    // of the 128-row blocks of long sequences; at 1100, three key chunks of the backward).
    let cases = [
        (200, 4, 1, 16),
        (200, 4, 2, 16),
        (200, 2, 2, 64),
        (65, 2, 1, 16),
        (69, 4, 1, 8),
        (127, 2, 1, 16),
        (128, 2, 1, 16),
        (40, 2, 1, 16),
        (257, 1, 1, 16),
        (600, 2, 1, 8),
        (1100, 2, 1, 8),
    ]
    .map(|(seq, heads, kv_heads, head_dim)| (1, seq, heads, kv_heads, head_dim));
    // And batches with enough (sequence, kv head) units at one thread for the forward to copy
    // kᵀ in each unit, but not at 3 or 8 (it then copies it for the whole call): the two ways
    // must give the same bits.
    let batched = [(4, 100, 4, 2, 16), (2, 70, 2, 2, 8), (8, 33, 4, 1, 16)];
    for (batch, seq, heads, kv_heads, head_dim) in cases.into_iter().chain(batched) {
        let sh = boost_tensor::AttnShape { batch, seq, heads, kv_heads, head_dim };
        let one = attention(sh, 1);
        for threads in [3, 8] {
            let many = attention(sh, threads);
            for (what, a, b) in [("output", &one.0, &many.0), ("lse", &one.1, &many.1), ("dqkv", &one.2, &many.2)] {
                let differ = differing(a, b);
                assert_eq!(differ, 0, "{sh:?}: {differ} {what} elements differ between 1 and {threads} threads");
            }
        }
    }
}
