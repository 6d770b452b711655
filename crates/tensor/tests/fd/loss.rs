//! The embedding lookup and the cross-entropy loss, whole and vocabulary-parallel.

use crate::{CPU, check, dot, mat, mat_mut, rnd};
use boost_tensor::Backend;
use boost_tensor::XentFinish;
use boost_tensor::cpu::IGNORE;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

#[test]
fn embedding_with_offset_and_out_of_range_ids() {
    let (v, d) = (6, 4);
    let ids: Vec<u32> = vec![3, 9, 5, 3, 4, 2];
    let first = 2; // this table holds ids 2..8
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    let table = rnd(&mut rng, v * d, 1.0);
    let w = rnd(&mut rng, ids.len() * d, 1.0);
    let n = ids.len();
    let f = |p: &[f64]| {
        let mut out = vec![0.0; n * d];
        CPU.embed(mat_mut(&mut out, n, d), mat(&p.to_vec(), v, d), &ids, first);
        dot(&out, &w)
    };
    let mut dt = vec![0.0; v * d];
    CPU.embed_bwd(mat_mut(&mut dt, v, d), mat(&w, n, d), &ids, first);
    check("embedding", &table, &dt, f);
    let mut out = vec![1.0; n * d];
    CPU.embed(mat_mut(&mut out, n, d), mat(&table, v, d), &ids, first);
    assert!(out[d..2 * d].iter().all(|x| *x == 0.0), "id 9 is outside this table and must read zeros");
}

#[test]
fn cross_entropy() {
    let (t, v) = (5, 7);
    let targets: Vec<u32> = vec![1, 6, IGNORE, 0, 3];
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let logits = rnd(&mut rng, t * v, 3.0);
    let c = 0.37;
    let f = |p: &[f64]| {
        let mut l = p.to_vec();
        let mut losses = vec![0.0; t];
        CPU.cross_entropy(mat_mut(&mut losses, t, 1), mat_mut(&mut l, t, v), &targets, None);
        assert_eq!(l, p, "without a gradient the logits are left unchanged");
        c * losses.iter().sum::<f64>()
    };
    let mut g = logits.clone();
    let mut losses = vec![0.0; t];
    CPU.cross_entropy(mat_mut(&mut losses, t, 1), mat_mut(&mut g, t, v), &targets, Some(c));
    check("cross entropy", &logits, &g, f);
    assert_eq!(losses[2], 0.0);
    let row0 = &logits[..v];
    let lse = row0.iter().map(|x| x.exp()).sum::<f64>().ln();
    assert!((losses[0] - (lse - row0[1])).abs() < 1e-12);
}

#[test]
fn vocab_parallel_cross_entropy_equals_the_fused_kernel() {
    let (t, v) = (6, 10);
    let targets: Vec<u32> = vec![1, 9, IGNORE, 0, 3, 7];
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    let logits = rnd(&mut rng, t * v, 3.0);
    let c = 0.25;
    let mut fused = logits.clone();
    let mut fused_loss = vec![0.0; t];
    CPU.cross_entropy(mat_mut(&mut fused_loss, t, 1), mat_mut(&mut fused, t, v), &targets, Some(c));
    // Three ranks holding columns 0..4, 4..8, 8..10 (uneven on purpose).
    let shards = [(0usize, 4usize), (4, 8), (8, 10)];
    let local = |k: usize| -> Vec<f64> {
        let (a, b) = shards[k];
        (0..t).flat_map(|i| logits[i * v + a..i * v + b].to_vec()).collect()
    };
    let mut gmax = vec![f64::NEG_INFINITY; t];
    for (k, &(a, b)) in shards.iter().enumerate() {
        let w = b - a;
        let mut m = vec![0.0; t];
        CPU.row_max(mat_mut(&mut m, t, 1), mat(&local(k), t, w));
        for i in 0..t {
            gmax[i] = gmax[i].max(m[i]);
        }
    }
    let mut gstats = vec![0.0; 2 * t];
    for (k, &(a, b)) in shards.iter().enumerate() {
        let mut st = vec![0.0; 2 * t];
        CPU.xent_partials(mat_mut(&mut st, t, 2), mat(&local(k), t, b - a), mat(&gmax, t, 1), &targets, a);
        for i in 0..2 * t {
            gstats[i] += st[i];
        }
    }
    for (k, &(a, b)) in shards.iter().enumerate() {
        let mut l = local(k);
        let mut losses = vec![0.0; t];
        CPU.xent_finish(XentFinish {
            losses: mat_mut(&mut losses, t, 1),
            logits: mat_mut(&mut l, t, b - a),
            max: mat(&gmax, t, 1),
            stats: mat(&gstats, t, 2),
            targets: &targets,
            first: a,
            grad_scale: Some(c),
        });
        for i in 0..t {
            assert!((losses[i] - fused_loss[i]).abs() < 1e-12, "loss row {i}");
            for j in a..b {
                assert!((l[i * (b - a) + j - a] - fused[i * v + j]).abs() < 1e-12, "grad ({i},{j})");
            }
        }
    }
}
