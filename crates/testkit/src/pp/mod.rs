//! Pipeline and grid parity: a model split into pipeline stages, tensor-parallel shards and
//! data-parallel replicas (AFAB or 1F1B, ZeRO-1 or not) computes the loss and every gradient
//! of the single-rank model accumulating the same micro-batches on the same backend. A tied
//! embedding ends up with the same summed gradient on both end stages; data-parallel
//! replicas end up with identical gradients (or, under ZeRO-1, the shards of them).

mod cases;
mod grid;

pub use cases::{Sweep, sweep};

use crate::compare::Bound;
use crate::engine::Engine;
use boost_config::{Config, PipeSchedule, Recompute};
use boost_model::params::Piece;
use boost_model::{Batch, Layout, Model};
use boost_tensor::{Backend, Solo};

const B: usize = 2;
const S: usize = 8;
/// Micro-batches per step over all replicas, unless a case says otherwise.
const M: usize = 4;
const SEED: u64 = 9;

/// One `#[test]` per sweep, each running [`parity`] on the engine that `$engine` (an
/// `Option<Engine<_>>`, None to skip) gives, within `$tol`.
#[macro_export]
macro_rules! pp_parity_tests {
    ($engine:expr, $tol:expr) => {
        $crate::pp_parity_tests!(@one pipelines_reproduce_the_single_stage_gradients, Pipelines, $engine, $tol);
        $crate::pp_parity_tests!(@one grids_reproduce_the_single_rank_gradients, Grids, $engine, $tol);
        $crate::pp_parity_tests!(@one fewer_micro_batches_than_stages_reproduce_the_single_stage, ShortPipelines, $engine, $tol);
    };
    (@one $name:ident, $sweep:ident, $engine:expr, $tol:expr) => {
        #[test]
        fn $name() {
            let Some(engine) = $engine else { return };
            $crate::pp::parity(&engine, $crate::pp::Sweep::$sweep, $tol);
        }
    };
}

/// A model, layout, schedule and micro-batch count to run against the single rank.
pub struct Case {
    pub sets: Vec<String>,
    pub kind: PipeSchedule,
    pub policy: Recompute,
    /// Micro-batches per step over all replicas.
    pub micro_batches: usize,
}

/// Run `sweep` on `engine`, each case against the single-rank model within `tol` (relative,
/// on the loss and on each gradient's ‖a − b‖ / ‖b‖); copies of one element held by several
/// ranks must agree bit-for-bit.
pub fn parity<E: Backend>(engine: &Engine<E>, which: Sweep, bound: impl Into<Bound>) {
    let bound = bound.into();
    let cases = sweep(which);
    assert_eq!(cases.len(), which.runs(), "{which:?}: cases");
    for case in &cases {
        check(engine, case, bound);
    }
}

/// A rank's loss and, per parameter piece, the gradient elements it holds (None: outside its
/// ZeRO-1 shard; a held element is never a stand-in, so a NaN gradient fails the checks).
type Out = (f64, Vec<(Piece, Vec<Option<f64>>)>);

fn batches(v: usize, m: usize) -> Vec<(Vec<u32>, Vec<u32>)> {
    (0..m)
        .map(|k| {
            let ids: Vec<u32> = (0..B * S + 1).map(|i| ((i * 31 + k * 17 + 3) % v) as u32).collect();
            (ids[..B * S].to_vec(), ids[1..].to_vec())
        })
        .collect()
}

fn reference<E: Backend>(engine: &Engine<E>, cfg: &Config, mbs: usize) -> (f64, Vec<(Piece, Vec<f64>)>) {
    let mut m = Model::new(engine.backend(), &cfg.model, Layout::single(&cfg.model), SEED).unwrap();
    let scale = 1.0 / (mbs * B * S) as f64;
    let mut loss = 0.0;
    for (ids, targets) in batches(cfg.model.vocab, mbs) {
        loss += m.forward_backward(&Solo, &Batch { ids: &ids, targets: &targets, batch: B, seq: S }, scale).sum;
    }
    let pieces =
        m.store().pieces().iter().map(|p| (p.clone(), m.be().read_mat(p.slot.of(m.store().grads())))).collect();
    (loss * scale, pieces)
}

/// Run `sweep` on `engine` with `parallel.overlap` on and off: every rank's loss and
/// gradients must be bit-identical (the same bytes move, only earlier).
pub fn overlap_is_bit_identical<E: Backend>(engine: &Engine<E>, which: Sweep) {
    let cases = sweep(which);
    assert_eq!(cases.len(), which.runs(), "{which:?}: cases");
    for case in &cases {
        let cfg = case_config(case);
        let what = format!("{:?} {:?} {:?} {} micro-batches", case.sets, case.kind, case.policy, case.micro_batches);
        let (on, off) = (grid::run(engine, &cfg, case, true), grid::run(engine, &cfg, case, false));
        for (rank, (a, b)) in on.iter().zip(&off).enumerate() {
            assert_eq!(a.0.to_bits(), b.0.to_bits(), "{what}: rank {rank}: loss {} with overlap, {} without", a.0, b.0);
            for ((p, ga), (_, gb)) in a.1.iter().zip(&b.1) {
                let same = ga.iter().zip(gb).all(|(x, y)| x.map(f64::to_bits) == y.map(f64::to_bits));
                assert!(same, "{what}: rank {rank}: gradient of {} differs with overlap", p.name);
            }
        }
    }
}

