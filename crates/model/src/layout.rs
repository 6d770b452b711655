//! How one rank holds the model: the tensor-parallel scheme, its degree and rank, and the
//! local sizes that follow from the scheme's plan ([`crate::plan`]). The model math reads
//! only these sizes and the plan; it has no other knowledge of the layout.

use crate::plan::{Plan, local};
use boost_config::{Arch, ModelConfig, NormMode, ParallelConfig, Scheme};

/// One rank's view of the layout: its tensor-parallel scheme, degree and rank, and the
/// pipeline stage it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub scheme: Scheme,
    pub tp: usize,
    /// Rank within the tensor-parallel group.
    pub tp_rank: usize,
    pub norm: NormMode,
    pub grouping: bool,
    /// Pipeline stage of this rank, of `stages`.
    pub stage: usize,
    pub stages: usize,
}

impl Layout {
    /// The unsharded model.
    pub fn single(model: &ModelConfig) -> Self {
        let scheme = boost_plan::default_scheme(model.arch);
        Self { scheme, tp: 1, tp_rank: 0, norm: NormMode::Online, grouping: true, stage: 0, stages: 1 }
    }

    /// Tensor parallelism only (the whole stack on every rank).
    pub fn from_config(model: &ModelConfig, par: &ParallelConfig, rank: usize) -> Self {
        Self::staged(model, par, rank, 0, 1)
    }

    /// Tensor-parallel rank `rank` of pipeline stage `stage` of `stages`.
    pub fn staged(model: &ModelConfig, par: &ParallelConfig, tp_rank: usize, stage: usize, stages: usize) -> Self {
        Self {
            scheme: par.resolved_scheme(model),
            tp: par.tp,
            tp_rank,
            norm: par.norm,
            grouping: par.grouping,
            stage,
            stages,
        }
    }

    pub fn first_stage(&self) -> bool {
        self.stage == 0
    }
    pub fn last_stage(&self) -> bool {
        self.stage + 1 == self.stages
    }
    /// The global indices of the layers this stage runs (an even split, validated in config).
    pub fn layer_range(&self, layers: usize) -> std::ops::Range<usize> {
        let per = layers / self.stages;
        self.stage * per..(self.stage + 1) * per
    }

    /// The scheme's plan for this model at this degree (an error names what cannot run).
    pub fn plan(&self, model: &ModelConfig) -> Result<Plan, String> {
        Plan::new(self.scheme, model.arch, self.norm, model.tie_embeddings, self.tp)
    }
}

/// Local sizes of every tensor on this rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dims {
    pub arch: Arch,
    pub d: usize,
    pub d_ff: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// The bottleneck width r (`model.rank`).
    pub r: usize,
    pub vocab: usize,
    /// Vocabulary padded to a multiple of tp.
    pub vocab_padded: usize,
    /// Width of the residual stream held here (d/p under BTP, d otherwise).
    pub d_res: usize,
    pub heads_loc: usize,
    pub kv_loc: usize,
    pub d_ff_loc: usize,
    /// Latent width held here (r/p under vanilla, r otherwise).
    pub r_loc: usize,
    /// Vocabulary rows of the LM head held here.
    pub vocab_loc: usize,
}

impl Dims {
    pub fn new(m: &ModelConfig, plan: &Plan) -> Self {
        let p = plan.tp;
        let interior = plan.sharded_interior();
        let vocab_padded = m.vocab.div_ceil(p) * p;
        Self {
            arch: m.arch,
            d: m.d,
            d_ff: m.d_ff,
            heads: m.heads,
            kv_heads: m.kv_heads(),
            head_dim: m.head_dim(),
            r: m.rank,
            vocab: m.vocab,
            vocab_padded,
            d_res: local(m.d, plan.sharded_residual(), p),
            heads_loc: local(m.heads, interior, p),
            kv_loc: local(m.kv_heads(), interior, p),
            d_ff_loc: local(m.d_ff, interior, p),
            r_loc: local(m.rank, plan.sharded_latent(), p),
            vocab_loc: vocab_padded / p,
        }
    }
    pub fn q_loc(&self) -> usize {
        self.heads_loc * self.head_dim
    }
    pub fn kv_w_loc(&self) -> usize {
        self.kv_loc * self.head_dim
    }
    pub fn d_kv(&self) -> usize {
        self.kv_heads * self.head_dim
    }
}
