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
    /// LaX on a later pipeline stage: the previous stage's last-layer latents (z only).
    pub z_in: Option<BlockActs<B>>,
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

    /// Choose what the forward keeps (drops the buffers of the previous choice). `lowrank`
    /// needs low-rank layers (config validation refuses it for full-rank models).
    pub fn set_recompute(&mut self, policy: Recompute) {
        assert!(policy != Recompute::Lowrank || self.cfg.arch.is_low_rank(), "lowrank recompute of a full-rank model");
        if policy != self.recompute {
            self.recompute = policy;
            self.works.clear();
        }
    }

    /// Recompute only the first `n` layers of this stage (0: every layer).
    pub fn set_recompute_layers(&mut self, n: usize) {
        if n != self.recompute_layers {
            self.recompute_layers = n;
            self.works.clear();
        }
    }

    /// How many layers (the first ones of the stage) recompute their activations.
    fn recomputed(&self) -> usize {
        let n = self.blocks.len();
        match (self.recompute, self.recompute_layers) {
            (Recompute::None, _) => 0,
            (_, 0) => n,
            (_, k) => k.min(n),
        }
    }

    /// The policy of layer `l` of this stage.
    pub fn policy_of(&self, l: usize) -> Recompute {
        if l < self.recomputed() { self.recompute } else { Recompute::None }
    }

    fn act_set(&self, l: usize) -> usize {
        act_set(self.recomputed(), l)
    }

    /// The activation memory of a (batch, seq) micro-batch under the current policy, from
    /// the buffers the engine allocates for it.
    pub fn activation_memory(&mut self, batch: usize, seq: usize) -> ActivationMemory {
        let w = match self.works.get_mut(0).and_then(|w| w.take()) {
            Some(w) if w.batch == batch && w.seq == seq => w,
            _ => self.alloc_work(batch, seq),
        };
        use boost_tensor::DeviceBuf;
        let n = self.blocks.len();
        let per_layer = (0..n)
            .map(|l| {
                w.resid[l].len()
                    + match self.policy_of(l) {
                        Recompute::None => w.blocks[self.act_set(l)].len(),
                        _ => w.kept[l].len(),
                    }
            })
            .collect();
        let recompute_scratch = w.blocks[..self.recomputed().min(2)].iter().map(|b| b.len()).sum();
        let m = ActivationMemory {
            policy: self.recompute,
            tokens: batch * seq,
            elem_bytes: self.be.elem_bytes(),
            per_layer,
            recompute_scratch,
        };
        self.put_work(0, w);
        m
    }

    pub(crate) fn ctx<'a>(&'a self, tp: &'a dyn Collective<B>, t: usize) -> Ctx<'a, B> {
        ctx(&self.be, tp, &self.cfg, self.plan, self.dims, t)
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
        let last = self.layout.last_stage();
        let head = |n: usize| be.alloc(if last { n } else { 0 });
        let z_in =
            (!self.layout.first_stage() && self.cfg.arch == Arch::Lax).then(|| self.blocks[0].alloc_boundary(be, t));
        Work {
            batch,
            seq,
            ids: be.alloc_ids(t),
            targets: be.alloc_ids(t),
            rope: be.rope_table(seq, dims.head_dim, self.cfg.rope_theta),
            resid: (0..=self.blocks.len()).map(|_| be.alloc(t * dims.d_res)).collect(),
            blocks: {
                // Recomputed layers: two sets used in turn by even and odd layers, each sized by
                // the deepest layer of its parity (layer 0 has no LaX crossing, later ones do).
                // Then one set per layer that keeps everything.
                let r = self.recomputed();
                let shared = (0..r.min(2)).map(|k| &self.blocks[k + (r - 1 - k) / 2 * 2]);
                shared.chain(&self.blocks[r..]).map(|b| b.alloc_acts(be, dims, batch, seq, phi)).collect()
            },
            kept: (0..self.recomputed())
                .filter_map(|l| self.blocks[l].alloc_kept(be, dims, t, self.recompute))
                .collect(),
            z_in,
            xf: head(if dims.d_res < dims.d { t * dims.d } else { 0 }),
            rm: be.alloc(if sharded { t * dims.d } else { 0 }),
            frstd: head(t),
            hf: be.alloc(if last || self.plan.entry == Entry::VocabReduceScatter { t * dims.d } else { 0 }),
            logits: head(t * dims.vocab_loc),
            losses: head(t),
            lmax: head(t),
            lstats: head(2 * t),
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
            dhf: be.alloc(if last || self.plan.entry == Entry::VocabReduceScatter { t * dims.d } else { 0 }),
            dot: head(t),
        }
    }

    /// The buffers of micro-batch slot `slot` for batch `b` (allocated on first use), with
    /// its ids and targets written.
    fn take_work(&mut self, slot: usize, b: &Batch) -> Work<B> {
        assert_eq!(b.ids.len(), b.batch * b.seq, "batch: {} ids for {}×{}", b.ids.len(), b.batch, b.seq);
        let mut w = match self.works.get_mut(slot).and_then(|w| w.take()) {
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

    fn put_work(&mut self, slot: usize, w: Work<B>) {
        if self.works.len() <= slot {
            self.works.resize_with(slot + 1, || None);
        }
        self.works[slot] = Some(w);
    }

    fn slot_work(&mut self, slot: usize) -> &mut Work<B> {
        self.works
            .get_mut(slot)
            .and_then(|w| w.as_mut())
            .unwrap_or_else(|| panic!("micro-batch slot {slot} has no forward"))
    }

    /// This stage's forward: embedding (first stage) or the received input, the layers,
    /// then (last stage) exit, final norm and logits.
    fn forward_layers(&self, tp: &dyn Collective<B>, w: &mut Work<B>) {
        if self.layout.first_stage() {
            self.embed_forward(tp, w);
        }
        let cx = self.ctx(tp, w.t());
        let params = &self.store.values;
        for (l, block) in self.blocks.iter().enumerate() {
            let t = w.t();
            let (lo, hi) = w.resid.split_at_mut(l + 1);
            let (cur, prev) = act_slots(&mut w.blocks, self.act_set(l), l.checked_sub(1).map(|q| self.act_set(q)));
            let prev = match prev {
                Some(p) => Some((&self.blocks[l - 1], &*p)),
                None => w.z_in.as_ref().map(|z| (&self.blocks[0], z)),
            };
            block.forward(&cx, params, &lo[l], &mut hi[0], cur, prev, &w.rope, w.batch, w.seq, &mut w.sc);
            let policy = self.policy_of(l);
            if policy != Recompute::None {
                block.save_kept(&self.be, t, policy, cur, &mut w.kept[l]);
            }
        }
        if self.layout.last_stage() {
            self.head_forward(tp, w);
        }
    }

    /// Forward of micro-batch slot `slot` on this stage. On the last stage the loss is
    /// returned, and with `grad_scale` the logits' gradient is prepared for the backward.
    /// A later stage's input must have been received first ([`Model::recv_activation`]).
    pub fn forward_stage(
        &mut self,
        tp: &dyn Collective<B>,
        slot: usize,
        b: &Batch,
        grad_scale: Option<f64>,
    ) -> Option<LossSum> {
        let mut w = if self.layout.first_stage() {
            self.take_work(slot, b)
        } else {
            let mut w = self.works.get_mut(slot).and_then(|w| w.take()).expect("the stage input was received");
            if !b.targets.is_empty() {
                self.be.write_ids(&mut w.targets, b.targets);
            }
            w
        };
        self.forward_layers(tp, &mut w);
        let loss = self.layout.last_stage().then(|| self.loss(tp, &mut w, grad_scale, b.targets));
        self.put_work(slot, w);
        loss
    }

    /// Backward of micro-batch slot `slot` on this stage: from the logits' gradient on the
    /// last stage, from the received output gradient otherwise ([`Model::recv_grad`]).
    pub fn backward_stage(&mut self, tp: &dyn Collective<B>, slot: usize) {
        let mut w = self.works.get_mut(slot).and_then(|w| w.take()).expect("backward of a slot without forward");
        self.backward(tp, &mut w);
        self.put_work(slot, w);
    }

    /// Forward and backward of one micro-batch on a single-stage model; gradients accumulate
    /// into the store's grads scaled by `grad_scale` (1 / tokens of the whole optimizer step).
    pub fn forward_backward(&mut self, tp: &dyn Collective<B>, b: &Batch, grad_scale: f64) -> LossSum {
        assert_eq!(
            self.layout.stages, 1,
            "forward_backward runs a whole model; stages use forward_stage/backward_stage"
        );
        let loss = self.forward_stage(tp, 0, b, Some(grad_scale)).expect("one stage computes the loss");
        self.backward_stage(tp, 0);
        loss
    }

    /// Loss of one micro-batch, no gradients (single-stage model).
    pub fn evaluate(&mut self, tp: &dyn Collective<B>, b: &Batch) -> LossSum {
        assert_eq!(self.layout.stages, 1, "evaluate runs a whole model");
        self.forward_stage(tp, 0, b, None).expect("one stage computes the loss")
    }

    /// Logits of one micro-batch (this rank's vocabulary columns, padding included), row-major.
    pub fn logits(&mut self, tp: &dyn Collective<B>, ids: &[u32], batch: usize, seq: usize) -> Vec<f64> {
        assert_eq!(self.layout.stages, 1, "logits of a whole model");
        let mut w = self.take_work(0, &Batch { ids, targets: &[], batch, seq });
        self.forward_layers(tp, &mut w);
        let out = self.be.read_mat(Mat::new(&w.logits, batch * seq, self.dims.vocab_loc));
        self.put_work(0, w);
        out
    }

    /// Receive this stage's input for slot `slot` from stage `from` (the residual, and under
    /// LaX the previous layer's latents).
    pub fn recv_activation(&mut self, pp: &dyn Collective<B>, slot: usize, from: usize, b: &Batch) {
        let mut w = self.take_work(slot, b);
        let n = w.t() * self.dims.d_res;
        pp.recv(&mut w.resid[0], 0, n, from, Label::op("pp.act"));
        if let Some(z) = w.z_in.as_mut() {
            for g in z.groups_mut() {
                let (buf, n) = g.boundary_z();
                pp.recv(buf, 0, n, from, Label::op("pp.lax"));
            }
        }
        self.put_work(slot, w);
    }

    /// Send this stage's output for slot `slot` to stage `to`.
    pub fn send_activation(&self, pp: &dyn Collective<B>, slot: usize, to: usize) {
        let n_layers = self.blocks.len();
        let lax = self.cfg.arch == Arch::Lax;
        let last_set = self.act_set(n_layers - 1);
        let w = self
            .works
            .get(slot)
            .and_then(|w| w.as_ref())
            .unwrap_or_else(|| panic!("micro-batch slot {slot} has no forward"));
        let t = w.t();
        pp.send(&w.resid[n_layers], 0, w.resid[n_layers].len(), to, Label::op("pp.act"));
        if lax {
            let acts = &w.blocks[last_set];
            let last = &self.blocks[n_layers - 1];
            for (k, g) in last.groups().iter().enumerate() {
                let (buf, base) = g.z_buf(acts.group(k), t);
                pp.send(buf, base, g.geom(t).len(), to, Label::op("pp.lax"));
            }
        }
    }

    /// Receive the gradient of this stage's output for slot `slot` from stage `from`.
    pub fn recv_grad(&mut self, pp: &dyn Collective<B>, slot: usize, from: usize) {
        let last_layer = self.blocks.last().expect("a stage has layers").layer;
        let lax = self.cfg.arch == Arch::Lax;
        let groups: Vec<usize> = self.blocks[0].groups().iter().map(|g| g.geom(1).len()).collect();
        let w = self.slot_work(slot);
        let t = w.t();
        let n = w.dx.len();
        pp.recv(&mut w.dx, 0, n, from, Label::op("pp.grad"));
        if lax {
            // The next stage's first layer crossed into this stage's last: its carry.
            for (k, per_token) in groups.iter().enumerate() {
                let buf = &mut w.bg.carries[k][(last_layer + 1) % 2];
                pp.recv(buf, 0, per_token * t, from, Label::op("pp.lax.grad"));
            }
        }
    }

    /// Send the gradient of this stage's input for slot `slot` to stage `to`.
    pub fn send_grad(&mut self, pp: &dyn Collective<B>, slot: usize, to: usize) {
        let first_layer = self.blocks[0].layer;
        let lax = self.cfg.arch == Arch::Lax;
        let groups: Vec<usize> = self.blocks[0].groups().iter().map(|g| g.geom(1).len()).collect();
        let w = self.slot_work(slot);
        let t = w.t();
        pp.send(&w.dx, 0, w.dx.len(), to, Label::op("pp.grad"));
        if lax {
            for (k, per_token) in groups.iter().enumerate() {
                pp.send(&w.bg.carries[k][first_layer % 2], 0, per_token * t, to, Label::op("pp.lax.grad"));
            }
        }
    }

    /// dL/d(embedding output) of the last backward (t × d_res, this rank's hidden shard
    /// under BTP), for tests.
    pub fn embed_out_grad(&self) -> Vec<f64> {
        let w = self.works.first().and_then(|w| w.as_ref()).expect("run a backward first");
        self.be.read_mat(Mat::new(&w.dx, w.t(), self.dims.d_res))
    }

    fn backward(&mut self, tp: &dyn Collective<B>, w: &mut Work<B>) {
        if self.layout.last_stage() {
            self.head_backward(tp, w);
        }
        let cx = ctx(&self.be, tp, &self.cfg, self.plan, self.dims, w.t());
        let r = self.recomputed();
        let ParamStore { values: params, grads, .. } = &mut self.store;
        let params: &[B::Buf] = params;
        let lax = self.cfg.arch == Arch::Lax;
        let n = self.blocks.len();
        let total_layers = self.cfg.layers;
        let be = &self.be;
        let t = w.t();
        for l in (0..n).rev() {
            let policy = if l < r { self.recompute } else { Recompute::None };
            let (cur, mut prev) = act_slots(&mut w.blocks, act_set(r, l), l.checked_sub(1).map(|q| act_set(r, q)));
            let block = &self.blocks[l];
            // The first layer of a later stage crosses into the received latents.
            let boundary = if l == 0 { w.z_in.as_ref().map(|z| (&self.blocks[0], z)) } else { None };
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
                    let pv = prev.as_deref().map(|p| (&self.blocks[l - 1], p)).or(boundary);
                    block.recompute_lowrank(&cx, params, cur, pv, &w.rope, w.batch, w.seq, &mut w.sc);
                }
                Recompute::Full => {
                    if let (true, Some(p)) = (lax, prev.as_deref_mut()) {
                        self.blocks[l - 1].restore_kept(be, t, policy, &w.kept[l - 1], p);
                    }
                    let pv = prev.as_deref().map(|p| (&self.blocks[l - 1], p)).or(boundary);
                    // The layer's output is not needed again: its buffer takes the rerun's.
                    let (lo, hi) = w.resid.split_at_mut(l + 1);
                    block.forward(&cx, params, &lo[l], &mut hi[0], cur, pv, &w.rope, w.batch, w.seq, &mut w.sc);
                }
            }
            let prev = prev.map(|p| (&self.blocks[l - 1], &*p)).or(boundary);
            block.backward(
                &cx,
                params,
                grads,
                &w.resid[l],
                cur,
                prev,
                lax && block.layer + 1 < total_layers,
                &mut w.dx,
                &w.rope,
                w.batch,
                w.seq,
                &mut w.bg,
                &mut w.sc,
            );
        }
        if self.layout.first_stage() {
            self.embed_backward(tp, w);
        }
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

/// Which activation set layer `l` uses when the first `r` layers recompute: those share two
/// sets in turn (even and odd layers), the others have their own, after them.
fn act_set(r: usize, l: usize) -> usize {
    if l < r { l % 2 } else { r.min(2) + (l - r) }
}

/// The activation sets `c` of a layer and `p` of the layer below (distinct).
fn act_slots<B: Backend>(
    blocks: &mut [BlockActs<B>],
    c: usize,
    p: Option<usize>,
) -> (&mut BlockActs<B>, Option<&mut BlockActs<B>>) {
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
