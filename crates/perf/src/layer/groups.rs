//! The four projection groups of a layer (projections sharing one input) and the dense
//! (full-rank) group; the plan decides whether a group is dense or low-rank.

use super::ctx::LayerEmitter;
use super::passes::Parts;
use crate::ops::{CollKind, Phase};
use boost_plan::{GroupPlan, Shard};

#[derive(Clone, Copy)]
pub(super) struct Proj {
    pub(super) name: &'static str,
    pub(super) d_in: u64,
    pub(super) d_out: u64,
}

/// Projections sharing one input: `qkv`, `o`, `gate_up`, `down`.
pub(super) struct GroupShape {
    pub(super) block: &'static str,
    pub(super) name: &'static str,
    pub(super) projs: Vec<Proj>,
    /// The group reads a norm's output (the online statistic rides in its all-reduce).
    pub(super) after_norm: bool,
}

impl GroupShape {
    pub(super) fn n(&self) -> u64 {
        self.projs.len() as u64
    }
    pub(super) fn d_in(&self) -> u64 {
        self.projs[0].d_in
    }
    pub(super) fn d_out_sum(&self) -> u64 {
        self.projs.iter().map(|p| p.d_out).sum()
    }
    pub(super) fn label(&self) -> String {
        format!("{}.{}", self.block, self.name)
    }
    pub(super) fn proj_label(&self, p: &Proj) -> String {
        format!("{}.{}", self.block, p.name)
    }
}

impl LayerEmitter<'_> {
    /// `[qkv, o, gate_up, down]`, whole (unsharded) widths.
    pub(super) fn groups(&self) -> [GroupShape; 4] {
        let (d, d_ff, d_kv) = (self.d, self.d_ff, self.d_kv);
        [
            GroupShape {
                block: "attn",
                name: "qkv",
                projs: vec![
                    Proj { name: "q", d_in: d, d_out: d },
                    Proj { name: "k", d_in: d, d_out: d_kv },
                    Proj { name: "v", d_in: d, d_out: d_kv },
                ],
                after_norm: true,
            },
            GroupShape {
                block: "attn",
                name: "o",
                projs: vec![Proj { name: "o", d_in: d, d_out: d }],
                after_norm: false,
            },
            GroupShape {
                block: "mlp",
                name: "gate_up",
                projs: vec![Proj { name: "gate", d_in: d, d_out: d_ff }, Proj { name: "up", d_in: d, d_out: d_ff }],
                after_norm: true,
            },
            GroupShape {
                block: "mlp",
                name: "down",
                projs: vec![Proj { name: "down", d_in: d_ff, d_out: d }],
                after_norm: false,
            },
        ]
    }

    /// One group in the current pass, dense or low-rank as the plan says.
    pub(super) fn group(&mut self, g: &GroupShape, parts: Parts) {
        let gp = self.plan.group(g.after_norm);
        if gp.second.is_some() { self.low_rank_group(g, &gp, parts) } else { self.dense(g, &gp) }
    }

    /// A dense group (Megatron): column-parallel (f in front) or row-parallel (g behind).
    fn dense(&mut self, g: &GroupShape, gp: &GroupPlan) {
        let fwd = self.phase != Phase::Backward;
        let w = gp.first;
        let (in_split, out_split) = (w.shard == Shard::Input, w.shard == Shard::Output);
        if self.s.grouping || g.n() == 1 {
            let d_out = self.local(g.d_out_sum(), out_split);
            self.linear(g.label(), self.local(g.d_in(), in_split), d_out, 1, false);
        } else {
            for pr in &g.projs {
                self.linear(g.proj_label(pr), self.local(pr.d_in, in_split), self.local(pr.d_out, out_split), 1, false);
            }
            if !fwd {
                self.grad_sum(g.label(), g.n(), g.d_in());
            }
        }
        if fwd && w.sum_output {
            self.coll(format!("{}.B", g.label()), CollKind::AllReduce, g.d_out_sum(), 0);
        }
        if !fwd && w.sum_input_grad {
            self.coll(format!("{}.f", g.label()), CollKind::AllReduce, g.d_in(), 0);
        }
    }
}
