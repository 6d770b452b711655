//! One rank's model: embedding, decoder layers, final norm, LM head and loss, with the
//! buffers of one micro-batch shape allocated once and reused every step.

use crate::block::{Block, BlockActs, BlockGrads, Kept};
use crate::group::{Ctx, Scratch};
use crate::init;
use crate::io::{Entry, Exit};
use crate::layout::{Dims, Layout};
use crate::params::{BufBuilder, Init, ParamStore, Slot, Split, bind};
use anyhow::{Result, bail};
use boost_config::{Arch, LaxGate, ModelConfig, Recompute, Scheme};
use boost_tensor::{Backend, Collective, Mat};

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
    pub dims: Dims,
    pub be: B,
    pub store: ParamStore<B>,
    /// The embedding table: hidden-sharded (BTP, untied) or vocabulary-parallel rows.
    pub embed: Slot,
    pub blocks: Vec<Block>,
    pub final_norm: Slot,
    /// The LM head, vocabulary-parallel rows (the embedding table itself when tied).
    pub head: Slot,
    pub(crate) entry: Entry,
    pub(crate) exit: Exit,
    /// What the forward keeps for the backward (`train.recompute`).
    pub recompute: Recompute,
    work: Option<Work<B>>,
}

/// Activation memory of one micro-batch shape under the model's recompute policy.
#[derive(Debug, Clone, PartialEq)]
pub struct ActivationMemory {
    pub policy: Recompute,
    pub tokens: usize,
    pub elem_bytes: usize,
    /// Elements each layer keeps from its forward until its backward (its input residual
    /// included).
    pub per_layer: Vec<usize>,
    /// Elements of the buffers a recompute runs in (two layers' worth, reused by every layer).
    pub recompute_scratch: usize,
}

impl ActivationMemory {
    pub fn layers_bytes(&self) -> usize {
        self.per_layer.iter().sum::<usize>() * self.elem_bytes
    }
    pub fn total_bytes(&self) -> usize {
        self.layers_bytes() + self.recompute_scratch * self.elem_bytes
    }
}

/// Buffers for one (batch, seq) shape.
pub(crate) struct Work<B: Backend> {
    pub batch: usize,
    pub seq: usize,
    pub ids: B::Ids,
    pub targets: B::Ids,
    pub rope: B::Buf,
    /// resid[l] is layer l's input; resid[L] the stack's output (t × d_res each).
    pub resid: Vec<B::Buf>,
    /// Per layer (no recompute), or two reused in turn (recompute).
    pub blocks: Vec<BlockActs<B>>,
    /// What each layer keeps when its activations are recomputed.
    pub kept: Vec<Kept<B>>,
    /// The whole final residual (t × d), gathered from the shards under BTP.
    pub xf: B::Buf,
    /// Rank-major scratch (t × d) for gathers and scatters of hidden shards.
    pub rm: B::Buf,
    pub frstd: B::Buf,
    pub hf: B::Buf,
    pub logits: B::Buf,
    pub losses: B::Buf,
    pub lmax: B::Buf,
    pub lstats: B::Buf,
    pub sc: Scratch<B>,
    pub bg: BlockGrads<B>,
    pub dx: B::Buf,
    pub dhf: B::Buf,
    pub dot: B::Buf,
}

impl<B: Backend> Work<B> {
    pub fn t(&self) -> usize {
        self.batch * self.seq
    }
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
        if p > 1 && cfg.arch == Arch::Lax && layout.scheme == Scheme::Vanilla {
            bail!(
                "LaX under vanilla TP needs the whole latent on every rank (the gate and LN act over all of r); \
                 use parallel.scheme = \"btp\" for LaX"
            );
        }
        if cfg.arch == Arch::Lax && cfg.lax.gate == LaxGate::Kron {
            let (a, b) = cfg.kron_factors();
            assert_eq!(a * b, cfg.rank);
        }
        let dims = Dims::new(cfg, &layout);
        let entry = Entry::of(cfg, &layout);
        let exit = Exit::of(&layout);
        let mut store = ParamStore::new();
        let (d, v) = (cfg.d, cfg.vocab);

