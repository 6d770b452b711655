//! `parallel.tp_chunks`: a micro-batch run as chunks that overlap each other's tp collectives
//! gives the unchunked micro-batch's loss and gradients (to f32 rounding: each weight
//! gradient's sum over tokens is split into one sum per chunk), the same bits in every run,
//! and the chunked collective traffic (each collective once per chunk, on the chunk's tokens).

mod common;

use boost_comm::{GridDims, Group, RunOptions, Snapshot, run_ranks_with};
use boost_config::{Config, Recompute};
use boost_exec::chunks::Chunks;
use boost_model::{Batch, Layout, LossSum, Model};
use boost_tensor::Collective;
use boost_tensor::cpu::Cpu;

const B: usize = 4;
const S: usize = 8;
const T: usize = B * S;

fn config(sets: &[&str]) -> Config {
    let mut all = common::small_model(2, sets);
    all.extend(["parallel.tp=2".into(), format!("train.micro_batch={B}"), format!("train.seq_len={S}")]);
    Config::load(None, &all).unwrap()
}

/// Rank by rank: the loss, every gradient buffer and the recording of one micro-batch's
/// forward and backward, in `chunks` chunks (1: [`Model::forward_backward`]).
fn run(cfg: &Config, chunks: usize, policy: Recompute) -> Vec<(LossSum, Vec<Vec<f32>>, Snapshot)> {
    let ids: Vec<u32> = (0..T + 1).map(|i| ((i * 7 + 3) % 61) as u32).collect();
    run_ranks_with(GridDims::tp(2), &RunOptions::default().record(true), |rank, grid| {
        let layout = Layout::from_config(&cfg.model, &cfg.parallel, rank);
        let mut m = Model::new(Cpu::<f32>::new(), &cfg.model, layout, 5)?;
        m.set_recompute(policy);
        let extra: Vec<Group> = (1..chunks).map(|_| grid.tp.duplicate()).collect::<Result<_, _>>()?;
        let tps: Vec<&dyn Collective<Cpu<f32>>> =
            std::iter::once(&grid.tp as &dyn Collective<Cpu<f32>>).chain(extra.iter().map(|g| g as _)).collect();
        let b = Batch { ids: &ids[..T], targets: &ids[1..], batch: B, seq: S };
        // Two micro-batches: the second accumulates onto the first, as with train.accumulation.
        let mut loss = LossSum::default();
        let mut chunked = Chunks::default();
        for _ in 0..2 {
            let l = if chunks == 1 {
                m.forward_backward(&grid.tp, &b, 1.0 / T as f64)
            } else {
                chunked.forward_backward(&mut m, &tps, &b, 1.0 / T as f64, None)
            };
            (loss.sum, loss.tokens) = (loss.sum + l.sum, loss.tokens + l.tokens);
        }
        Ok((loss, m.store().grads().to_vec(), grid.recorder().unwrap().take()))
    })
    .unwrap()
}

fn check(sets: &[&str], chunks: usize, policy: Recompute) {
    let cfg = config(sets);
    let one = run(&cfg, 1, policy);
    let many = run(&cfg, chunks, policy);
    let again = run(&cfg, chunks, policy);
    for (rank, ((a, b), c)) in one.iter().zip(&many).zip(&again).enumerate() {
        let what = format!("{sets:?}, {chunks} chunks, {policy:?}, rank {rank}");
        assert_eq!(a.0.tokens, b.0.tokens, "{what}: tokens");
        assert!((a.0.sum - b.0.sum).abs() <= 1e-6 * a.0.sum.abs(), "{what}: loss {} against {}", a.0.sum, b.0.sum);
        let (mut worst, mut scale) = (0f32, 0f32);
        for (x, y) in a.1.iter().flatten().zip(b.1.iter().flatten()) {
            worst = worst.max((x - y).abs());
            scale = scale.max(x.abs());
        }
        // f32 sums of 32 tokens split into chunks differ from one sum by a few ulps of the
        // largest gradient; a chunk's tokens lost or counted twice is off by O(1) of it.
        assert!(scale > 0.0 && worst <= 2e-6 * scale, "{what}: gradients differ by {worst}, largest {scale}");
        let bits = |g: &[Vec<f32>]| g.iter().flatten().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&b.1), bits(&c.1), "{what}: two chunked runs differ");
        // Every collective runs once per chunk, on the chunk's share of the elements.
        let (sa, sb) = (&a.2.totals, &b.2.totals);
        assert_eq!(sb.calls, chunks as u64 * sa.calls, "{what}: calls");
        assert_eq!(sb.elements, sa.elements, "{what}: elements");
    }
}

