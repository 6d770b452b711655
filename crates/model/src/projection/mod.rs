//! A projection group: the linears that share one input (q, k, v; o; gate, up; down), with
//! the RMSNorm that feeds them. This is where the architectures (full-rank, SVD, CoLA, LaX)
//! and the tensor-parallel schemes meet: the math is written once below, and the scheme's
//! [`GroupPlan`] only decides the local widths and which collective runs at the few marked
//! points.
//!
//! Buffers, per micro-batch of `t` tokens:
//! - the output is component-major: component j is a `t × outs[j]` block after the others;
//! - the latent `lat` starts with a `t`-element statistic slot (the norm's rstd), then the
//!   latent P (after the down-projection and its all-reduce, before φ): grouped, it is one
//!   `t × c·r` matrix (one GEMM, one collective); ungrouped, c blocks of `t × r`.

use crate::labels;
use crate::layout::{Dims, Layout};
use crate::params::{BufBuilder, Held, Init, ParamStore, Slot, Split, bind, shard};
use crate::plan::{GroupPlan, NormPlacement, Plan, Shard};
use boost_config::{Arch, LaxGate, ModelConfig, Phi};
use boost_tensor::{Backend, Collective, Label, Mat, MatMut, ReduceOp};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProjKind {
    Qkv = 0,
    O = 1,
    GateUp = 2,
    Down = 3,
}

impl ProjKind {
    pub const ALL: [ProjKind; 4] = [ProjKind::Qkv, ProjKind::O, ProjKind::GateUp, ProjKind::Down];
    pub fn comps(self) -> &'static [&'static str] {
        match self {
            ProjKind::Qkv => &["q_proj", "k_proj", "v_proj"],
            ProjKind::O => &["o_proj"],
            ProjKind::GateUp => &["gate_proj", "up_proj"],
            ProjKind::Down => &["down_proj"],
        }
    }
    pub fn module(self) -> &'static str {
        match self {
            ProjKind::Qkv | ProjKind::O => "self_attn",
            _ => "mlp",
        }
    }
    /// The group reads the residual stream (through a norm) rather than writing it.
    pub fn reads_residual(self) -> bool {
        matches!(self, ProjKind::Qkv | ProjKind::GateUp)
    }
    /// The RMSNorm in front of the group, if any.
    pub fn norm_name(self) -> Option<&'static str> {
        match self {
            ProjKind::Qkv => Some("input_layernorm"),
            ProjKind::GateUp => Some("post_attention_layernorm"),
            _ => None,
        }
    }
}

/// Everything a group needs to know about this rank and micro-batch.
pub struct Ctx<'a, B: Backend> {
    pub be: &'a B,
    pub tp: &'a dyn Collective<B>,
    pub plan: Plan,
    pub dims: Dims,
    pub phi: Phi,
    pub norm_eps: f64,
    pub lax_eps: f64,
    /// Tokens in the micro-batch (`batch` sequences of `seq`).
    pub t: usize,
    pub batch: usize,
    pub seq: usize,
    /// This rank's parameter values.
    pub params: &'a [B::Buf],
    /// RoPE's cos/sin table for `seq` positions.
    pub rope: &'a B::Buf,
    /// Decoding: the key/value cache that replaces the causal attention step.
    pub attend: Option<&'a dyn crate::decode::CachedAttention<B>>,
}

/// The two operators that carry all tensor-parallel communication (docs/PARALLELISM.md §2), and the norm
/// statistic's sum. Each is one all-reduce over the tp group, named by what it does to a
/// tensor's placement.
impl<B: Backend> Ctx<'_, B> {
    /// `g` (forward): a Partial result — per-rank summands of a row-parallel product —
    /// becomes Replicated. Its backward is the identity.
    fn g(&self, buf: &mut B::Buf, off: usize, n: usize, op: &'static str, layer: usize) {
        self.sum(buf, off, n, op, layer)
    }
    /// The backward of `f` (identity forward, in front of a column-parallel product): the
    /// gradient of its Replicated input arrives Partial and is summed.
    fn f_backward(&self, buf: &mut B::Buf, off: usize, n: usize, op: &'static str, layer: usize) {
        self.sum(buf, off, n, op, layer)
    }
    /// The sync RMSNorm's statistic (forward) or its gradient (backward), summed over the
    /// hidden shards.
    fn stat_sum(&self, buf: &mut B::Buf, off: usize, n: usize, op: &'static str, layer: usize) {
        self.sum(buf, off, n, op, layer)
    }
    fn sum(&self, buf: &mut B::Buf, off: usize, n: usize, op: &'static str, layer: usize) {
        if self.plan.tp > 1 {
            self.tp.all_reduce(buf, off, n, ReduceOp::Sum, Label::layer(op, layer));
        }
    }
}

