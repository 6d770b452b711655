//! Sharding plans: what a tensor-parallel scheme decides, as data. Each scheme is declared
//! once, in its own file ([`megatron`], [`vanilla`], [`btp`]): where the residual stream and a
//! block's interior live, how each factor of a projection is split, and which forward
//! products are summed. Everything else follows by the placement rules below and is checked
//! when the plan is built (docs/ARCHITECTURE.md, "Sharding plans"):
//!
//! - `Replicated · W` with W split on its output → `Sharded`; the input's gradient arrives
//!   `Partial` and is summed in backward (the operator `f`);
//! - `Sharded · W` with W split on its input → `Partial`, which the plan must sum forward
//!   (the operator `g`) before anything reads it;
//! - `Replicated · W` with W whole → `Replicated`; `Sharded · W` whole is a mismatch.
//!
//! The engine (`boost-model`'s groups and stack entry and exit), the cost model (`boost-perf`)
//! and checkpoints all read the resolved [`Plan`].
//!
//! User guide: `docs/guide/parallel.md`; the layouts: `docs/PARALLELISM.md`.

#![forbid(unsafe_code)]

pub mod btp;
mod check;
mod kinds;
pub mod megatron;
pub mod vanilla;

pub use kinds::{Arch, NormMode, Scheme, default_scheme};

/// How a tensor is held across the ranks of a tensor-parallel group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Whole on every rank.
    Replicated,
    /// Each rank holds 1/p of its feature axis.
    Sharded,
    /// Each rank holds a summand of the whole.
    Partial,
}

/// Which axis of a linear map `y = x·W` (W: `d_in × d_out`) a rank holds 1/p of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shard {
    Whole,
    /// Rows of W: the row-parallel layout (a Partial output).
    Input,
    /// Columns of W: the column-parallel layout (a Sharded output).
    Output,
}

/// One linear factor as a scheme declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Linear {
    pub shard: Shard,
    /// The forward all-reduce `g` of its Partial output.
    pub sum_output: bool,
}

impl Linear {
    pub const WHOLE: Linear = Linear { shard: Shard::Whole, sum_output: false };
    pub const COLUMN: Linear = Linear { shard: Shard::Output, sum_output: false };
    pub const ROW_SUMMED: Linear = Linear { shard: Shard::Input, sum_output: true };
}

/// The projections of a block, by what they read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Factors {
    /// Full-rank: one weight per projection; `into_block` for q/k/v and gate/up (reading
    /// the normalised residual), `out_of_block` for o and down (writing the residual).
    Dense { into_block: Linear, out_of_block: Linear },
    /// Low-rank `y = φ(x·A)·B`, the same split for every group.
    LowRank { a: Linear, b: Linear },
}

/// A scheme's declaration: a page of data in its own file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemeDecl {
    pub scheme: Scheme,
    /// The residual stream between blocks (and at the stack's entry and exit).
    pub residual: Placement,
    /// Attention heads and SwiGLU features inside a block.
    pub interior: Placement,
    pub factors: Factors,
}

/// Where the residual's RMSNorm gets its statistic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormPlacement {
    /// The residual is whole on every rank: an ordinary RMSNorm.
    Replicated,
    /// Hidden-sharded residual: all-reduce the statistic (and its gradient) separately.
    ShardedSync,
    /// Hidden-sharded residual: the statistic rides in the next A's all-reduce.
    ShardedOnline,
}

/// One factor of a group as the engine runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FactorPlan {
    pub shard: Shard,
    /// Forward: all-reduce the output (`g`).
    pub sum_output: bool,
    /// Backward: all-reduce the input's gradient (`f`).
    pub sum_input_grad: bool,
}

/// A projection group's plan: its input and output placements and its factors in order
/// (the dense weight, or A then B).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupPlan {
    pub input: Placement,
    pub first: FactorPlan,
    pub second: Option<FactorPlan>,
    pub output: Placement,
}

