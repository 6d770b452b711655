//! Pipeline parity: a model split into stages (with or without tensor parallelism, AFAB or
//! 1F1B, several micro-batches) computes the loss and every gradient of the single-stage
//! model accumulating the same micro-batches. f64, tolerance 1e-10 (only summation order
//! differs). A tied embedding ends up with the same summed gradient on both end stages.

use boost_comm::{Dims, run_ranks};
use boost_config::{Config, NormMode, PipeSchedule, Recompute, Scheme};
use boost_model::params::Piece;
use boost_model::{Batch, Layout, Model};
use boost_tensor::Solo;
use boost_tensor::cpu::Cpu;
use boost_tensor::{Backend, Collective};
use boost_train::pipeline::StageRunner;
use boost_train::pipeline::schedule::table;

const B: usize = 2;
const S: usize = 8;
const M: usize = 4;
const SEED: u64 = 9;

fn batches(v: usize) -> Vec<(Vec<u32>, Vec<u32>)> {
    (0..M)
        .map(|k| {
            let ids: Vec<u32> = (0..B * S + 1).map(|i| ((i * 31 + k * 17 + 3) % v) as u32).collect();
            (ids[..B * S].to_vec(), ids[1..].to_vec())
        })
        .collect()
}

type Out = (f64, Vec<(Piece, Vec<f64>)>);

fn reference(cfg: &Config) -> Out {
    let mut m = Model::new(Cpu::<f64>::new(), &cfg.model, Layout::single(&cfg.model), SEED).unwrap();
    let scale = 1.0 / (M * B * S) as f64;
    let mut loss = 0.0;
    for (ids, targets) in batches(cfg.model.vocab) {
        loss += m.forward_backward(&Solo, &Batch { ids: &ids, targets: &targets, batch: B, seq: S }, scale).sum;
    }
    let pieces = m.store.pieces.iter().map(|p| (p.clone(), m.be.read_mat(p.slot.of(&m.store.grads)))).collect();
    (loss * scale, pieces)
}

fn run(cfg: &Config, kind: PipeSchedule, policy: Recompute) -> Vec<Out> {
    let (tp, pp) = (cfg.parallel.tp, cfg.parallel.pp);
    let data = batches(cfg.model.vocab);
    run_ranks(Dims::new(1, pp, tp), |_, grid| {
        let layout = Layout::staged(&cfg.model, &cfg.parallel, grid.coord.tp, grid.coord.pp, pp);
        let mut m = Model::new(Cpu::<f64>::new(), &cfg.model, layout, SEED)?;
        m.set_recompute(policy);
        let bs: Vec<Batch> = data.iter().map(|(i, t)| Batch { ids: i, targets: t, batch: B, seq: S }).collect();
        let mut runner = StageRunner::new(table(kind, grid.coord.pp, pp, M));
        let tpg: &dyn Collective<Cpu<f64>> = &grid.tp;
        let ppg: &dyn Collective<Cpu<f64>> = &grid.pp;
        let scale = 1.0 / (M * B * S) as f64;
        let loss = runner.run(&mut m, tpg, ppg, &bs, scale);
        let pieces = m.store.pieces.iter().map(|p| (p.clone(), m.be.read_mat(p.slot.of(&m.store.grads)))).collect();
        Ok((loss.sum * scale, pieces))
    })
    .unwrap()
}

fn check(sets: &[&str], kind: PipeSchedule, policy: Recompute) {
    let mut all: Vec<String> =
        ["model.d=32", "model.d_ff=48", "model.heads=4", "model.rank=8", "model.vocab=61", "model.layers=4"]
            .iter()
            .chain(sets)
            .map(|s| s.to_string())
            .collect();
    all.push(format!("train.recompute={}", format!("{policy:?}").to_lowercase()));
    let cfg = Config::load(None, &all).unwrap();
    let what = format!("{sets:?} {kind:?} {policy:?}");
    let (rloss, rpieces) = reference(&cfg);
    let outs = run(&cfg, kind, policy);
    let losses: Vec<f64> = outs.iter().map(|o| o.0).filter(|l| *l != 0.0).collect();
    assert!(
        !losses.is_empty() && losses.iter().all(|l| (l - rloss).abs() <= 1e-10 * rloss.abs()),
        "{what}: loss {losses:?} vs {rloss}"
    );
    for (rp, rg) in &rpieces {
        let (r, c) = rp.matrix_shape();
        let mut full = vec![f64::NAN; r * c];
        let mut held = 0;
        for (_, pieces) in &outs {
            for (p, g) in pieces.iter().filter(|(p, _)| p.name == rp.name) {
                held += 1;
                let w = p.cols.len();
                for (k, row) in p.rows.clone().enumerate() {
                    for (j, col) in p.cols.clone().enumerate() {
                        let x = g[k * w + j];
                        let slot = &mut full[row * c + col];
                        assert!(
                            slot.is_nan() || *slot == x,
                            "{what}: {}: copies disagree at ({row},{col}): {slot} vs {x}",
                            rp.name
                        );
                        *slot = x;
                    }
                }
            }
        }
        assert!(held > 0 && full.iter().all(|x| !x.is_nan()), "{what}: {} is not fully held", rp.name);
        let diff = full.iter().zip(rg).map(|(a, b)| (a - b) * (a - b)).sum::<f64>().sqrt();
        let norm = rg.iter().map(|b| b * b).sum::<f64>().sqrt().max(1e-300);
        assert!(diff / norm <= 1e-10, "{what}: grad {} differs by {:.2e}", rp.name, diff / norm);
    }
}

#[test]
fn pipelines_reproduce_the_single_stage_gradients() {
    for kind in [PipeSchedule::OneFOneB, PipeSchedule::Afab] {
        check(&["model.arch=cola", "parallel.pp=2"], kind, Recompute::None);
        check(&["model.arch=cola", "parallel.pp=4"], kind, Recompute::None);
        check(&["model.arch=full", "parallel.pp=2", "parallel.tp=2"], kind, Recompute::None);
        check(&["model.arch=cola", "parallel.pp=2", "parallel.tp=2"], kind, Recompute::None);
    }
    check(
        &["model.arch=cola", "parallel.pp=2", "parallel.tp=2", "parallel.scheme=vanilla"],
        PipeSchedule::OneFOneB,
        Recompute::None,
    );
    check(&["model.arch=cola", "parallel.pp=2", "model.tie_embeddings=true"], PipeSchedule::OneFOneB, Recompute::None);
    check(
        &["model.arch=cola", "parallel.pp=2", "parallel.tp=2", "model.tie_embeddings=true"],
        PipeSchedule::Afab,
        Recompute::None,
    );
    check(&["model.arch=lax", "parallel.pp=2"], PipeSchedule::OneFOneB, Recompute::None);
    check(&["model.arch=lax", "parallel.pp=4", "parallel.tp=2"], PipeSchedule::OneFOneB, Recompute::Lowrank);
    check(&["model.arch=cola", "parallel.pp=2", "parallel.tp=2"], PipeSchedule::OneFOneB, Recompute::Lowrank);
    check(&["model.arch=lax", "parallel.pp=2", "model.lax.gate=kron"], PipeSchedule::Afab, Recompute::Full);
    let _ = (Scheme::Btp, NormMode::Online);
}