/// What declaring a rank's parameters reads, and the store it fills.
pub struct Declare<'a, B: Backend> {
    pub m: &'a ModelConfig,
    pub plan: &'a Plan,
    pub layout: &'a Layout,
    pub dims: &'a Dims,
    pub store: &'a mut ParamStore<B>,
    pub be: &'a B,
}

#[derive(Debug, Clone)]
pub enum Gate {
    Dense { w: Slot, b: Slot },
    Kron { ka: Slot, kb: Slot },
}

#[derive(Debug, Clone)]
pub struct LaxSlots {
    pub gate: Gate,
    pub ln_w: Slot,
    pub ln_b: Slot,
}

impl LaxSlots {
    /// Point the slots at their buffers: [gate first, gate second, LN weight, LN bias].
    pub(super) fn bind(self, ids: [usize; 4]) -> Self {
        Self {
            gate: match self.gate {
                Gate::Dense { w, b } => Gate::Dense { w: bind(w, ids[0]), b: bind(b, ids[1]) },
                Gate::Kron { ka, kb } => Gate::Kron { ka: bind(ka, ids[0]), kb: bind(kb, ids[1]) },
            },
            ln_w: bind(self.ln_w, ids[2]),
            ln_b: bind(self.ln_b, ids[3]),
        }
    }
}

#[derive(Debug, Clone)]
pub enum Weights {
    /// Dense `y = x·Wᵀ`, W stored `[d_out, d_in]` per component.
    Full { w: Vec<Slot> },
    /// `A` holds every component side by side (`d_in × c·r`); `B` one block per component.
    LowRank { a: Slot, b: Vec<Slot>, lax: Option<Vec<LaxSlots>> },
}

#[derive(Debug, Clone)]
pub struct ProjGroup {
    pub kind: ProjKind,
    pub layer: usize,
    pub c: usize,
    /// Global input width (the norm's feature count).
    pub d_in: usize,
    pub d_in_loc: usize,
    /// Local output width of each component.
    pub outs: Vec<usize>,
    pub r_loc: usize,
    pub grouped: bool,
    pub norm: Option<Slot>,
    pub w: Weights,
    /// The scheme's placements and collectives for this group.
    pub plan: GroupPlan,
}

/// What a group's forward keeps for its backward.
pub struct ProjActs<B: Backend> {
    /// `[stat (t) | latent]`; for a full-rank group just the statistic.
    pub lat: B::Buf,
    /// φ(latent), when φ is not the identity.
    pub z: Option<B::Buf>,
    pub lax: Option<LaxActs<B>>,
}

/// LaX crossing values: a = P + G(z_prev) (pre-LN), the LN statistics, u = LN(a).
pub struct LaxActs<B: Backend> {
    pub a: B::Buf,
    pub mean: B::Buf,
    pub rstd: B::Buf,
    pub u: B::Buf,
}

/// Scratch space shared by all groups of all layers.
pub struct Scratch<B: Backend> {
    /// The GEMM input when a norm feeds a group (RMSNorm's output, or x ⊙ γ for a dense group).
    pub h: B::Buf,
    /// diag(γ)·A in the forward, xᵀ·dP in the backward: the online norm's γ folded into A
    /// (`d_in × c·r`).
    pub wa: B::Buf,
    pub dh: B::Buf,
    pub dlat: B::Buf,
    pub dlat2: B::Buf,
    pub row: B::Buf,
    pub kron: B::Buf,
}

mod backward;
mod buffers;
mod build;
mod forward;

pub use backward::{GradFlow, ProjSaved};
pub use buffers::LatGeom;
pub use forward::Latent;