        // Vocabulary-parallel rows [rank·V_loc, (rank+1)·V_loc) ∩ [0, V), padded to V_loc.
        let vocab_rows = |store: &mut ParamStore<B>, name: &str| {
            let mut bb = BufBuilder::new(name);
            let vl = dims.vocab_loc;
            let lo = (layout.rank * vl).min(v);
            let hi = ((layout.rank + 1) * vl).min(v);
            let slot = bb.at(name.to_string(), vec![v, d], lo..hi, 0..d, 0, d, Init::Normal(cfg.init_std));
            bb.reserve(vl * d);
            let id = bb.finish(store, &be, true, false);
            Slot { rows: vl, ..bind(slot, id) }
        };
        let embed = if entry == Entry::HiddenShard {
            let name = "model.embed_tokens.weight".to_string();
            let mut bb = BufBuilder::new(name.clone());
            let split = if p > 1 { Split::Cols } else { Split::Whole };
            let slot = bb.block(name, vec![v, d], split, p, layout.rank, Init::Normal(cfg.init_std));
            bind(slot, bb.finish(&mut store, &be, true, false))
        } else {
            vocab_rows(&mut store, "model.embed_tokens.weight")
        };
        let blocks: Vec<Block> =
            (0..cfg.layers).map(|l| Block::build(l, cfg, &layout, &dims, &mut store, &be)).collect();
        let final_norm = {
            let name = "model.norm.weight".to_string();
            let mut bb = BufBuilder::new(name.clone());
            let slot = bb.block(name, vec![d], Split::Whole, 1, 0, Init::Const(1.0));
            bind(slot, bb.finish(&mut store, &be, false, p > 1))
        };
        let head = if cfg.tie_embeddings { embed } else { vocab_rows(&mut store, "lm_head.weight") };
        Ok(Self {
            cfg: cfg.clone(),
            layout,
            dims,
            be,
            store,
            embed,
            blocks,
            final_norm,
            head,
            entry,
            exit,
            recompute: Recompute::None,
            work: None,
        })
    }

    /// Choose what the forward keeps (drops the buffers of the previous choice). `lowrank`
    /// needs low-rank layers (config validation refuses it for full-rank models).
    pub fn set_recompute(&mut self, policy: Recompute) {
        assert!(policy != Recompute::Lowrank || self.cfg.arch.is_low_rank(), "lowrank recompute of a full-rank model");
        if policy != self.recompute {
            self.recompute = policy;
            self.work = None;
        }
    }

    /// The activation memory of a (batch, seq) micro-batch under the current policy, from
    /// the buffers the engine allocates for it.
    pub fn activation_memory(&mut self, batch: usize, seq: usize) -> ActivationMemory {
        let w = match self.work.take() {
            Some(w) if w.batch == batch && w.seq == seq => w,
            _ => self.alloc_work(batch, seq),
        };
        use boost_tensor::DeviceBuf;
        let n = self.blocks.len();
        let per_layer = (0..n)
            .map(|l| {
                w.resid[l].len()
                    + match self.recompute {
                        Recompute::None => w.blocks[l].len(),
                        _ => w.kept[l].len(),
                    }
            })
            .collect();
        let recompute_scratch =
            if self.recompute == Recompute::None { 0 } else { w.blocks.iter().map(|b| b.len()).sum() };
        let m = ActivationMemory {
            policy: self.recompute,
            tokens: batch * seq,
            elem_bytes: self.be.elem_bytes(),
            per_layer,
            recompute_scratch,
        };
        self.work = Some(w);
        m
    }

    pub(crate) fn ctx<'a>(&'a self, tp: &'a dyn Collective<B>, t: usize) -> Ctx<'a, B> {
        ctx(&self.be, tp, &self.cfg, self.layout, self.dims, t)
    }

    fn alloc_work(&self, batch: usize, seq: usize) -> Work<B> {
        let be = &self.be;
        let (t, dims) = (batch * seq, &self.dims);
        let groups = self.blocks.iter().flat_map(|b| b.groups());
        let max_in = groups.clone().map(|g| g.d_in_loc).max().unwrap_or(0);
        let max_lat = groups.clone().map(|g| g.geom(t).len()).max().unwrap_or(0);
        let kron = if self.cfg.arch == Arch::Lax && self.cfg.lax.gate == LaxGate::Kron {
            let (a, b) = self.cfg.kron_factors();
            3 * max_lat + 64 * (a * a + b * b)
        } else {
            0
        };
        let phi = self.cfg.phi();
        let sharded = self.layout.tp > 1;
        Work {
            batch,
            seq,
            ids: be.alloc_ids(t),
            targets: be.alloc_ids(t),
            rope: be.rope_table(seq, dims.head_dim, self.cfg.rope_theta),
            resid: (0..=self.blocks.len()).map(|_| be.alloc(t * dims.d_res)).collect(),
            blocks: match self.recompute {
                Recompute::None => self.blocks.iter().map(|b| b.alloc_acts(be, dims, batch, seq, phi)).collect(),
                // Two sets used in turn by even and odd layers, each sized by the deepest layer of
                // its parity (layer 0 has no LaX crossing, later ones do).
                _ => {
                    let n = self.blocks.len();
                    (0..n.min(2))
                        .map(|k| self.blocks[k + (n - 1 - k) / 2 * 2].alloc_acts(be, dims, batch, seq, phi))
                        .collect()
                }
            },
            kept: self.blocks.iter().filter_map(|b| b.alloc_kept(be, dims, t, self.recompute)).collect(),
            xf: be.alloc(if dims.d_res < dims.d { t * dims.d } else { 0 }),
            rm: be.alloc(if sharded { t * dims.d } else { 0 }),
            frstd: be.alloc(t),
            hf: be.alloc(t * dims.d),
            logits: be.alloc(t * dims.vocab_loc),
            losses: be.alloc(t),
            lmax: be.alloc(t),
            lstats: be.alloc(2 * t),
            sc: Scratch {
                h: be.alloc(t * max_in),
                dh: be.alloc(t * max_in),
                dlat: be.alloc(t + max_lat),
                dlat2: be.alloc(t + max_lat),
                row: be.alloc(t),
                kron: be.alloc(kron),
            },
            bg: self.blocks[0].alloc_grads(be, dims, batch, seq),
            dx: be.alloc(t * dims.d_res),
            dhf: be.alloc(t * dims.d),
            dot: be.alloc(t),
        }
    }

    fn work(&mut self, b: &Batch) -> Work<B> {
        assert_eq!(b.ids.len(), b.batch * b.seq, "batch: {} ids for {}×{}", b.ids.len(), b.batch, b.seq);
        let mut w = match self.work.take() {
            Some(w) if w.batch == b.batch && w.seq == b.seq => w,
            _ => self.alloc_work(b.batch, b.seq),
        };
        self.be.write_ids(&mut w.ids, b.ids);
        if !b.targets.is_empty() {
            assert_eq!(b.targets.len(), b.ids.len());
            self.be.write_ids(&mut w.targets, b.targets);
        }
        w
    }

    /// Embedding → layers → exit → final norm → logits (this rank's vocabulary columns).
    fn forward_logits(&self, tp: &dyn Collective<B>, w: &mut Work<B>) {
        self.embed_forward(tp, w);
        let cx = self.ctx(tp, w.t());
        let params = &self.store.values;
        for (l, block) in self.blocks.iter().enumerate() {
            let t = w.t();
            let (lo, hi) = w.resid.split_at_mut(l + 1);
            let (cur, prev) = act_slots(&mut w.blocks, l, self.recompute);
            let prev = prev.map(|p| (&self.blocks[l - 1], &*p));
            block.forward(&cx, params, &lo[l], &mut hi[0], cur, prev, &w.rope, w.batch, w.seq, &mut w.sc);
            if self.recompute != Recompute::None {
                block.save_kept(&self.be, t, self.recompute, cur, &mut w.kept[l]);
            }
        }
        self.head_forward(tp, w);
    }

    /// Forward and backward of one micro-batch; gradients accumulate into the store's grads
    /// scaled by `grad_scale` (1 / tokens of the whole optimizer step).
    pub fn forward_backward(&mut self, tp: &dyn Collective<B>, b: &Batch, grad_scale: f64) -> LossSum {
        let mut w = self.work(b);
        self.forward_logits(tp, &mut w);
        let loss = self.loss(tp, &mut w, Some(grad_scale), b.targets);
        self.backward(tp, &mut w);
        self.work = Some(w);
        loss
    }

    /// Loss of one micro-batch, no gradients.
    pub fn evaluate(&mut self, tp: &dyn Collective<B>, b: &Batch) -> LossSum {
        let mut w = self.work(b);
        self.forward_logits(tp, &mut w);
        let loss = self.loss(tp, &mut w, None, b.targets);
        self.work = Some(w);
        loss
    }

    /// Logits of one micro-batch (this rank's vocabulary columns, padding included), row-major.
    pub fn logits(&mut self, tp: &dyn Collective<B>, ids: &[u32], batch: usize, seq: usize) -> Vec<f64> {
        let mut w = self.work(&Batch { ids, targets: &[], batch, seq });
        self.forward_logits(tp, &mut w);
        let out = self.be.read_mat(Mat::new(&w.logits, batch * seq, self.dims.vocab_loc));
        self.work = Some(w);
        out
    }

    /// dL/d(embedding output) of the last backward (t × d_res, this rank's hidden shard
    /// under BTP), for tests.
    pub fn embed_out_grad(&self) -> Vec<f64> {
        let w = self.work.as_ref().expect("run a backward first");
        self.be.read_mat(Mat::new(&w.dx, w.t(), self.dims.d_res))
    }

    fn backward(&mut self, tp: &dyn Collective<B>, w: &mut Work<B>) {
        self.head_backward(tp, w);
        let cx = ctx(&self.be, tp, &self.cfg, self.layout, self.dims, w.t());
        let ParamStore { values: params, grads, .. } = &mut self.store;
        let params: &[B::Buf] = params;
        let lax = self.cfg.arch == Arch::Lax;
        let n = self.blocks.len();
        let policy = self.recompute;
        let be = &self.be;
        let t = w.t();
        for l in (0..n).rev() {
            let (cur, mut prev) = act_slots(&mut w.blocks, l, policy);
            let block = &self.blocks[l];
            // Bring back what the forward dropped (spec §5).
            match policy {
                Recompute::None => {}
                Recompute::Lowrank => {
                    if let (true, Some(p)) = (lax, prev.as_deref_mut()) {
                        // The crossing reads the layer below's z: rebuild it from its kept a.
                        let below = &self.blocks[l - 1];
                        below.restore_kept(be, t, policy, &w.kept[l - 1], p);
                        below.recompute_latents(&cx, params, p, None, &mut w.sc, false);
                    }
                    block.restore_kept(be, t, policy, &w.kept[l], cur);
                    let pv = prev.as_deref().map(|p| (&self.blocks[l - 1], p));
                    block.recompute_lowrank(&cx, params, cur, pv, &w.rope, w.batch, w.seq, &mut w.sc);
                }
                Recompute::Full => {
                    if let (true, Some(p)) = (lax, prev.as_deref_mut()) {
                        self.blocks[l - 1].restore_kept(be, t, policy, &w.kept[l - 1], p);
                    }
                    let pv = prev.as_deref().map(|p| (&self.blocks[l - 1], p));
                    // The layer's output is not needed again: its buffer takes the rerun's.
                    let (lo, hi) = w.resid.split_at_mut(l + 1);
                    block.forward(&cx, params, &lo[l], &mut hi[0], cur, pv, &w.rope, w.batch, w.seq, &mut w.sc);
                }
            }
            let prev = prev.map(|p| (&self.blocks[l - 1], &*p));
            block.backward(
                &cx,
                params,
                grads,
                &w.resid[l],
                cur,
                prev,
                lax && l + 1 < n,
                &mut w.dx,
                &w.rope,
                w.batch,
                w.seq,
                &mut w.bg,
                &mut w.sc,
            );
        }
        self.embed_backward(tp, w);
    }
}

