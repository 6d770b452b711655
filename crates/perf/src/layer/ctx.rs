//! The state of one layer's op list under construction: its dimensions, the pass being
//! emitted, and the local widths the engine's sharding plan gives this rank.

use crate::ops::{CostOp, Phase};
use crate::setup::Setup;
use boost_config::{Arch, Phi};
use boost_plan::{Plan, local};

pub(super) struct LayerEmitter<'a> {
    pub(super) s: &'a Setup,
    /// The engine's sharding plan: widths and collectives come from it.
    pub(super) plan: Plan,
    pub(super) layer: usize,
    pub(super) t: u64,
    pub(super) p: u64,
    pub(super) d: u64,
    pub(super) d_ff: u64,
    pub(super) d_kv: u64,
    pub(super) r: u64,
    pub(super) h: u64,
    pub(super) h_kv: u64,
    pub(super) d_h: u64,
    pub(super) a: u64,
    pub(super) ops: Vec<CostOp>,
    pub(super) phase: Phase,
    /// Recompute from saved post-crossing LaX latents: no gate GEMM, no add.
    pub(super) from_saved_latents: bool,
}

impl<'a> LayerEmitter<'a> {
    pub(super) fn new(s: &'a Setup, layer: usize) -> Self {
        let m = &s.model;
        LayerEmitter {
            s,
            plan: s.checked_plan(),
            layer,
            t: s.tokens(),
            p: s.tp as u64,
            d: m.d as u64,
            d_ff: m.d_ff as u64,
            d_kv: m.d_kv() as u64,
            r: m.rank as u64,
            h: m.heads as u64,
            h_kv: m.kv_heads() as u64,
            d_h: m.head_dim() as u64,
            a: s.dtype.bytes(),
            ops: Vec::new(),
            phase: Phase::Forward,
            from_saved_latents: false,
        }
    }

    pub(super) fn lax(&self) -> bool {
        self.s.model.arch == Arch::Lax
    }
    pub(super) fn crossing(&self) -> bool {
        self.lax() && self.layer > 0
    }
    pub(super) fn silu(&self) -> bool {
        self.s.model.phi() == Phi::Silu
    }
    /// `n`, or `n/p` when the plan splits it.
    pub(super) fn local(&self, n: u64, split: bool) -> u64 {
        local(n as usize, split, self.p as usize) as u64
    }
    /// Width of the residual stream on this rank.
    pub(super) fn w_res(&self) -> u64 {
        self.local(self.d, self.plan.sharded_residual())
    }
    /// Attention heads (and kv heads) on this rank.
    pub(super) fn heads_local(&self) -> (u64, u64) {
        let split = self.plan.sharded_interior();
        (self.local(self.h, split), self.local(self.h_kv, split))
    }
    /// Width of the SwiGLU product on this rank.
    pub(super) fn w_ff(&self) -> u64 {
        self.local(self.d_ff, self.plan.sharded_interior())
    }
    /// Width of the low-rank latent on this rank.
    pub(super) fn w_lat(&self) -> u64 {
        self.local(self.r, self.plan.sharded_latent())
    }
    pub(super) fn tp_comm(&self) -> bool {
        self.p > 1
    }
    /// The latent has an elementwise kernel (φ = SiLU, or a LaX crossing).
    pub(super) fn latent_kernel(&self) -> bool {
        self.silu() || self.crossing()
    }
    /// The residual is sharded, so norms need the global statistic (BTP with tp > 1).
    pub(super) fn sharded_norm(&self) -> bool {
        self.plan.sharded_residual() && self.p > 1
    }
}
