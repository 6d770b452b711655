//! Tensor-parallel parity: sharded runs reproduce the unsharded model on the same backend,
//! and each rank of a sharded step matches the same rank on a reference backend.

mod cases;
mod ranks;

pub use ranks::ranks_match;

use crate::compare::Bound;
use crate::engine::Engine;
use boost_comm::{GridDims, run_ranks};
use boost_config::{ModelConfig, Recompute, Scheme};
use boost_model::{Batch, Layout, Model, params::Piece};
use boost_tensor::{Backend, Collective, Solo};
use cases::cases;

const SEED: u64 = 5;
const B: usize = 2;
const S: usize = 8;

/// What the forward keeps: a policy, applied to the first N layers (0: all).
pub type Keep = (Recompute, usize);

/// The parity sweeps, each a test of its own in the backends' suites.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sweep {
    /// The full-rank model (untied and tied embeddings) under Megatron.
    FullRank,
    /// SVD under vanilla and BTP.
    Svd,
    /// CoLA under vanilla and BTP, and with low-rank activations only under BTP.
    Cola,
    /// CoLA with tied embeddings, and with grouped-query attention.
    ColaTiedGqa,
    /// LaX (dense gate over CoLA, Kronecker gate over SVD) under BTP.
    Lax,
    /// Activation recompute (`full`, `lowrank`) of every layer gives the results of `none`.
    Recompute,
    /// Recompute of the first layers only: the boundary between a recomputed layer and one
    /// that is not (a LaX crossing across it included) gives the results of `none`.
    RecomputeFirstLayers,
}

impl Sweep {
    /// How many sharded runs the sweep checks: none may drop out unnoticed.
    pub const fn runs(self) -> usize {
        match self {
            Sweep::FullRank => 12,
            Sweep::Svd => 18,
            Sweep::Cola => 30,
            Sweep::ColaTiedGqa => 23,
            Sweep::Lax => 24,
            Sweep::Recompute => 75,
            Sweep::RecomputeFirstLayers => 32,
        }
    }
}

/// One `#[test]` per sweep, each running [`parity`] on the engine that `$engine` (an
/// `Option<Engine<_>>`, None to skip) gives, within `$tol`.
#[macro_export]
macro_rules! parity_tests {
    ($engine:expr, $tol:expr) => {
        $crate::parity_tests!(@one full_rank_megatron, FullRank, $engine, $tol);
        $crate::parity_tests!(@one svd_vanilla_and_btp, Svd, $engine, $tol);
        $crate::parity_tests!(@one cola_vanilla_and_btp, Cola, $engine, $tol);
        $crate::parity_tests!(@one cola_tied_and_gqa, ColaTiedGqa, $engine, $tol);
        $crate::parity_tests!(@one lax_btp, Lax, $engine, $tol);
        $crate::parity_tests!(@one recompute_policies_match_no_recompute, Recompute, $engine, $tol);
        $crate::parity_tests!(@one recompute_of_the_first_layers_matches_no_recompute, RecomputeFirstLayers, $engine, $tol);
    };
    (@one $name:ident, $sweep:ident, $engine:expr, $tol:expr) => {
        #[test]
        fn $name() {
            let Some(engine) = $engine else { return };
            $crate::tp::parity(&engine, $crate::tp::Sweep::$sweep, $tol);
        }
    };
}

/// Run `sweep` on `engine`: each sharded run against the unsharded model within `tol`
/// (weights, the loss across ranks and replicated pieces bit-for-bit).
pub fn parity<E: Backend>(engine: &Engine<E>, sweep: Sweep, bound: impl Into<Bound>) {
    let bound = bound.into();
    let mut checked = 0;
    for case in cases(sweep) {
        let reference = reference(engine, &case.cfg);
        for &(layout, keep) in &case.runs {
            check(engine, &case.cfg, layout, keep, &reference, bound);
            checked += 1;
        }
    }
    assert_eq!(checked, sweep.runs(), "{sweep:?}: sharded runs checked");
}

struct RankOut {
    rank: usize,
    logits: Vec<f64>,
    loss: f64,
    embed_grad: Vec<f64>,
    pieces: Vec<(Piece, Vec<f64>, Vec<f64>)>,
}

fn batch(v: usize) -> (Vec<u32>, Vec<u32>) {
    let ids: Vec<u32> = (0..B * S + 1).map(|i| ((i * 37 + 11) % v) as u32).collect();
    (ids[..B * S].to_vec(), ids[1..].to_vec())
}

fn reference<E: Backend>(engine: &Engine<E>, cfg: &ModelConfig) -> RankOut {
    let (ids, targets) = batch(cfg.vocab);
    let mut m = Model::new(engine.backend(), cfg, Layout::single(cfg), SEED).unwrap();
    step_and_read(&mut m, &Solo, 0, &ids, &targets)
}

