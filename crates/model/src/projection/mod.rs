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

use crate::layout::{Dims, Layout};
use crate::params::{ParamStore, Slot};
use crate::plan::{GroupPlan, NormPlacement, Plan};
use boost_config::ModelConfig;
use boost_tensor::Backend;

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
    /// The norm statistic (t values: the sum of squares, then rstd), kept apart from the
    /// latent so that each buffer holds one kind of value (the latent may be stored narrower).
    pub stat: B::Buf,
    /// The latent (t × c·r); empty for a full-rank group.
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
    /// diag(γ)·A, the online norm's γ folded into A (`d_in × c·r`): a GEMM operand, in the
    /// activation dtype.
    pub wa: B::Buf,
    /// xᵀ·dP of such a group in the backward (`d_in × c·r`): a weight gradient, in fp32.
    pub dwa: B::Buf,
    pub dh: B::Buf,
    pub dlat: B::Buf,
    pub dlat2: B::Buf,
    /// `[stat (t) | latent]` ([`Packed::stat_then_latent`]): where a group whose online norm
    /// statistic rides with A's all-reduce sums both in one collective
    /// ([`ProjGroup::stages_sum`]); empty otherwise.
    pub sum: B::Buf,
    pub row: B::Buf,
    pub kron: B::Buf,
}

/// The values every step of one call of a group's forward or backward reads.
struct Call<'c, B: Backend> {
    cx: &'c Ctx<'c, B>,
    be: &'c B,
    /// Tokens in the micro-batch.
    t: usize,
    /// The group's local input width.
    din: usize,
    /// The online norm feeds the group: its statistic rides with A's all-reduce.
    online: bool,
    /// γ is folded into A ([`ProjGroup::folds_gamma`]).
    fold: bool,
    has_norm: bool,
}

impl ProjGroup {
    fn call<'c, B: Backend>(&self, cx: &'c Ctx<'c, B>) -> Call<'c, B> {
        let has_norm = self.norm.is_some();
        Call {
            cx,
            be: cx.be,
            t: cx.t,
            din: self.d_in_loc,
            online: has_norm && cx.plan.norm == NormPlacement::ShardedOnline,
            fold: self.folds_gamma(cx.plan.norm),
            has_norm,
        }
    }
}

mod backward;
mod buffers;
mod build;
mod forward;
pub mod kind;

pub use crate::pass::Ctx;
pub use backward::{GradFlow, ProjSaved};
pub use buffers::{LatGeom, Packed};
pub use forward::{Latent, Pre};
pub use kind::ProjKind;
