//! Evaluation through the stage executor (`StageRunner::evaluate`: a table of forwards,
//! nothing kept for a backward). A forward moves exact activations between stages and sums
//! nothing across them, so the loss is the single-stage model's bit for bit under any
//! pipeline split, with the boundary's receives blocking or posted ahead; tensor parallelism
//! sums within each layer, so a tp layout is compared with the same tp degree on one stage.
//! With tp chunks each micro-batch goes through in the pieces the chunks train with, one
//! after the other on the rank's tp group.

use boost_comm::{Coord, GridDims, GridOptions, RunOptions, run_ranks_with};
use boost_config::Config;
use boost_exec::pipeline::{Links, StageRunner};
use boost_exec::{Groups, RankSetup};
use boost_model::{Batch, LossSum, Model};
use boost_tensor::Solo;
use boost_tensor::cpu::Cpu;

const B: usize = 4;
const S: usize = 8;
const MICRO: usize = 3;

fn config(sets: &[&str]) -> Config {
    let mut all: Vec<String> =
        ["model.arch=cola", "model.d=32", "model.d_ff=48", "model.heads=4", "model.rank=8", "model.vocab=61"]
            .iter()
            .chain(["model.layers=4"].iter())
            .map(|s| s.to_string())
            .collect();
    all.extend(sets.iter().map(|s| s.to_string()));
    Config::load(None, &all).unwrap()
}

fn data(v: usize) -> Vec<(Vec<u32>, Vec<u32>)> {
    (0..MICRO)
        .map(|k| {
            let ids: Vec<u32> = (0..B * S + 1).map(|i| ((i * 31 + k * 17 + 3) % v) as u32).collect();
            (ids[..B * S].to_vec(), ids[1..].to_vec())
        })
        .collect()
}

fn batches(data: &[(Vec<u32>, Vec<u32>)]) -> Vec<Batch<'_>> {
    data.iter().map(|(i, t)| Batch { ids: i, targets: t, batch: B, seq: S }).collect()
}

/// The summed loss the last stage's tp rank 0 reports, evaluated on every rank of the grid
/// `sets` describes; `manual` instead runs each micro-batch's pieces by hand on one stage.
fn evaluate(sets: &[&str], overlap: bool, manual: bool) -> LossSum {
    let cfg = config(sets);
    let p = &cfg.parallel;
    let data = data(cfg.model.vocab);
    let opts = RunOptions::default().grid(GridOptions::default().overlap(overlap));
    let out = run_ranks_with(GridDims::new(p.dp, p.pp, p.tp), &opts, |_, grid| {
        let setup = RankSetup::new(&cfg, grid.coord);
        let chunks = setup.tp_chunk_groups(&grid)?;
        let g = Groups::cpu(&grid, &chunks);
        // The posted path must be the one running, or the comparison proves nothing.
        assert_eq!(g.pp.overlaps(), overlap && p.pp > 1, "pipeline group overlap");
        let mut model: Model<Cpu<f32>> = setup.model(Cpu::new())?;
        let bs = batches(&data);
        let loss = if manual {
            let mut total = LossSum::default();
            for b in &bs {
                for piece in 0..p.tp_chunks {
                    let l = model.forward_stage(g.tp, 0, &b.chunk(piece, p.tp_chunks), None, None).unwrap();
                    total.sum += l.sum;
                    total.tokens += l.tokens;
                }
            }
            total
        } else {
            let tps = g.tp_all();
            StageRunner::new(Vec::new()).evaluate(&mut model, Links { tp: &tps, pp: g.pp }, &bs)
        };
        Ok((model.layout().last_stage() && grid.coord.tp == 0).then_some(loss))
    })
    .unwrap();
    let reported: Vec<LossSum> = out.into_iter().flatten().collect();
    assert_eq!(reported.len(), 1, "{sets:?}: one rank reports");
    reported[0]
}

/// The single-stage model's own evaluation (`Model::evaluate`), summed over the micro-batches
/// in order.
fn single(sets: &[&str]) -> LossSum {
    let cfg = config(sets);
    let mut model = RankSetup::new(&cfg, Coord { dp: 0, pp: 0, tp: 0 }).model(Cpu::<f32>::new()).unwrap();
    let data = data(cfg.model.vocab);
    let mut total = LossSum::default();
    for b in batches(&data) {
        let l = model.evaluate(&Solo, &b);
        total.sum += l.sum;
        total.tokens += l.tokens;
    }
    total
}

#[test]
fn pipeline_splits_evaluate_to_the_single_stage_loss_bit_for_bit() {
    for tied in [false, true] {
        let model: &[&str] = if tied { &["model.tie_embeddings=true"] } else { &[] };
        let want = single(model);
        assert_eq!(want.tokens, MICRO * B * S);
        for (pp, overlap) in [(1, false), (2, false), (2, true), (4, false), (4, true)] {
            let split = format!("parallel.pp={pp}");
            let sets: Vec<&str> = model.iter().copied().chain([split.as_str()]).collect();
            let got = evaluate(&sets, overlap, false);
            assert_eq!(
                got.sum.to_bits(),
                want.sum.to_bits(),
                "{sets:?} overlap {overlap}: {} vs {}",
                got.sum,
                want.sum
            );
            assert_eq!(got.tokens, want.tokens);
        }
    }
}

#[test]
fn tp_layouts_evaluate_alike_across_pipeline_splits() {
    let want = evaluate(&["parallel.tp=2"], false, false);
    for overlap in [false, true] {
        let got = evaluate(&["parallel.tp=2", "parallel.pp=2"], overlap, false);
        assert_eq!(got.sum.to_bits(), want.sum.to_bits(), "tp2·pp2 overlap {overlap}: {} vs {}", got.sum, want.sum);
        assert_eq!(got.tokens, want.tokens);
    }
}

/// Several tp groups (chunks) do not make evaluation run as chunks: it computes on the rank's
/// own tp group, the pieces one after the other, and returns their loss.
#[test]
fn tp_chunks_evaluate_in_the_pieces_they_train_with() {
    let sets = ["parallel.tp=2", "parallel.tp_chunks=2"];
    let (got, want) = (evaluate(&sets, false, false), evaluate(&sets, false, true));
    assert_eq!(got.sum.to_bits(), want.sum.to_bits(), "{} vs {}", got.sum, want.sum);
    assert_eq!(got.tokens, want.tokens);
}