fn run<E: Backend>(engine: &Engine<E>, cfg: &ModelConfig, layout: Layout, (policy, first): Keep) -> Vec<RankOut> {
    let (ids, targets) = batch(cfg.vocab);
    let outs = run_ranks(GridDims::tp(layout.tp), |rank, grid| {
        let be = engine.backend();
        let tp = engine.collective(&be, &grid.tp);
        let mut m = Model::new(be, cfg, Layout { tp_rank: rank, ..layout }, SEED)?;
        m.set_recompute(policy);
        m.set_recompute_layers(first);
        Ok(step_and_read(&mut m, &*tp, rank, &ids, &targets))
    });
    outs.unwrap_or_else(|e| panic!("{layout:?}: {e:#}"))
}

/// Logits, then one forward/backward, and everything the comparison reads back.
fn step_and_read<E: Backend>(
    m: &mut Model<E>,
    tp: &dyn Collective<E>,
    rank: usize,
    ids: &[u32],
    targets: &[u32],
) -> RankOut {
    let logits = m.logits(tp, ids, B, S);
    let loss = m.forward_backward(tp, &Batch { ids, targets, batch: B, seq: S }, 1.0 / (B * S) as f64);
    let pieces = m
        .store()
        .pieces()
        .iter()
        .map(|p| {
            (p.clone(), m.be().read_mat(p.slot.of(m.store().values())), m.be().read_mat(p.slot.of(m.store().grads())))
        })
        .collect();
    RankOut { rank, logits, loss: loss.sum / loss.tokens as f64, embed_grad: m.embed_out_grad(), pieces }
}

/// The global matrix of canonical tensor `i` from every rank's rectangle; replicated pieces
/// must agree across ranks bit-for-bit.
fn gather(outs: &[RankOut], i: usize, values: bool) -> Vec<f64> {
    let p0 = &outs[0].pieces[i].0;
    let (r, c) = p0.matrix_shape();
    let mut full = vec![f64::NAN; r * c];
    for o in outs {
        let (p, v, g) = &o.pieces[i];
        assert_eq!(p.name, p0.name);
        let data = if values { v } else { g };
        let w = p.cols.len();
        for (k, row) in p.rows.clone().enumerate() {
            for (j, col) in p.cols.clone().enumerate() {
                let x = data[k * w + j];
                let slot = &mut full[row * c + col];
                if !slot.is_nan() {
                    assert_eq!(slot.to_bits(), x.to_bits(), "{}: replicas differ at ({row},{col})", p.name);
                }
                *slot = x;
            }
        }
    }
    assert!(full.iter().all(|x| !x.is_nan()), "{}: not every element is held by some rank", p0.name);
    full
}

fn check<E: Backend>(engine: &Engine<E>, cfg: &ModelConfig, layout: Layout, keep: Keep, r: &RankOut, bound: Bound) {
    let tol = bound.tol(cfg, B * S);
    let what = format!(
        "{} {:?} tp={} norm={:?} grouping={} recompute={keep:?}",
        cfg.arch.name(),
        layout.scheme,
        layout.tp,
        layout.norm,
        layout.grouping
    );
    let outs = run(engine, cfg, layout, keep);
    let (v, d, t, p) = (cfg.vocab, cfg.d, B * S, layout.tp);
    let vl = v.div_ceil(p);
    // Logits: vocabulary-parallel columns.
    let mut logits = vec![0.0; t * v];
    for o in &outs {
        let first = o.rank * vl;
        for i in 0..t {
            for j in first..(first + vl).min(v) {
                logits[i * v + j] = o.logits[i * vl + j - first];
            }
        }
        assert_eq!(o.loss.to_bits(), outs[0].loss.to_bits(), "{what}: ranks disagree on the loss");
    }
    tol.check_out(&format!("{what} logits"), &logits, &r.logits);
    tol.check_out(&format!("{what} loss"), &[outs[0].loss], &[r.loss]);
    // The gradient of the embedding output: hidden shards under BTP, whole elsewhere.
    let mut eg = vec![0.0; t * d];
    for o in &outs {
        if layout.scheme == Scheme::Btp {
            let w = d / p;
            for i in 0..t {
                eg[i * d + o.rank * w..i * d + (o.rank + 1) * w].copy_from_slice(&o.embed_grad[i * w..(i + 1) * w]);
            }
        } else {
            tol.check_tensor(&format!("{what} embed_out grad (rank {})", o.rank), &o.embed_grad, &r.embed_grad);
            eg.copy_from_slice(&o.embed_grad);
        }
    }
    tol.check_tensor(&format!("{what} embed_out grad"), &eg, &r.embed_grad);
    // Every canonical tensor: identical weights, matching gradients.
    assert_eq!(outs[0].pieces.len(), r.pieces.len(), "{what}: parameter count");
    for (rp, rv, rg) in &r.pieces {
        let j = outs[0]
            .pieces
            .iter()
            .position(|(p, _, _)| p.name == rp.name)
            .unwrap_or_else(|| panic!("{what}: no {}", rp.name));
        let vals = gather(&outs, j, true);
        assert!(
            vals.iter().zip(rv).all(|(a, b)| a.to_bits() == b.to_bits()),
            "{what}: {} starts from other weights",
            rp.name
        );
        let tol = bound.tensor_tol(cfg, B * S, &rp.name);
        tol.check_tensor(&format!("{what} grad {}", rp.name), &gather(&outs, j, false), rg);
    }
}
