//! One decoder layer on one tensor-parallel rank: every GEMM, attention, elementwise kernel and
//! collective of its forward, backward and recompute passes, and what its forward keeps.
//!
//! Labels: every op is named `<block>.<module>[.<part>]` (the layer index is kept beside it),
//! with block `attn` or `mlp`; module `norm`, `qkv` / `q` / `k` / `v`, `rope`, `core`
//! (attention), `o`, `residual`, `gate_up` / `gate` / `up`, `act` (the SwiGLU product), `down`;
//! for low-rank layers the part `A`, `B`, `phi` (the bottleneck activation) or `cross` (LaX
//! crossing, LN_r and φ). Where collectives go comes from the scheme's plan (`boost-plan`); a
//! collective carries the name the engine's recorder reports (`boost-model`'s `labels`);
//! backward ones end in `.bwd`, recompute repeats the forward name:
//! - megatron: forward `attn.o.B`, `mlp.down.B` (g after the row-parallel GEMM); backward
//!   `attn.qkv.f.bwd`, `mlp.gate_up.f.bwd` (f in front of the column-parallel GEMMs, one per
//!   shared input, grouped or not);
//! - vanilla: forward `<block>.<proj>.B` for each of the seven B's (g); backward
//!   `attn.qkv.f.bwd`, `attn.o.f.bwd`, `mlp.gate_up.f.bwd`, `mlp.down.f.bwd` (f, one per shared
//!   input); LaX is refused (the plan shards the latent, which LaX needs whole);
//! - btp: forward `<block>.<group>.A` (grouped) or `<block>.<proj>.A` (g after each
//!   row-parallel A; with the online norm the first A after a norm carries the fp32 statistic);
//!   backward `<block>.<group>.B.bwd` / `<block>.<proj>.B.bwd` (f in front of the
//!   column-parallel B's); the sync norm adds `attn.norm.stat`, `mlp.norm.stat` and their `.bwd`.

mod blocks;
mod ctx;
mod emit;
mod groups;
mod low_rank;
mod passes;
mod saved;

pub use saved::{RESIDUAL_BYTES, Saved, layer_saved, layer_transient, layer_working};

use crate::ops::{Collective, CostOp, Phase};
use crate::setup::Setup;
use boost_config::Recompute;
use ctx::LayerEmitter;
use serde::Serialize;

/// The ops of one layer, per micro-batch, on one TP rank.
#[derive(Debug, Clone, Serialize)]
pub struct LayerOps {
    pub layer: usize,
    pub forward: Vec<CostOp>,
    pub backward: Vec<CostOp>,
    /// Forward work redone in backward (empty without recompute).
    pub recompute: Vec<CostOp>,
}

impl LayerOps {
    pub fn all(&self) -> impl Iterator<Item = &CostOp> {
        self.forward.iter().chain(&self.recompute).chain(&self.backward)
    }
    pub fn collectives(&self) -> impl Iterator<Item = &Collective> {
        self.all().filter_map(CostOp::as_collective)
    }
}

/// Every op of decoder layer `layer` (0-based; LaX layer 0 has no crossing) for one
/// micro-batch on one TP rank.
pub fn layer_ops(s: &Setup, layer: usize) -> LayerOps {
    let mut c = LayerEmitter::new(s, layer);
    c.forward(Phase::Forward);
    let forward = std::mem::take(&mut c.ops);
    c.backward();
    let backward = std::mem::take(&mut c.ops);
    match s.policy_of(layer) {
        Recompute::None => {}
        Recompute::Full => c.forward(Phase::Recompute),
        Recompute::Lowrank => c.recompute_lowrank(),
    }
    let recompute = std::mem::take(&mut c.ops);
    LayerOps { layer, forward, backward, recompute }
}
