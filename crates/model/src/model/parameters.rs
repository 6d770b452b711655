//! A stage's parameters: which slices of the canonical tensors this rank holds, as the plan
//! splits them. Checkpoints read the same declaration for any rank without allocating.

use crate::block::Block;
use crate::layout::{Dims, Layout};
use crate::model::{FirstStage, LastStage};
use crate::params::{BufBuilder, BufOpts, Held, Init, ParamStore, Slot, Split};
use crate::plan::{Entry, Plan};
use crate::projection::Declare;
use anyhow::{Result, bail};
use boost_config::{Arch, LaxGate, ModelConfig};
use boost_tensor::Backend;

/// The parameters one rank of one pipeline stage holds, and where each tensor lives.
pub struct StageParams<B: Backend> {
    pub store: ParamStore<B>,
    pub first: Option<FirstStage>,
    pub blocks: Vec<Block>,
    pub last: Option<LastStage>,
    /// The buffers of each local block (consecutive, in layer order), for reducing a
    /// layer's gradients as soon as its backward is done.
    pub layer_bufs: Vec<std::ops::Range<usize>>,
}

/// The plan and local sizes of a validated model at this layout.
pub(super) fn resolve(cfg: &ModelConfig, layout: &Layout) -> Result<(Plan, Dims)> {
    cfg.validate()?;
    if cfg.vocab == 0 {
        bail!("model.vocab is 0 (\"take it from the tokenizer\") and was not resolved before building the model");
    }
    let plan = layout.plan(cfg).map_err(anyhow::Error::msg)?;
    if cfg.arch == Arch::Lax && cfg.lax.gate == LaxGate::Kron {
        let (a, b) = cfg.kron_factors();
        assert_eq!(a * b, cfg.rank);
    }
    Ok((plan, Dims::new(cfg, &plan)))
}

impl<B: Backend> StageParams<B> {
    /// Declare every tensor of this rank's stage in `store`.
    pub fn declare(
        be: &B,
        cfg: &ModelConfig,
        layout: &Layout,
        plan: &Plan,
        dims: &Dims,
        mut store: ParamStore<B>,
    ) -> Self {
        let p = layout.tp;
        let (d, v) = (cfg.d, cfg.vocab);
        // Vocabulary-parallel rows [rank·V_loc, (rank+1)·V_loc) ∩ [0, V), padded to V_loc.
        let vocab_rows = |store: &mut ParamStore<B>, name: &str| {
            let mut bb = BufBuilder::open(store, name, BufOpts::MATRIX);
            let vl = dims.vocab_loc;
            let lo = (layout.tp_rank * vl).min(v);
            let hi = ((layout.tp_rank + 1) * vl).min(v);
            let held = Held {
                name: name.to_string(),
                shape: vec![v, d],
                rows: lo..hi,
                cols: 0..d,
                init: Init::Normal(cfg.init_std),
            };
            let slot = bb.at(held, 0, d);
            bb.reserve(vl * d);
            bb.finish(store, be);
            Slot { rows: vl, ..slot }
        };
        let (first, last) = (layout.first_stage(), layout.last_stage());
        let embed = (first || (last && cfg.tie_embeddings)).then(|| {
            let slot = if plan.entry == Entry::HiddenShard {
                let name = "model.embed_tokens.weight".to_string();
                let mut bb = BufBuilder::open(&mut store, name.clone(), BufOpts::MATRIX);
                let split = if p > 1 { Split::Cols } else { Split::Whole };
                let slot = bb.block(name, vec![v, d], split, p, layout.tp_rank, Init::Normal(cfg.init_std));
                bb.finish(&mut store, be);
                slot
            } else {
                vocab_rows(&mut store, "model.embed_tokens.weight")
            };
            if !first {
                // The last stage's copy of a tied table: synced with the first stage's and
                // counted there.
                store.mark_pipeline_copy(slot.buf);
            }
            slot
        });
        let mut cx = Declare { m: cfg, plan, layout, dims, store: &mut store, be };
        let mut layer_bufs = Vec::new();
        let blocks: Vec<Block> = layout
            .layer_range(cfg.layers)
            .map(|l| {
                let lo = cx.store.buf_count();
                let b = Block::build(l, &mut cx);
                layer_bufs.push(lo..cx.store.buf_count());
                b
            })
            .collect();
        let last_stage = last.then(|| {
            let name = "model.norm.weight".to_string();
            let mut bb = BufBuilder::open(&mut store, name.clone(), BufOpts::VECTOR.replicated_if(p > 1));
            let final_norm = bb.block(name, vec![d], Split::Whole, 1, 0, Init::Const(1.0));
            bb.finish(&mut store, be);
            let head = match embed {
                Some(table) if cfg.tie_embeddings => table,
                _ => vocab_rows(&mut store, "lm_head.weight"),
            };
            LastStage { final_norm, head }
        });
        Self {
            store,
            first: embed.filter(|_| first).map(|embed| FirstStage { embed }),
            blocks,
            last: last_stage,
            layer_bufs,
        }
    }
}

/// The canonical pieces rank `layout.tp_rank` of stage `layout.stage` holds, from the plan
/// alone: the declaration runs on a store that allocates nothing.
pub fn layout_pieces(cfg: &ModelConfig, layout: Layout) -> Result<Vec<crate::params::Piece>> {
    let (plan, dims) = resolve(cfg, &layout)?;
    let be = boost_tensor::cpu::Cpu::<f32>::new();
    Ok(StageParams::declare(&be, cfg, &layout, &plan, &dims, ParamStore::shapes_only()).store.into_pieces())
}
