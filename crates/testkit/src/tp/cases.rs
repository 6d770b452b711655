//! The parity sweeps' cases: each model with the sharded layouts and recompute plans run
//! against its unsharded run.

use super::{Keep, Sweep};
use boost_config::{Config, ModelConfig, NormMode, Recompute, Scheme};
use boost_model::Layout;

/// A model and the sharded runs compared with its unsharded run.
pub(super) struct Case {
    pub cfg: ModelConfig,
    pub runs: Vec<(Layout, Keep)>,
}

fn model(extra: &[&str]) -> ModelConfig {
    let sets: Vec<String> =
        ["model.d=32", "model.d_ff=48", "model.heads=4", "model.rank=8", "model.vocab=61", "model.layers=2"]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect();
    Config::load(None, &sets).unwrap().model
}

fn layout(scheme: Scheme, tp: usize, norm: NormMode, grouping: bool) -> Layout {
    Layout { scheme, tp, tp_rank: 0, norm, grouping, stage: 0, stages: 1 }
}

const NONE: Keep = (Recompute::None, 0);

/// Every norm placement of each scheme (sync statistics exist under BTP only), both
/// groupings, tp ∈ {1, 2, 4}.
fn grid(cfg: ModelConfig, schemes: &[Scheme]) -> Case {
    let mut runs = Vec::new();
    for &scheme in schemes {
        let norms: &[NormMode] =
            if scheme == Scheme::Btp { &[NormMode::Online, NormMode::Sync] } else { &[NormMode::Online] };
        for &norm in norms {
            for grouping in [true, false] {
                for tp in [1, 2, 4] {
                    runs.push((layout(scheme, tp, norm, grouping), NONE));
                }
            }
        }
    }
    Case { cfg, runs }
}

pub(super) fn cases(sweep: Sweep) -> Vec<Case> {
    use Scheme::{Btp, Megatron, Vanilla};
    const LAX_KRON_SVD: &[&str] = &["model.arch=lax", "model.layers=3", "model.lax.gate=kron", "model.lax.flavour=svd"];
    match sweep {
        Sweep::FullRank => vec![
            grid(model(&["model.arch=full"]), &[Megatron]),
            grid(model(&["model.arch=full", "model.tie_embeddings=true"]), &[Megatron]),
        ],
        Sweep::Svd => vec![grid(model(&["model.arch=svd"]), &[Vanilla, Btp])],
        Sweep::Cola => vec![
            grid(model(&["model.arch=cola"]), &[Vanilla, Btp]),
            grid(model(&["model.arch=cola", "model.only_lr_act=true"]), &[Btp]),
        ],
        Sweep::ColaTiedGqa => {
            // kv_heads = 2 shards over tp ≤ 2 only under BTP, whose interior is sharded; tp = 4
            // is refused by validation (see config tests). Vanilla runs attention whole on
            // every rank, so its tp = 4 splits only the rank.
            let mut runs = Vec::new();
            for scheme in [Vanilla, Btp] {
                for tp in [1, 2] {
                    runs.push((layout(scheme, tp, NormMode::Online, true), NONE));
                }
            }
            runs.push((layout(Vanilla, 4, NormMode::Online, true), NONE));
            vec![
                grid(model(&["model.arch=cola", "model.tie_embeddings=true"]), &[Vanilla, Btp]),
                Case { cfg: model(&["model.arch=cola", "model.kv_heads=2"]), runs },
            ]
        }
        Sweep::Lax => {
            vec![grid(model(&["model.arch=lax", "model.layers=3"]), &[Btp]), grid(model(LAX_KRON_SVD), &[Btp])]
        }
        Sweep::Recompute => {
            let archs: &[(&[&str], &[Scheme])] = &[
                (&["model.arch=full"], &[Megatron]),
                (&["model.arch=svd"], &[Vanilla, Btp]),
                (&["model.arch=cola"], &[Vanilla, Btp]),
                (&["model.arch=lax", "model.layers=3"], &[Btp]),
                (LAX_KRON_SVD, &[Btp]),
                (&["model.arch=cola", "model.tie_embeddings=true"], &[Btp]),
            ];
            let mut out = Vec::new();
            for (sets, schemes) in archs {
                let cfg = model(sets);
                let mut runs = Vec::new();
                for &scheme in *schemes {
                    for norm in [NormMode::Online, NormMode::Sync] {
                        if norm == NormMode::Sync && scheme != Btp {
                            continue;
                        }
                        for tp in [1, 2, 4] {
                            for policy in [Recompute::Full, Recompute::Lowrank] {
                                if policy == Recompute::Lowrank && !cfg.arch.is_low_rank() {
                                    continue;
                                }
                                runs.push((layout(scheme, tp, norm, tp != 2), (policy, 0)));
                            }
                        }
                    }
                }
                out.push(Case { cfg, runs });
            }
            out
        }
        Sweep::RecomputeFirstLayers => {
            let archs: &[(&[&str], &[Scheme])] = &[
                (&["model.arch=full", "model.layers=3"], &[Megatron]),
                (&["model.arch=cola", "model.layers=3"], &[Vanilla, Btp]),
                (&["model.arch=lax", "model.layers=4"], &[Btp]),
            ];
            let mut out = Vec::new();
            for (sets, schemes) in archs {
                let cfg = model(sets);
                let mut runs = Vec::new();
                for &scheme in *schemes {
                    for tp in [1, 2] {
                        for policy in [Recompute::Full, Recompute::Lowrank] {
                            if policy == Recompute::Lowrank && !cfg.arch.is_low_rank() {
                                continue;
                            }
                            for first in 1..cfg.layers {
                                runs.push((layout(scheme, tp, NormMode::Online, true), (policy, first)));
                            }
                        }
                    }
                }
                out.push(Case { cfg, runs });
            }
            out
        }
    }
}