#[test]
fn btp_chunks_match_one_chunk() {
    check(&["model.arch=cola"], 2, Recompute::None);
    check(&["model.arch=cola"], 4, Recompute::None);
    check(&["model.arch=cola", "parallel.norm=sync", "parallel.grouping=false"], 2, Recompute::None);
}

#[test]
fn other_schemes_and_recompute_match_one_chunk() {
    check(&["model.arch=cola", "parallel.scheme=vanilla"], 2, Recompute::None);
    check(&["model.arch=full"], 2, Recompute::None);
    check(&["model.arch=lax"], 2, Recompute::Lowrank);
    check(&["model.arch=cola"], 2, Recompute::Full);
}

/// With a `ready` hook the chunks' gradients are summed part by part as every chunk finishes
/// that part (the head's, then each layer's from the top, then the embedding's), so data
/// parallelism can start reducing them during the backward: each part handed to the hook
/// holds its final bits.
#[test]
fn ready_hands_over_each_part_summed_as_the_chunks_finish_it() {
    let cfg = config(&["model.arch=cola"]);
    let ids: Vec<u32> = (0..T + 1).map(|i| ((i * 5 + 1) % 61) as u32).collect();
    for tie in [false, true] {
        let cfg = if tie { config(&["model.arch=cola", "model.tie_embeddings=true"]) } else { cfg.clone() };
        let ranks = run_ranks_with(GridDims::tp(2), &RunOptions::default(), |rank, grid| {
            let layout = Layout::from_config(&cfg.model, &cfg.parallel, rank);
            let mut m = Model::new(Cpu::<f32>::new(), &cfg.model, layout, 5)?;
            let extra = grid.tp.duplicate()?;
            let tps: [&dyn Collective<Cpu<f32>>; 2] = [&grid.tp, &extra];
            let b = Batch { ids: &ids[..T], targets: &ids[1..], batch: B, seq: S };
            let mut reports: Vec<(usize, Vec<Vec<f32>>)> = Vec::new();
            let mut chunked = Chunks::default();
            chunked.forward_backward(&mut m, &tps, &b, 1.0 / T as f64, None);
            let mut hook = |_: &Cpu<f32>, k: usize, g: &[Vec<f32>]| reports.push((k, g[k..].to_vec()));
            chunked.forward_backward(&mut m, &tps, &b, 1.0 / T as f64, Some(&mut hook));
            Ok((reports, m.store().grads().to_vec(), m.store().buf_count()))
        })
        .unwrap();
        for (rank, (reports, grads, bufs)) in ranks.iter().enumerate() {
            let ks: Vec<usize> = reports.iter().map(|r| r.0).collect();
            // The head's part, one per layer (2 layers), the embedding's.
            assert!(ks.len() >= 4, "tie {tie}, rank {rank}: parts handed over at {ks:?}");
            assert!(ks.windows(2).all(|w| w[0] > w[1]) && ks[0] < *bufs && ks.last() == Some(&0), "{ks:?}");
            for (k, part) in reports {
                for (i, (got, want)) in part.iter().zip(&grads[*k..]).enumerate() {
                    let same = got.len() == want.len() && got.iter().zip(want).all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(same, "tie {tie}, rank {rank}: buffer {} handed over at {k} is not final", k + i);
                }
            }
        }
    }
}