impl GroupPlan {
    /// The last factor (the one that writes the group's output).
    pub fn last(&self) -> FactorPlan {
        self.second.unwrap_or(self.first)
    }
    /// The low-rank latent between A and B (after A's sum), if the group has one.
    pub fn latent(&self) -> Option<Placement> {
        self.second.map(|_| check::after(self.input, self.first.shard, self.first.sum_output))
    }
}

/// How token ids become the first residual.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// A hidden-sharded table: each rank looks up its own d/p columns, no communication
    /// (a hidden-sharded residual with untied embeddings; any untied model on one rank).
    HiddenShard,
    /// A vocabulary-parallel table; the partial lookups are all-reduced.
    VocabAllReduce,
    /// A vocabulary-parallel table; the partial lookups are reduce-scattered to hidden
    /// shards (a hidden-sharded residual with tied embeddings), and the backward all-gathers.
    VocabReduceScatter,
}

/// How the stack's output becomes the whole final residual.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Whole,
    /// All-gather the hidden shards.
    Gather,
}

/// A scheme resolved for one model and degree: what every part of the engine reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub decl: SchemeDecl,
    pub tp: usize,
    /// Groups reading the residual (q/k/v, gate/up) and writing it (o, down).
    pub into_block: GroupPlan,
    pub out_of_block: GroupPlan,
    pub norm: NormPlacement,
    pub entry: Entry,
    pub exit: Exit,
}

/// The declaration of `scheme`.
pub fn declaration(scheme: Scheme) -> SchemeDecl {
    match scheme {
        Scheme::Megatron => megatron::DECL,
        Scheme::Vanilla => vanilla::DECL,
        Scheme::Btp => btp::DECL,
    }
}

impl Plan {
    /// Resolve `scheme` for this architecture and degree; refuses a plan that leaves a
    /// Partial unsummed, mismatches placements, or cannot run the architecture.
    pub fn new(scheme: Scheme, arch: Arch, norm: NormMode, tied: bool, tp: usize) -> Result<Self, String> {
        check::resolve(declaration(scheme), arch, norm, tied, tp)
    }
    pub fn scheme(&self) -> Scheme {
        self.decl.scheme
    }
    /// The hidden-sharded residual (BTP).
    pub fn sharded_residual(&self) -> bool {
        self.decl.residual == Placement::Sharded
    }
    /// Heads and SwiGLU features split over ranks.
    pub fn sharded_interior(&self) -> bool {
        self.decl.interior == Placement::Sharded
    }
    /// The low-rank latent split over ranks (r/p per rank).
    pub fn sharded_latent(&self) -> bool {
        self.into_block.latent() == Some(Placement::Sharded)
    }
    /// The model axes this plan splits over the tensor-parallel ranks, each of which tp must
    /// divide: heads and SwiGLU features with a sharded interior, the hidden size with a
    /// sharded residual, the bottleneck with a sharded latent. None on one rank.
    pub fn split_axes(&self) -> Vec<Axis> {
        if self.tp == 1 {
            return Vec::new();
        }
        let mut axes = Vec::new();
        if self.sharded_interior() {
            axes.extend([Axis::Heads, Axis::KvHeads, Axis::FeedForward]);
        }
        if self.sharded_residual() {
            axes.push(Axis::Hidden);
        }
        if self.sharded_latent() {
            axes.push(Axis::Rank);
        }
        axes
    }
    /// The plan of a group that reads the residual (`true`) or writes it.
    pub fn group(&self, reads_residual: bool) -> GroupPlan {
        if reads_residual { self.into_block } else { self.out_of_block }
    }
}

/// A model axis a plan may split over the tensor-parallel ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Axis {
    Heads,
    KvHeads,
    /// SwiGLU features (`d_ff`).
    FeedForward,
    /// The residual's hidden size (`d`).
    Hidden,
    /// The bottleneck width (`rank`).
    Rank,
}

/// `n / p` when the axis is split.
pub fn local(n: usize, split: bool, p: usize) -> usize {
    if split { n / p } else { n }
}
