//! One rank's model: embedding, decoder layers, final norm, LM head and loss, with the
//! buffers of one micro-batch shape allocated once and reused every step.

use crate::block::Block;
use crate::init;
use crate::layout::{Dims, Layout};
use crate::params::{ParamStore, Slot};
use crate::pass::Ctx;
use crate::plan::Plan;
use anyhow::Result;
use boost_config::{ModelConfig, Recompute};
use boost_tensor::{Backend, Collective};

/// One micro-batch: `batch` sequences of `seq` tokens, row-major.
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    pub ids: &'a [u32],
    pub targets: &'a [u32],
    pub batch: usize,
    pub seq: usize,
}

impl<'a> Batch<'a> {
    /// Chunk `c` of `chunks` equal chunks of whole sequences (`parallel.tp_chunks`); empty
    /// targets stay empty.
    pub fn chunk(&self, c: usize, chunks: usize) -> Batch<'a> {
        let batch = self.batch / chunks;
        let n = batch * self.seq;
        let part = |s: &'a [u32]| if s.is_empty() { s } else { &s[c * n..(c + 1) * n] };
        Batch { ids: part(self.ids), targets: part(self.targets), batch, seq: self.seq }
    }
}

/// Called during a backward as gradients become final: `ready(be, k, grads)` says that the
/// gradient buffers `k..` will not change again in this backward (the head's first, then each
/// layer's, from the last layer down, then the embedding's). The caller may start reducing them.
pub type GradsReady<'a, B> = dyn FnMut(&B, usize, &[<B as Backend>::Buf]) + 'a;

/// [`GradsReady`] as [`Model::backward`] calls it: the final buffers may also be taken (a tp
/// chunk hands its own to the summing of the chunks).
pub type GradsFinal<'a, B> = dyn FnMut(&B, usize, &mut [<B as Backend>::Buf]) + 'a;

/// Called during a forward before parameters are read: `need(be, k, values)` says that the
/// parameter buffers `..k` are read next (the embedding's, then each layer's in order, then
/// the head's; `k` only grows). The caller may still be filling `values` (ZeRO-1's parameter
/// all-gathers of the last update) and must complete buffers `..k` before it returns.
pub type ParamsNeeded<'a, B> = dyn FnMut(&B, usize, &mut [<B as Backend>::Buf]) + 'a;

/// Σ of per-token losses and the number of tokens that carried a target.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LossSum {
    pub sum: f64,
    pub tokens: usize,
}

/// What the first pipeline stage holds beyond its layers.
#[derive(Debug, Clone, Copy)]
pub struct FirstStage {
    /// The embedding table: hidden-sharded columns or vocabulary-parallel rows, as the plan's
    /// entry says.
    pub embed: Slot,
}

/// What the last pipeline stage holds beyond its layers.
#[derive(Debug, Clone, Copy)]
pub struct LastStage {
    pub final_norm: Slot,
    /// Vocabulary-parallel rows; the embedding table when tied (on a later stage, a copy
    /// whose gradient is synced with the first stage's).
    pub head: Slot,
}

/// One rank's model. Its fields belong to this crate: other crates read them through the
/// accessors and reach the parameters through the store's methods.
pub struct Model<B: Backend> {
    pub(crate) cfg: ModelConfig,
    pub(crate) layout: Layout,
    /// The scheme's plan for this model and degree.
    pub(crate) plan: Plan,
    pub(crate) dims: Dims,
    pub(crate) be: B,
    pub(crate) store: ParamStore<B>,
    /// The first pipeline stage's embedding.
    pub(crate) first: Option<FirstStage>,
    /// This stage's layers (their `layer` fields are global indices).
    pub(crate) blocks: Vec<Block>,
    /// The last pipeline stage's final norm and LM head.
    pub(crate) last: Option<LastStage>,
    /// The parameter buffers of each of `blocks`.
    pub(crate) layer_bufs: Vec<std::ops::Range<usize>>,
    /// What the forward keeps for the backward (`train.recompute`).
    pub(crate) recompute: Recompute,
    /// The policy applies to this many layers of the stage, the first ones (0: all), as
    /// Megatron's block method does (`train.recompute_layers`); the others keep everything.
    pub(crate) recompute_layers: usize,
    /// Buffers per micro-batch in flight (slot 0 outside a pipeline; one per chunk with
    /// `parallel.tp_chunks`).
    works: Vec<Option<Work<B>>>,
    /// Training losses are summed on the device ([`Model::set_loss_on_device`]).
    pub(crate) loss_on_device: bool,
}

