//! The layouts each sweep checks: the `--set` keys, schedule and recompute policy of a case.

use super::{Case, M};
use boost_config::{PipeSchedule, Recompute};

/// The parity sweeps, each a test of its own in the backends' suites.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sweep {
    /// Pipelines of 2 and 4 stages, with tensor parallelism, tied embeddings, LaX crossings
    /// and recompute (of every layer and of each stage's first layer).
    Pipelines,
    /// Fewer micro-batches than stages (a larger bubble): 1 through 2 stages, 2 through 4.
    ShortPipelines,
    /// The (tp, pp, dp) grids for CoLA under BTP and full-rank under Megatron, both
    /// schedules, with and without ZeRO-1.
    Grids,
}

impl Sweep {
    /// How many cases the sweep checks: none may drop out unnoticed.
    pub const fn runs(self) -> usize {
        match self {
            Sweep::Pipelines => 17,
            Sweep::ShortPipelines => 6,
            Sweep::Grids => 32,
        }
    }
}

fn case(sets: &[&str], kind: PipeSchedule, policy: Recompute) -> Case {
    Case { sets: sets.iter().map(|s| s.to_string()).collect(), kind, policy, micro_batches: M }
}

pub fn sweep(which: Sweep) -> Vec<Case> {
    match which {
        Sweep::Pipelines => pipelines(),
        Sweep::ShortPipelines => short_pipelines(),
        Sweep::Grids => grids(),
    }
}

fn pipelines() -> Vec<Case> {
    use PipeSchedule::{Afab, OneFOneB};
    use Recompute::{Full, Lowrank, None};
    let mut cases = Vec::new();
    for kind in [OneFOneB, Afab] {
        cases.push(case(&["model.arch=cola", "parallel.pp=2"], kind, None));
        cases.push(case(&["model.arch=cola", "parallel.pp=4"], kind, None));
        cases.push(case(&["model.arch=full", "parallel.pp=2", "parallel.tp=2"], kind, None));
        cases.push(case(&["model.arch=cola", "parallel.pp=2", "parallel.tp=2"], kind, None));
    }
    cases.extend([
        case(&["model.arch=cola", "parallel.pp=2", "parallel.tp=2", "parallel.scheme=vanilla"], OneFOneB, None),
        case(&["model.arch=cola", "parallel.pp=2", "model.tie_embeddings=true"], OneFOneB, None),
        case(&["model.arch=cola", "parallel.pp=2", "parallel.tp=2", "model.tie_embeddings=true"], Afab, None),
        case(&["model.arch=lax", "parallel.pp=2"], OneFOneB, None),
        case(&["model.arch=lax", "parallel.pp=4", "parallel.tp=2"], OneFOneB, Lowrank),
        case(&["model.arch=cola", "parallel.pp=2", "parallel.tp=2"], OneFOneB, Lowrank),
        case(&["model.arch=lax", "parallel.pp=2", "model.lax.gate=kron"], Afab, Full),
        // Only the first layer of each stage recomputes (a LaX crossing from the previous
        // stage into a recomputed layer, and from a recomputed layer into one that is not).
        case(&["model.arch=lax", "parallel.pp=2", "train.recompute_layers=1"], OneFOneB, Lowrank),
        case(&["model.arch=cola", "parallel.pp=2", "parallel.tp=2", "train.recompute_layers=1"], Afab, Full),
    ]);
    cases
}

fn short_pipelines() -> Vec<Case> {
    let mut cases = Vec::new();
    for kind in [PipeSchedule::OneFOneB, PipeSchedule::Afab] {
        cases.push(Case { micro_batches: 1, ..case(&["model.arch=cola", "parallel.pp=2"], kind, Recompute::None) });
        cases.push(Case { micro_batches: 2, ..case(&["model.arch=cola", "parallel.pp=4"], kind, Recompute::None) });
    }
    let tp2 = ["model.arch=full", "parallel.pp=2", "parallel.tp=2"];
    cases.push(Case { micro_batches: 1, ..case(&tp2, PipeSchedule::OneFOneB, Recompute::None) });
    let lax = ["model.arch=lax", "parallel.pp=4"];
    cases.push(Case { micro_batches: 3, ..case(&lax, PipeSchedule::OneFOneB, Recompute::Lowrank) });
    cases
}

fn grids() -> Vec<Case> {
    let mut cases = Vec::new();
    for (tp, pp, dp) in [(1, 2, 1), (2, 2, 1), (1, 1, 2), (2, 1, 2), (2, 2, 2)] {
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
                    cases.push(Case { sets: sets.to_vec(), kind, policy: Recompute::None, micro_batches: M });
                }
            }
        }
    }
    cases
}
