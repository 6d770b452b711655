//! One rank's model: embedding, decoder layers, final norm, LM head and loss, with the
//! buffers of one micro-batch shape allocated once and reused every step.

use crate::block::{Block, BlockActs, BlockGrads, Kept};
use crate::group::Declare;
use crate::group::{Ctx, Scratch};
use crate::init;
use crate::layout::{Dims, Layout};
use crate::params::{BufBuilder, Init, ParamStore, Slot, Split, bind};
use crate::plan::{Entry, Plan};
use anyhow::{Result, bail};
use boost_config::{Arch, LaxGate, ModelConfig, Recompute};
use boost_tensor::{Backend, Collective, DeviceBuf, Label, Mat};

/// One micro-batch: `batch` sequences of `seq` tokens, row-major.
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    pub ids: &'a [u32],
    pub targets: &'a [u32],
    pub batch: usize,
    pub seq: usize,
}

/// Σ of per-token losses and the number of tokens that carried a target.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LossSum {
    pub sum: f64,
    pub tokens: usize,
}

pub struct Model<B: Backend> {
    pub cfg: ModelConfig,
    pub layout: Layout,
    /// The scheme's plan for this model and degree.
    pub plan: Plan,
    pub dims: Dims,
    pub be: B,
    pub store: ParamStore<B>,
    /// The embedding table: hidden-sharded (BTP, untied) or vocabulary-parallel rows. Held
    /// by the first pipeline stage (and, with tied embeddings, by the last as its head).
    pub embed: Option<Slot>,
    /// This stage's layers (their `layer` fields are global indices).
    pub blocks: Vec<Block>,
    /// Final norm and LM head (vocabulary-parallel rows; the embedding table when tied):
    /// last stage only.
    pub final_norm: Option<Slot>,
    pub head: Option<Slot>,
    /// What the forward keeps for the backward (`train.recompute`).
    pub recompute: Recompute,
    /// The policy applies to this many layers of the stage, the first ones (0: all), as
    /// Megatron's block method does (`train.recompute_layers`); the others keep everything.
    pub recompute_layers: usize,
    /// Buffers per micro-batch in flight (slot 0 outside a pipeline).
    works: Vec<Option<Work<B>>>,
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
        cfg.validate()?;
        if cfg.vocab == 0 {
            bail!("model.vocab is 0 (\"take it from the tokenizer\") and was not resolved before building the model");
        }
        let p = layout.tp;
        let plan = layout.plan(cfg).map_err(anyhow::Error::msg)?;
        if cfg.arch == Arch::Lax && cfg.lax.gate == LaxGate::Kron {
            let (a, b) = cfg.kron_factors();
            assert_eq!(a * b, cfg.rank);
        }
        let dims = Dims::new(cfg, &plan);
        let mut store = ParamStore::new();
        let (d, v) = (cfg.d, cfg.vocab);

        // Vocabulary-parallel rows [rank·V_loc, (rank+1)·V_loc) ∩ [0, V), padded to V_loc.
        let vocab_rows = |store: &mut ParamStore<B>, name: &str| {
            let mut bb = BufBuilder::new(name);
            let vl = dims.vocab_loc;
            let lo = (layout.tp_rank * vl).min(v);
            let hi = ((layout.tp_rank + 1) * vl).min(v);
            let slot = bb.at(name.to_string(), vec![v, d], lo..hi, 0..d, 0, d, Init::Normal(cfg.init_std));
            bb.reserve(vl * d);
            let id = bb.finish(store, &be, true, false);
            Slot { rows: vl, ..bind(slot, id) }
        };
        let (first, last) = (layout.first_stage(), layout.last_stage());
        let embed = (first || (last && cfg.tie_embeddings)).then(|| {
            let slot = if plan.entry == Entry::HiddenShard {
                let name = "model.embed_tokens.weight".to_string();
                let mut bb = BufBuilder::new(name.clone());
                let split = if p > 1 { Split::Cols } else { Split::Whole };
                let slot = bb.block(name, vec![v, d], split, p, layout.tp_rank, Init::Normal(cfg.init_std));
                bind(slot, bb.finish(&mut store, &be, true, false))
            } else {
                vocab_rows(&mut store, "model.embed_tokens.weight")
            };
            if !first {
                // The last stage's copy of a tied table: synced with the first stage's and
                // counted there.
                store.bufs[slot.buf].pipeline_copy = true;
            }
            slot
        });
        let mut cx = Declare { m: cfg, plan: &plan, layout: &layout, dims: &dims, store: &mut store, be: &be };
        let blocks: Vec<Block> = layout.layer_range(cfg.layers).map(|l| Block::build(l, &mut cx)).collect();
        let final_norm = last.then(|| {
            let name = "model.norm.weight".to_string();
            let mut bb = BufBuilder::new(name.clone());
            let slot = bb.block(name, vec![d], Split::Whole, 1, 0, Init::Const(1.0));
            bind(slot, bb.finish(&mut store, &be, false, p > 1))
        });
        let head = last.then(|| {
            if cfg.tie_embeddings {
                embed.expect("the last stage holds the tied table")
            } else {
                vocab_rows(&mut store, "lm_head.weight")
            }
        });
        Ok(Self {
            cfg: cfg.clone(),
            layout,
            plan,
            dims,
            be,
            store,
            embed,
            blocks,
            final_norm,
            head,
            recompute: Recompute::None,
            recompute_layers: 0,
            works: Vec::new(),
        })
    }

    pub(crate) fn ctx<'a>(&'a self, tp: &'a dyn Collective<B>, t: usize) -> Ctx<'a, B> {
        ctx(&self.be, tp, &self.cfg, self.plan, self.dims, t)
    }
}

pub(crate) fn ctx<'a, B: Backend>(
    be: &'a B,
    tp: &'a dyn Collective<B>,
    cfg: &ModelConfig,
    plan: Plan,
    dims: Dims,
    t: usize,
) -> Ctx<'a, B> {
    Ctx { be, tp, plan, dims, phi: cfg.phi(), norm_eps: cfg.norm_eps, lax_eps: cfg.lax.ln_eps, t }
}

/// The canonical pieces rank `layout.tp_rank` holds, without keeping any buffers.
pub fn layout_pieces(cfg: &ModelConfig, layout: Layout) -> Result<Vec<crate::params::Piece>> {
    // Zero-filled buffers are mapped lazily by the allocator, so declaring is cheap.
    Ok(Model::declare(boost_tensor::cpu::Cpu::<f32>::new(), cfg, layout)?.store.pieces)
}

mod passes;
mod recompute;
mod stage_io;
mod work;

pub use work::ActivationMemory;
pub(crate) use work::Work;
