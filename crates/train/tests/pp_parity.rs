//! Grid parity: a model split into pipeline stages, tensor-parallel shards and data-parallel
//! replicas (AFAB or 1F1B, ZeRO-1 or not) computes the loss and every gradient of the
//! single-rank model accumulating the same micro-batches. f64, tolerance 1e-10 (only
//! summation order differs). A tied embedding ends up with the same summed gradient on both
//! end stages; data-parallel replicas end up with identical gradients (or, under ZeRO-1, the
//! shards of them).

mod common;

use boost_comm::{Dims, run_ranks};
use boost_config::{Config, NormMode, PipeSchedule, Recompute, Scheme};
use boost_model::params::Piece;
use boost_model::{Batch, Layout, Model};
use boost_tensor::Solo;
use boost_tensor::cpu::Cpu;
use boost_tensor::{Backend, Collective};
use boost_train::dp::Optimizer;
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
    let (tp, pp, dp) = (cfg.parallel.tp, cfg.parallel.pp, cfg.parallel.dp);
    let zero = cfg.parallel.zero == 1;
    let data = batches(cfg.model.vocab);
    run_ranks(Dims::new(dp, pp, tp), |_, grid| {
        let c = grid.coord;
        let layout = Layout::staged(&cfg.model, &cfg.parallel, c.tp, c.pp, pp);
        let mut m = Model::new(Cpu::<f64>::new(), &cfg.model, layout, SEED)?;
        m.set_recompute(policy);
        m.set_recompute_layers(cfg.train.recompute_layers);
        // Replica r trains on micro-batches r·acc .. (r+1)·acc.
        let acc = M / dp;
        let bs: Vec<Batch> = data[c.dp * acc..(c.dp + 1) * acc]
            .iter()
            .map(|(i, t)| Batch { ids: i, targets: t, batch: B, seq: S })
            .collect();
        let mut runner = StageRunner::new(table(kind, c.pp, pp, acc));
        let tpg: &dyn Collective<Cpu<f64>> = &grid.tp;
        let ppg: &dyn Collective<Cpu<f64>> = &grid.pp;
        let dpg: &dyn Collective<Cpu<f64>> = &grid.dp;
        let scale = 1.0 / (M * B * S) as f64;
        let loss = runner.run(&mut m, tpg, ppg, &bs, scale);
        let mut opt = Optimizer::new(&m.be, &m.store, zero, dp, c.dp);
        opt.sync_grads(&m.be, &mut m.store, dpg, &mut None);
        let pieces = m
            .store
            .pieces
            .iter()
            .map(|p| {
                let grads = match &opt {
                    Optimizer::Replicated(_) => m.be.read_mat(p.slot.of(&m.store.grads)),
                    // ZeRO-1: only this replica's shard of each buffer holds the summed
                    // gradient; report the elements of this piece that fall in it.
                    Optimizer::Zero1(z) => {
                        let own = z.owned(p.slot.buf, m.store.bufs[p.slot.buf].len);
                        let shard = z.shard_grads(p.slot.buf);
                        let mut out = vec![f64::NAN; p.rows.len() * p.cols.len()];
                        for r in 0..p.slot.rows {
                            for q in 0..p.slot.cols {
                                let e = p.slot.off + r * p.slot.ld + q;
                                if own.contains(&e) {
                                    out[r * p.slot.cols + q] =
                                        m.be.read_mat::<f64>(boost_tensor::Mat::at(shard, e, 1, 1, 1))[0];
                                }
                            }
                        }
                        out
                    }
                };
                (p.clone(), grads)
            })
            .collect();
        // The loss of each replica's last stage (tp rank 0), summed by the caller.
        let reports = m.layout.last_stage() && c.tp == 0;
        Ok((if reports { loss.sum * scale } else { 0.0 }, pieces))
    })
    .unwrap()
}

fn check(sets: &[&str], kind: PipeSchedule, policy: Recompute) {
    let mut all = common::small_model(4, sets);
    all.push(format!("train.recompute={}", format!("{policy:?}").to_lowercase()));
    let dp: usize = sets.iter().find_map(|s| s.strip_prefix("parallel.dp=")).map_or(1, |v| v.parse().unwrap());
    all.push(format!("train.accumulation={}", M / dp));
    let cfg = Config::load(None, &all).unwrap();
    let what = format!("{sets:?} {kind:?} {policy:?}");
    let (rloss, rpieces) = reference(&cfg);
    let outs = run(&cfg, kind, policy);
    let loss: f64 = outs.iter().map(|o| o.0).sum();
    assert!((loss - rloss).abs() <= 1e-10 * rloss.abs(), "{what}: loss {loss} vs {rloss}");
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
                        if x.is_nan() {
                            continue; // not in this ZeRO-1 shard
                        }
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
    // Only the first layer of each stage recomputes (a LaX crossing from the previous stage
    // into a recomputed layer, and from a recomputed layer into one that is not).
    check(&["model.arch=lax", "parallel.pp=2", "train.recompute_layers=1"], PipeSchedule::OneFOneB, Recompute::Lowrank);
    check(
        &["model.arch=cola", "parallel.pp=2", "parallel.tp=2", "train.recompute_layers=1"],
        PipeSchedule::Afab,
        Recompute::Full,
    );
    let _ = (Scheme::Btp, NormMode::Online);
}

/// The (tp, pp, dp) layouts of the issue, for CoLA under BTP and full-rank under Megatron,
/// both schedules, with and without ZeRO-1.
#[test]
fn grids_reproduce_the_single_rank_gradients() {
    let grids: &[(usize, usize, usize)] = &[(1, 2, 1), (2, 2, 1), (1, 1, 2), (2, 1, 2), (2, 2, 2)];
    for &(tp, pp, dp) in grids {
        for arch in ["cola", "full"] {
            for kind in [PipeSchedule::OneFOneB, PipeSchedule::Afab] {
                for zero in [0, 1] {
                    if zero == 1 && dp == 1 {
                        continue;
                    }
                    let sets = [
                        format!("model.arch={arch}"),
                        format!("parallel.tp={tp}"),
                        format!("parallel.pp={pp}"),
                        format!("parallel.dp={dp}"),
                        format!("parallel.zero={zero}"),
                    ];
                    let refs: Vec<&str> = sets.iter().map(|s| s.as_str()).collect();
                    check(&refs, kind, Recompute::None);
                }
            }
        }
    }
}