fn case_config(case: &Case) -> Config {
    let mut sets = small_model(4, &case.sets);
    sets.push(format!("train.recompute={}", format!("{:?}", case.policy).to_lowercase()));
    let dp: usize = case.sets.iter().find_map(|s| s.strip_prefix("parallel.dp=")).map_or(1, |v| v.parse().unwrap());
    sets.push(format!("train.accumulation={}", case.micro_batches / dp));
    Config::load(None, &sets).unwrap()
}

fn check<E: Backend>(engine: &Engine<E>, case: &Case, bound: Bound) {
    let cfg = case_config(case);
    let tokens = cfg.train.micro_batch * cfg.train.seq_len * case.micro_batches;
    let tol = bound.tol(&cfg.model, tokens);
    let what = format!("{:?} {:?} {:?} {} micro-batches", case.sets, case.kind, case.policy, case.micro_batches);
    let (rloss, rpieces) = reference(engine, &cfg, case.micro_batches);
    let outs = grid::run(engine, &cfg, case, false);
    let loss: f64 = outs.iter().map(|o| o.0).sum();
    assert!((loss - rloss).abs() <= tol.out * rloss.abs(), "{what}: loss {loss} vs {rloss}");
    for (rp, rg) in &rpieces {
        let tol = bound.tensor_tol(&cfg.model, tokens, &rp.name);
        let full = assemble(&what, rp, &outs);
        let diff = full.iter().zip(rg).map(|(a, b)| (a - b) * (a - b)).sum::<f64>().sqrt();
        let norm = rg.iter().map(|b| b * b).sum::<f64>().sqrt().max(1e-300);
        assert!(diff / norm <= tol.tensor, "{what}: grad {} differs by {:.2e}", rp.name, diff / norm);
        // Element by element too: a rounding error grows with the element and with the sums of
        // typical-size products that make it, so each may be off by tol · (|b| + rms(b)); a
        // few wrong elements of a large tensor can hide inside the norm-wise bound.
        let rms = norm / (rg.len() as f64).sqrt();
        for (i, (a, b)) in full.iter().zip(rg).enumerate() {
            assert!(
                (a - b).abs() <= tol.tensor * tol.elem_scale * (b.abs() + rms),
                "{what}: grad {} element {i}: {a} vs {b} (rms {rms:.3e})",
                rp.name
            );
        }
    }
}

/// The global gradient of `rp` from every rank's rectangles; every element must be held by
/// some rank, be finite, and copies held by several ranks must agree bit-for-bit.
fn assemble(what: &str, rp: &Piece, outs: &[Out]) -> Vec<f64> {
    let (r, c) = rp.matrix_shape();
    let mut full: Vec<Option<f64>> = vec![None; r * c];
    let mut held = 0;
    for (_, pieces) in outs {
        for (p, g) in pieces.iter().filter(|(p, _)| p.name == rp.name) {
            held += 1;
            let w = p.cols.len();
            for (k, row) in p.rows.clone().enumerate() {
                for (j, col) in p.cols.clone().enumerate() {
                    let Some(x) = g[k * w + j] else { continue }; // not in this ZeRO-1 shard
                    assert!(x.is_finite(), "{what}: {}: element ({row},{col}) is {x}", rp.name);
                    let slot = &mut full[row * c + col];
                    assert!(
                        slot.is_none_or(|s| s.to_bits() == x.to_bits()),
                        "{what}: {}: copies disagree at ({row},{col}): {slot:?} vs {x}",
                        rp.name
                    );
                    *slot = Some(x);
                }
            }
        }
    }
    assert!(held > 0, "{what}: no rank holds {}", rp.name);
    full.iter()
        .enumerate()
        .map(|(i, x)| x.unwrap_or_else(|| panic!("{what}: {} element {i} is held by no rank", rp.name)))
        .collect()
}

/// A small model of `layers` layers with `sets` on top, as `--set` strings.
fn small_model(layers: usize, sets: &[String]) -> Vec<String> {
    ["model.d=32", "model.d_ff=48", "model.heads=4", "model.rank=8", "model.vocab=61"]
        .iter()
        .map(|s| s.to_string())
        .chain([format!("model.layers={layers}")])
        .chain(sets.iter().cloned())
        .collect()
}