impl<B: Backend> Model<B> {
    /// Declare and initialise this rank's parameters (layout-invariant, from `seed`).
    pub fn new(be: B, cfg: &ModelConfig, layout: Layout, seed: u64) -> Result<Self> {
        let mut m = Self::declare(be, cfg, layout)?;
        init::initialize(&mut m.store, &m.be, seed);
        Ok(m)
    }

    /// Declare the parameters without filling them (they read zero).
    pub fn declare(be: B, cfg: &ModelConfig, layout: Layout) -> Result<Self> {
        let (plan, dims) = resolve(cfg, &layout)?;
        let StageParams { store, first, blocks, last, layer_bufs } =
            StageParams::declare(&be, cfg, &layout, &plan, &dims, ParamStore::new());
        Ok(Self {
            cfg: cfg.clone(),
            layout,
            plan,
            dims,
            be,
            store,
            first,
            blocks,
            last,
            layer_bufs,
            recompute: Recompute::None,
            recompute_layers: 0,
            works: Vec::new(),
            loss_on_device: false,
        })
    }

    pub fn cfg(&self) -> &ModelConfig {
        &self.cfg
    }
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
    pub fn dims(&self) -> &Dims {
        &self.dims
    }
    /// The backend this model's buffers live on.
    pub fn be(&self) -> &B {
        &self.be
    }
    pub fn store(&self) -> &ParamStore<B> {
        &self.store
    }
    pub fn store_mut(&mut self) -> &mut ParamStore<B> {
        &mut self.store
    }
    /// The backend and the parameters, the latter mutable (writing values, an optimizer step).
    pub fn be_and_store_mut(&mut self) -> (&B, &mut ParamStore<B>) {
        (&self.be, &mut self.store)
    }
    /// With `on`, the losses of [`Model::forward_backward`] are added up on the device
    /// ([`Backend::tally_loss`], read from the step's report) where the backend can: the
    /// [`LossSum`] it returns then holds NaN, not the sum, and the host does not wait.
    pub fn set_loss_on_device(&mut self, on: bool) {
        self.loss_on_device = on;
    }
    /// Zero every gradient buffer.
    pub fn zero_grads(&mut self) {
        self.store.zero_grads(&self.be);
    }

    /// The tied embedding table, on the stage that holds it (first or last).
    pub fn tied_table(&self) -> Option<Slot> {
        if !self.cfg.tie_embeddings {
            return None;
        }
        self.first.map(|f| f.embed).or(self.last.map(|l| l.head))
    }
}

/// What one pass over the layers reads besides the layout: this rank's parameter values and
/// the micro-batch's shape and RoPE table.
pub(crate) struct PassInputs<'a, B: Backend> {
    pub params: &'a [B::Buf],
    pub rope: &'a B::Buf,
    pub batch: usize,
    pub seq: usize,
}

pub(crate) fn ctx<'a, B: Backend>(
    be: &'a B,
    tp: &'a dyn Collective<B>,
    cfg: &ModelConfig,
    plan: Plan,
    dims: Dims,
    inputs: PassInputs<'a, B>,
) -> Ctx<'a, B> {
    let PassInputs { params, rope, batch, seq } = inputs;
    let (phi, norm_eps, lax_eps) = (cfg.phi(), cfg.norm_eps, cfg.lax.ln_eps);
    Ctx { be, tp, plan, dims, phi, norm_eps, lax_eps, t: batch * seq, batch, seq, params, rope, attend: None }
}

mod parameters;
mod passes;
mod recompute;
mod stage_io;
mod work;

use parameters::resolve;
pub use parameters::{StageParams, layout_pieces};
pub use passes::Params;
pub use stage_io::Wire;
pub use work::ActivationMemory;
pub use work::Work;