pub(crate) fn ctx<'a, B: Backend>(
    be: &'a B,
    tp: &'a dyn Collective<B>,
    cfg: &ModelConfig,
    layout: Layout,
    dims: Dims,
    t: usize,
) -> Ctx<'a, B> {
    Ctx { be, tp, layout, dims, phi: cfg.phi(), norm_eps: cfg.norm_eps, lax_eps: cfg.lax.ln_eps, t }
}

/// The canonical pieces rank `layout.rank` holds, without keeping any buffers.
pub fn layout_pieces(cfg: &ModelConfig, layout: Layout) -> Result<Vec<crate::params::Piece>> {
    // Zero-filled buffers are mapped lazily by the allocator, so declaring is cheap.
    Ok(Model::declare(boost_tensor::cpu::Cpu::<f32>::new(), cfg, layout)?.store.pieces)
}

/// The activation buffers of layer `l` and of the layer below: one set per layer without
/// recompute, two sets used in turn with it.
fn act_slots<B: Backend>(
    blocks: &mut [BlockActs<B>],
    l: usize,
    policy: Recompute,
) -> (&mut BlockActs<B>, Option<&mut BlockActs<B>>) {
    let (c, p) = match policy {
        Recompute::None => (l, l.checked_sub(1)),
        _ => (l % 2, l.checked_sub(1).map(|q| q % 2)),
    };
    match p {
        None => (&mut blocks[c], None),
        Some(p) if p < c => {
            let (lo, hi) = blocks.split_at_mut(c);
            (&mut hi[0], Some(&mut lo[p]))
        }
        Some(p) => {
            let (lo, hi) = blocks.split_at_mut(p);
            (&mut lo[c], Some(&mut hi[0]))
        }
    }
}
