//! Each rank of a sharded step on one backend against the same rank on a reference backend,
//! for the cross-device tests (the tolerance is the caller's: it depends on both devices).

use crate::compare::Bound;
use crate::engine::{Engine, small_model};
use boost_comm::{GridDims, run_ranks};
use boost_config::{Arch, LaxGate, ModelConfig, NormMode, ParallelConfig, Scheme};
use boost_model::{Batch, Layout, Model};
use boost_tensor::{Backend, Collective};

/// Two tp ranks, each stepping `engine` and `reference` side by side over the same layout:
/// every scheme × norm placement for CoLA, and the full-rank and LaX models. Each rank's loss
/// and gradients within `tol` of the reference's; returns the number of layouts checked.
pub fn ranks_match<R: Backend, E: Backend>(
    reference: &Engine<R>,
    engine: &Engine<E>,
    bound: impl Into<Bound>,
) -> usize {
    let bound = bound.into();
    let mut cases = Vec::new();
    for scheme in [Scheme::Btp, Scheme::Vanilla] {
        for norm in [NormMode::Online, NormMode::Sync] {
            cases.push((Arch::Cola, scheme, norm));
        }
    }
    cases.push((Arch::Full, Scheme::Megatron, NormMode::Online));
    cases.push((Arch::Lax, Scheme::Btp, NormMode::Sync));
    for &(arch, scheme, norm) in &cases {
        let cfg = small_model(arch, LaxGate::Kron, 32, 8, 50);
        let par = ParallelConfig { tp: 2, scheme: scheme.into(), norm, ..ParallelConfig::default() };
        let what = format!("{arch:?} {scheme:?} {norm:?}");
        let tol = bound.tol(&cfg, 16);
        run_ranks(GridDims::new(1, 1, 2), |rank, grid| {
            let layout = Layout::from_config(&cfg, &par, rank);
            let be = reference.backend();
            let tp = reference.collective(&be, &grid.tp);
            let (lr, gr, _) = one_step(be, &cfg, layout, &*tp);
            let be = engine.backend();
            let tp = engine.collective(&be, &grid.tp);
            let (le, ge, names) = one_step(be, &cfg, layout, &*tp);
            tol.check_out(&format!("{what} rank {rank} loss"), &[le], &[lr]);
            for (name, (g, c)) in names.iter().zip(ge.iter().zip(&gr)) {
                bound.tensor_tol(&cfg, 16, name).check_tensor(&format!("{what} rank {rank} gradient {name}"), g, c);
            }
            Ok(())
        })
        .unwrap();
    }
    cases.len()
}

/// One forward/backward from seed 11: the mean loss and every parameter gradient.
fn one_step<E: Backend>(
    be: E,
    cfg: &ModelConfig,
    layout: Layout,
    tp: &dyn Collective<E>,
) -> (f64, Vec<Vec<f64>>, Vec<String>) {
    let mut m = Model::new(be, cfg, layout, 11).unwrap();
    let (batch, seq) = (2, 8);
    let ids: Vec<u32> = (0..batch * seq).map(|i| (i * 7 % cfg.vocab) as u32).collect();
    let targets: Vec<u32> = (0..batch * seq).map(|i| ((i * 7 + 3) % cfg.vocab) as u32).collect();
    let l = m.forward_backward(tp, &Batch { ids: &ids, targets: &targets, batch, seq }, 1.0 / 16.0);
    let grads = m.store().pieces().iter().map(|p| m.be().read_mat(p.slot.of(m.store().grads()))).collect();
    let names = m.store().pieces().iter().map(|p| p.name.clone()).collect();
    (l.sum / l.tokens as f64, grads, names)
}
