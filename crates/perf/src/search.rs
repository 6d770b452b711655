//! Layout search: enumerate (tp, pp, dp, micro-batch, scheme, norm, grouping, recompute, ZeRO)
//! for a fixed model, device count and global batch; keep what fits in memory; rank by time.

use crate::hardware::Hardware;
use crate::predict::{Prediction, predict};
use crate::setup::{NormMode, Setup};
use boost_config::{Recompute, Scheme, divisors};
use serde::Serialize;

#[derive(Debug, Clone)]
pub struct SearchOptions {
    /// Devices to use (tp·pp·dp).
    pub devices: usize,
    /// Sequences per optimizer step.
    pub global_batch: usize,
    /// Also consider the per-shard `local` norm (a different model).
    pub allow_local: bool,
    /// Largest micro-batch tried.
    pub max_micro_batch: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Candidate {
    #[serde(skip)]
    pub setup: Setup,
    pub layout: String,
    pub prediction: Prediction,
}

/// Every valid layout of `base`'s model under the options, those that fit first, fastest first.
/// Layouts that do not fit are kept at the end (sorted by memory) so that a search with no
/// feasible layout still says how far off it is.
pub fn search(base: &Setup, hw: &Hardware, o: &SearchOptions) -> Vec<Candidate> {
    let low_rank = base.model.arch.is_low_rank();
    // Every scheme whose plan runs this architecture under tensor parallelism, the
    // architecture's default first; at tp = 1 they all compute the same, so only the default.
    let default = boost_plan::default_scheme(base.model.arch);
    let (arch, tied) = (base.model.arch, base.model.tie_embeddings);
    let runs = |s: Scheme| boost_plan::Plan::new(s, arch, boost_config::NormMode::Online, tied, 2).is_ok();
    let schemes: Vec<Scheme> =
        std::iter::once(default).chain(Scheme::ALL.into_iter().filter(|&s| s != default && runs(s))).collect();
    let recomputes: &[Recompute] = if low_rank {
        &[Recompute::None, Recompute::Lowrank, Recompute::Full]
    } else {
        &[Recompute::None, Recompute::Full]
    };
    let mut out = Vec::new();
    for tp in divisors(o.devices) {
        if tp > hw.devices_per_node && !hw.ranks_share_device {
            continue;
        }
        for pp in divisors(o.devices / tp) {
            if !base.model.layers.is_multiple_of(pp) {
                continue;
            }
            let dp = o.devices / (tp * pp);
            if !o.global_batch.is_multiple_of(dp) {
                continue;
            }
            let per_dp = o.global_batch / dp;
            for mb in divisors(per_dp).into_iter().filter(|&m| m <= o.max_micro_batch) {
                for &scheme in &schemes {
                    if scheme != default && tp == 1 {
                        continue;
                    }
                    // A hidden-sharded residual has a norm choice (online, sync, local).
                    let sharded = boost_plan::declaration(scheme).residual == boost_plan::Placement::Sharded;
                    let norms: Vec<NormMode> = if sharded && tp > 1 {
                        NormMode::ALL.into_iter().filter(|n| o.allow_local || *n != NormMode::Local).collect()
                    } else {
                        vec![NormMode::Online]
                    };
                    let groupings: &[bool] = if tp > 1 { &[true, false] } else { &[true] };
                    for &norm in &norms {
                        for &grouping in groupings {
                            for &recompute in recomputes {
                                for zero in if dp > 1 { vec![0, 1] } else { vec![0] } {
                                    let s = Setup {
                                        scheme,
                                        norm,
                                        grouping,
                                        recompute,
                                        tp,
                                        pp,
                                        dp,
                                        zero,
                                        micro_batch: mb,
                                        accumulation: per_dp / mb,
                                        ..base.clone()
                                    };
                                    if s.validate().is_err() {
                                        continue;
                                    }
                                    let prediction = predict(&s, hw);
                                    out.push(Candidate { layout: short(&s), setup: s, prediction });
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    out.sort_by(|a, b| {
        let (pa, pb) = (&a.prediction, &b.prediction);
        pb.fits.cmp(&pa.fits).then(if pa.fits {
            pa.iteration_time_s.total_cmp(&pb.iteration_time_s)
        } else {
            pa.memory.total.total_cmp(&pb.memory.total)
        })
    });
    out
}

/// A compact layout name, e.g. `btp/online/g tp4 pp2 dp1 mb4×acc4 rc=none z0`.
pub fn short(s: &Setup) -> String {
    let scheme = crate::setup::scheme_name(s.scheme);
    let sharded = s.checked_plan().sharded_residual();
    let norm = if sharded && s.tp > 1 { format!("/{}", s.norm.name()) } else { String::new() };
    let g = match (s.tp > 1, s.grouping) {
        (false, _) => "",
        (true, true) => "/g",
        (true, false) => "/ung",
    };
    format!(
        "{scheme}{norm}{g} tp{} pp{} dp{} mb{}×acc{} rc={} z{}",
        s.tp,
        s.pp,
        s.dp,
        s.micro_batch,
        s.accumulation,
        crate::setup::recompute_name(s.recompute),
        s.zero
    )
}
