//! The analytic cost model of BOOST (docs/PARALLELISM.md §2, §5, §6) and its planner, `boost plan`.
//!
//! - [`Setup`]: a model × layout × micro-batch × dtype, built from the training config.
//! - [`layer_ops`]: every op of one decoder layer on one TP rank — GEMMs with per-rank shapes,
//!   FLOPs and arithmetic intensity, attention, elementwise kernels by bytes moved, and
//!   collectives with kind, group, element count and the label of the op that issues them.
//! - [`stage_ops`], [`step_ops`], [`step_collectives`]: the whole step on one rank.
//! - [`memory`]: weights, gradients, optimizer state and activations per rank.
//! - [`Hardware`] (TOML presets) and [`predict()`]: iteration time with its breakdown.
//!
//! Pure: it reads a config and its plan and computes; nothing here runs a kernel or reads a
//! run (only [`fit`] asks the system how much memory is free). This machine's calibration is boost-calibrate, the paper's table, `--validate` and the
//! charts are boost-report, and the `boost plan` command over all of it is in boost-cli.
//!
//! User guide: `docs/guide/planning.md`; the formulas: `docs/COST_MODEL.md`.

#![forbid(unsafe_code)]

pub mod attention_model;
pub mod chunks;
pub mod fit;
pub mod gemm_model;
pub mod hardware;
pub mod layer;
pub mod ops;
pub mod overlap;
pub mod paper;
pub mod predict;
pub mod search;
pub mod setup;
pub mod spec;
pub mod step;

pub use hardware::{Hardware, Timer};
pub use layer::{LayerOps, Saved, layer_ops, layer_saved};
pub use ops::{Attention, CollGroup, CollKind, Collective, CostOp, Elementwise, Gemm, GemmRole, Phase};
pub use predict::{Breakdown, LayerComm, Prediction, bubble_fraction, layer_comm, predict};
pub use setup::{AttnConvention, Dtype, Keeps, NormMode, Setup};
pub use step::{
    Memory, StageOps, layer_params, matmul_params, memory, model_flops_per_token, stage_ops, step_ops, total_params,
};

use std::collections::BTreeMap;

/// A collective of one step on one rank, with where it happens.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StepCollective {
    /// Pipeline stage of the rank.
    pub stage: usize,
    /// Micro-batch index (None for once-per-step collectives).
    pub micro_batch: Option<usize>,
    /// Decoder layer index (None outside the decoder stack).
    pub layer: Option<usize>,
    pub collective: Collective,
}

/// Every collective one rank of `stage` issues in one optimizer step, in program order within
/// a micro-batch (forward of each layer, then recompute and backward in reverse layer order,
/// then the step's once-only collectives). This is what a recording communicator should see.
pub fn step_collectives(s: &Setup, stage: usize) -> Vec<StepCollective> {
    let ops = stage_ops(s, stage);
    let mut out = Vec::new();
    for mb in 0..s.accumulation {
        let mut push = |layer: Option<usize>, op: &CostOp, phases: &[Phase]| {
            if let Some(c) = op.as_collective()
                && phases.contains(&c.phase)
            {
                out.push(StepCollective { stage, micro_batch: Some(mb), layer, collective: c.clone() });
            }
        };
        let fwd = [Phase::Forward];
        let bwd = [Phase::Backward, Phase::Recompute];
        for op in ops.p2p.iter().chain(&ops.entry) {
            push(None, op, &fwd);
        }
        for l in &ops.layers {
            for op in &l.forward {
                push(Some(l.layer), op, &fwd);
            }
        }
        for op in &ops.exit {
            push(None, op, &fwd);
        }
        for op in &ops.exit {
            push(None, op, &bwd);
        }
        for l in ops.layers.iter().rev() {
            for op in l.recompute.iter().chain(&l.backward) {
                push(Some(l.layer), op, &bwd);
            }
        }
        for op in ops.entry.iter().chain(&ops.p2p) {
            push(None, op, &bwd);
        }
    }
    for op in step_ops(s, stage) {
        if let Some(c) = op.as_collective() {
            out.push(StepCollective { stage, micro_batch: None, layer: None, collective: c.clone() });
        }
    }
    out
}

/// Totals per (label, phase, kind): number of calls and elements. Comparing this map between
/// the model and a recording is order-insensitive.
pub fn collective_totals<'a>(
    cs: impl IntoIterator<Item = &'a Collective>,
) -> BTreeMap<(String, Phase, CollKind), (usize, u64)> {
    let mut m = BTreeMap::new();
    for c in cs {
        let e = m.entry((c.label.clone(), c.phase, c.kind)).or_insert((0, 0));
        e.0 += 1;
        e.1 += c.elements;
    }
    m
}

/// The median of a non-empty list (the mean of the middle two for an even length): what the
/// calibration keeps of its timed runs, `--validate` of a run's steps, and the GPU benchmark.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { 0.5 * (v[n / 2 - 1] + v[n / 2]) }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_median_is_the_middle_figure_whatever_the_order() {
        assert_eq!(super::median(vec![5.0, 1.0, 3.0]), 3.0);
        assert_eq!(super::median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        // One slow pass (a busy moment) moves a best-of but not the median much.
        assert_eq!(super::median(vec![1.0, 1.1, 9.0, 1.05, 0.95]), 1.05);
    }
}
