//! Rotary embedding and causal attention (against a naive implementation too).

use crate::{CPU, check, dot, mat, mat_mut, rnd};
use boost_tensor::{AttentionBwd, AttnShape, Backend, rope_inv_freq};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

#[test]
fn rope_backward_is_the_inverse_rotation() {
    let (seq, heads, dh) = (5, 2, 6);
    let t = 2 * seq;
    let mut rng = ChaCha8Rng::seed_from_u64(6);
    let x = rnd(&mut rng, t * heads * dh, 1.0);
    let w = rnd(&mut rng, t * heads * dh, 1.0);
    let table = CPU.rope_table(seq, &rope_inv_freq(dh, 10000.0, None));
    let f = |p: &[f64]| {
        let mut y = p.to_vec();
        CPU.rope(mat_mut(&mut y, t, heads * dh), &table, seq, dh, false);
        dot(&y, &w)
    };
    let mut d = w.clone();
    CPU.rope(mat_mut(&mut d, t, heads * dh), &table, seq, dh, true);
    check("rope", &x, &d, f);
    // Position 0 is the identity, and rows of the second sequence restart at position 0.
    let mut y = x.clone();
    CPU.rope(mat_mut(&mut y, t, heads * dh), &table, seq, dh, false);
    let w0 = heads * dh;
    assert_eq!(&y[..w0], &x[..w0]);
    assert_eq!(&y[seq * w0..(seq + 1) * w0], &x[seq * w0..(seq + 1) * w0]);
}

fn naive_attention(qkv: &[f64], sh: AttnShape) -> Vec<f64> {
    let (s, dh, t) = (sh.seq, sh.head_dim, sh.tokens());
    let (qw, kw) = (sh.q_width(), sh.kv_width());
    let q_at = |r: usize, h: usize| &qkv[r * qw + h * dh..][..dh];
    let k_at = |r: usize, g: usize| &qkv[t * qw + r * kw + g * dh..][..dh];
    let v_at = |r: usize, g: usize| &qkv[t * (qw + kw) + r * kw + g * dh..][..dh];
    let mut out = vec![0.0; t * qw];
    for b in 0..sh.batch {
        for h in 0..sh.heads {
            let g = h / (sh.heads / sh.kv_heads);
            for i in 0..s {
                let mut sc: Vec<f64> =
                    (0..=i).map(|j| dot(q_at(b * s + i, h), k_at(b * s + j, g)) / (dh as f64).sqrt()).collect();
                let m = sc.iter().cloned().fold(f64::MIN, f64::max);
                let z: f64 = sc
                    .iter_mut()
                    .map(|v| {
                        *v = (*v - m).exp();
                        *v
                    })
                    .sum();
                for (j, p) in sc.iter().enumerate() {
                    for k in 0..dh {
                        out[(b * s + i) * qw + h * dh + k] += p / z * v_at(b * s + j, g)[k];
                    }
                }
            }
        }
    }
    out
}

#[test]
fn attention_matches_naive_and_finite_differences() {
    // seq 70 crosses the 64-row block boundary.
    naive_and_finite_differences(AttnShape { batch: 2, seq: 70, heads: 4, kv_heads: 2, head_dim: 4 }, 7);
}

#[test]
fn long_sequences_in_longer_blocks_match_naive_and_finite_differences() {
    // Past 512 positions the blocks have 128 rows: seq 600 ends on a ragged one.
    naive_and_finite_differences(AttnShape { batch: 1, seq: 600, heads: 2, kv_heads: 1, head_dim: 4 }, 53);
}

#[test]
fn backward_in_key_chunks_matches_finite_differences() {
    // seq 1100: three 512-key chunks of the backward (the last ragged), two sequences, so
    // the later chunks' dQ terms of either sequence meet in dQ.
    naive_and_finite_differences(AttnShape { batch: 2, seq: 1100, heads: 2, kv_heads: 1, head_dim: 4 }, 211);
}

/// The forward against the naive loop, and the backward against finite differences on every
/// `stride`-th coordinate of q, k and v.
fn naive_and_finite_differences(sh: AttnShape, stride: usize) {
    let t = sh.tokens();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let qkv = rnd(&mut rng, sh.qkv_len(), 1.0);
    let w = rnd(&mut rng, t * sh.q_width(), 1.0);
    let fwd = |p: &Vec<f64>| {
        let mut out = vec![0.0; t * sh.q_width()];
        let mut probs = vec![0.0; CPU.attention_saved_len(&sh)];
        CPU.attention_fwd(mat_mut(&mut out, t, sh.q_width()), &mut probs, p, sh);
        (out, probs)
    };
    let (out, probs) = fwd(&qkv);
    let naive = naive_attention(&qkv, sh);
    let err = out.iter().zip(&naive).fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    assert!(err < 1e-12, "attention forward differs from the naive loop by {err:e}");
    let mut dqkv = vec![7.0; sh.qkv_len()]; // overwritten, not accumulated
    // The CPU keeps one log-sum-exp per row and head, and no S × S scratch: only the dQ terms
    // of the backward's 512-key chunks after the first, for the query rows past each chunk's
    // start, and with several chunks each row's D = dO·O (one per row and head).
    let chunks = sh.seq.div_ceil(512);
    let past_chunks: usize = (1..chunks).map(|c| sh.seq - 512 * c).sum();
    let d_rows = if chunks > 1 { sh.rows_len() } else { 0 };
    assert_eq!(
        (CPU.attention_saved_len(&sh), CPU.attention_scratch_len(&sh)),
        (sh.rows_len(), past_chunks * sh.batch * sh.q_width() + d_rows)
    );
    let mut scratch = vec![0.0; CPU.attention_scratch_len(&sh)];
    CPU.attention_bwd(AttentionBwd {
        dqkv: &mut dqkv,
        dout: mat(&w, t, sh.q_width()),
        out: mat(&out, t, sh.q_width()),
        saved: &probs,
        scratch: &mut scratch,
        qkv: &qkv,
        shape: sh,
    });
    // Finite differences on every stride-th coordinate (all of q, k and v are covered).
    let idx: Vec<usize> = (0..qkv.len()).step_by(stride).collect();
    let sub: Vec<f64> = idx.iter().map(|&i| qkv[i]).collect();
    let dsub: Vec<f64> = idx.iter().map(|&i| dqkv[i]).collect();
    check("attention", &sub, &dsub, |p| {
        let mut q = qkv.clone();
        for (k, &i) in idx.iter().enumerate() {
            q[i] = p[k];
        }
        dot(&fwd(&q).0, &w)
    });
}
