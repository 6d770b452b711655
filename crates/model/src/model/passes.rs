//! The one forward and the one backward of a stage over its layers, with recompute in the
//! backward (docs/PARALLELISM.md §5), and the per-slot calls an executor makes of them.

use super::recompute::{act_set, act_slots};
use crate::block::{BlockSaved, Join};
use crate::model::work::Work;
use crate::model::{Batch, GradsFinal, GradsReady, LossSum, Model, ParamsNeeded, PassInputs, ctx};
use crate::pass::CachedAttention;
use crate::pass::Ctx;
use crate::plan::Exit;
use boost_config::{Arch, Recompute};
use boost_tensor::{Backend, Collective, Mat, trace};

/// Where a forward reads the parameters.
pub enum Params<'p, B: Backend> {
    /// Every buffer in place.
    Ready(&'p [B::Buf]),
    /// Still being filled (ZeRO-1's gathers in flight): `need` completes buffers `..k`
    /// before the forward reads them.
    Filling(&'p mut [B::Buf], &'p mut ParamsNeeded<'p, B>),
}

impl<B: Backend> Params<'_, B> {
    /// Buffers `..k`, complete.
    fn upto(&mut self, be: &B, k: usize) -> &[B::Buf] {
        match self {
            Params::Ready(v) => v,
            Params::Filling(v, need) => {
                need(be, k, v);
                v
            }
        }
    }
}

impl<B: Backend> Model<B> {
    /// This stage's forward: embedding (first stage) or the received input, the layers,
    /// then (last stage) exit, final norm and logits; `attend` replaces every layer's
    /// attention step when decoding. The model is only read, so tp chunks run it side by side.
    pub fn forward(
        &self,
        mut params: Params<B>,
        tp: &dyn Collective<B>,
        w: &mut Work<B>,
        attend: Option<&dyn CachedAttention<B>>,
    ) {
        let (be, all) = (&self.be, self.store.buf_count());
        if let Some(first) = self.first {
            let p = params.upto(be, self.layer_bufs.first().map_or(all, |r| r.start));
            let _s = trace::span("forward", || "embed forward");
            self.embed_forward(first, p, tp, w);
        }
        for l in 0..self.blocks.len() {
            let p = params.upto(be, self.layer_bufs[l].end);
            let _s = trace::span("forward", || format!("forward L{}", self.blocks[l].layer));
            self.forward_layer(l, p, tp, w, attend);
        }
        let p = params.upto(be, all);
        if let Some(last) = self.last {
            let _s = trace::span("forward", || "head forward");
            self.head_forward(last, p, tp, w);
        }
    }

    /// Layer `l` of this stage, forward.
    fn forward_layer(
        &self,
        l: usize,
        params: &[B::Buf],
        tp: &dyn Collective<B>,
        w: &mut Work<B>,
        attend: Option<&dyn CachedAttention<B>>,
    ) {
        let inputs = PassInputs { params, rope: &w.rope, batch: w.batch, seq: w.seq };
        let cx = Ctx { attend, ..ctx(&self.be, tp, &self.cfg, self.plan, self.dims, inputs) };
        let block = &self.blocks[l];
        let t = w.t();
        let (lo, hi) = w.resid.split_at_mut(l + 1);
        let (cur, prev) = act_slots(&mut w.blocks, self.act_set(l), l.checked_sub(1).map(|q| self.act_set(q)));
        let prev = prev.map(|p| &*p);
        let join =
            Join { add_in: prev.filter(|_| l > 0 && self.defers(l - 1)).map(|p| &p.mid), defer_out: self.defers(l) };
        let prev = match prev {
            Some(p) => Some((&self.blocks[l - 1], p)),
            None => w.z_in.as_ref().map(|z| (&self.blocks[0], z)),
        };
        block.forward(&cx, &mut lo[l], &mut hi[0], cur, prev, &mut w.bg.dm, &mut w.sc, join);
        let policy = self.policy_of(l);
        if policy != Recompute::None {
            block.save_kept(&self.be, t, policy, cur, &mut w.kept[l]);
        }
    }

    /// Whether layer `l` leaves its last residual add to the norm after it, which runs it in
    /// one kernel with the norm or its statistic ([`ProjGroup::residual_norm`]): the next
    /// layer's first norm, or the final norm over whole rows, on this stage.
    pub(crate) fn defers(&self, l: usize) -> bool {
        match self.blocks.get(l + 1) {
            Some(next) => next.qkv.norm.is_some(),
            None => self.last.is_some() && self.plan.exit != Exit::Gather && self.dims.d_res == self.dims.d,
        }
    }

    /// The activation set of the last layer, whose `mid` the final norm adds, when that
    /// layer left its residual add to it.
    pub(crate) fn deferred_set(&self) -> Option<usize> {
        let l = self.blocks.len().checked_sub(1)?;
        self.defers(l).then(|| self.act_set(l))
    }

    /// Forward of micro-batch slot `slot` on this stage, telling `need` which parameter
    /// buffers are read next (see [`ParamsNeeded`]). On the last stage the loss is returned,
    /// and with `grad_scale` the logits' gradient is prepared for the backward. A later
    /// stage's input must have been received first (into [`Model::stage_input`]).
    pub fn forward_stage(
        &mut self,
        tp: &dyn Collective<B>,
        slot: usize,
        b: &Batch,
        grad_scale: Option<f64>,
        need: Option<&mut ParamsNeeded<B>>,
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
        match need {
            None => self.forward(Params::Ready(self.store.values()), tp, &mut w, None),
            Some(need) => {
                // The forward reads what `need` fills: the values leave the store meanwhile.
                let mut values = self.store.take_values();
                self.forward(Params::Filling(&mut values, need), tp, &mut w, None);
                self.store.put_values(values);
            }
        }
        let loss = self.layout.last_stage().then(|| self.loss(tp, &mut w, grad_scale, b.targets));
        self.put_work(slot, w);
        loss
    }

    /// Backward of micro-batch slot `slot` on this stage, from the logits' gradient on the
    /// last stage, from the received output gradient otherwise (into
    /// [`Model::stage_output_grad`]); `ready` is told which gradient buffers are final as the
    /// backward goes (see [`GradsReady`]).
    pub fn backward_stage(&mut self, tp: &dyn Collective<B>, slot: usize, ready: Option<&mut GradsReady<B>>) {
        let mut w = self.works.get_mut(slot).and_then(|w| w.take()).expect("backward of a slot without forward");
        let mut grads = self.store.take_grads();
        let mut ready = ready.map(|f| move |be: &B, k: usize, g: &mut [B::Buf]| f(be, k, g));
        self.backward(&mut grads, tp, &mut w, ready.as_mut().map(|f| f as &mut GradsFinal<B>));
        self.store.put_grads(grads);
        self.put_work(slot, w);
    }

    /// Forward and backward of one micro-batch on a single-stage model; gradients accumulate
    /// into the store's grads scaled by `grad_scale` (1 / tokens of the whole optimizer step).
    pub fn forward_backward(&mut self, tp: &dyn Collective<B>, b: &Batch, grad_scale: f64) -> LossSum {
        assert_eq!(
            self.layout.stages, 1,
            "forward_backward runs a whole model; stages use forward_stage/backward_stage"
        );
        let loss = self.forward_stage(tp, 0, b, Some(grad_scale), None).expect("one stage computes the loss");
        self.backward_stage(tp, 0, None);
        loss
    }

    /// Loss of one micro-batch, no gradients (single-stage model).
    pub fn evaluate(&mut self, tp: &dyn Collective<B>, b: &Batch) -> LossSum {
        assert_eq!(self.layout.stages, 1, "evaluate runs a whole model");
        self.forward_stage(tp, 0, b, None, None).expect("one stage computes the loss")
    }

    /// Logits of one micro-batch (this rank's vocabulary columns, padding included), row-major.
    pub fn logits(&mut self, tp: &dyn Collective<B>, ids: &[u32], batch: usize, seq: usize) -> Vec<f64> {
        assert_eq!(self.layout.stages, 1, "logits of a whole model");
        let mut w = self.take_work(0, &Batch { ids, targets: &[], batch, seq });
        self.forward(Params::Ready(self.store.values()), tp, &mut w, None);
        let (t, vl) = (batch * seq, self.dims.vocab_loc);
        let out = if w.head_chunk.is_some() {
            // The loss goes by chunks, so the forward kept no logits: computed here.
            let mut logits = self.be.alloc_act(t * vl);
            let stage = self.last.expect("a whole model has the head");
            self.head_logits(stage, self.store.values(), &w.hf, t, &mut logits);
            self.be.read_mat(Mat::new(&logits, t, vl))
        } else {
            self.be.read_mat(Mat::new(&w.logits, t, vl))
        };
        self.put_work(0, w);
        out
    }

    /// dL/d(embedding output) of the last backward (t × d_res, this rank's hidden shard
    /// under BTP), for tests.
    pub fn embed_out_grad(&self) -> Vec<f64> {
        let w = self.works.first().and_then(|w| w.as_ref()).expect("run a backward first");
        self.be.read_mat(Mat::new(&w.dx, w.t(), self.dims.d_res))
    }

    /// This stage's backward, the gradients accumulated into `grads` (the store's, taken
    /// out, or a tp chunk's own); `ready` is told as buffers become final ([`GradsFinal`]).
    /// The model is only read, so tp chunks run it side by side.
    pub fn backward(
        &self,
        grads: &mut [B::Buf],
        tp: &dyn Collective<B>,
        w: &mut Work<B>,
        mut ready: Option<&mut GradsFinal<B>>,
    ) {
        if let Some(last) = self.last {
            let _s = trace::span("backward", || "head backward");
            self.head_backward(grads, last, tp, w);
            // The final norm and an untied head follow the layers; a head tied to the table
            // (buffer 0 here) stays unfinished until the embedding's backward.
            let after_layers =
                self.layer_bufs.last().map_or(usize::from(self.first.is_some() || self.cfg.tie_embeddings), |r| r.end);
            if let Some(f) = ready.as_deref_mut() {
                f(&self.be, after_layers, grads);
            }
        }
        let r = self.recomputed();
        let inputs = PassInputs { params: self.store.values(), rope: &w.rope, batch: w.batch, seq: w.seq };
        let cx = ctx(&self.be, tp, &self.cfg, self.plan, self.dims, inputs);
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
            // Bring back what the forward dropped (docs/PARALLELISM.md §5).
            let recomputing = (policy != Recompute::None)
                .then(|| trace::span("recompute", || format!("recompute L{}", block.layer)))
                .flatten();
            match policy {
                Recompute::None => {}
                Recompute::Lowrank => {
                    if let (true, Some(p)) = (lax, prev.as_deref_mut()) {
                        // The crossing reads the layer below's z: rebuild it from its kept a.
                        let below = &self.blocks[l - 1];
                        below.restore_kept(be, t, policy, &w.kept[l - 1], p);
                        below.recompute_latents(&cx, p, None, &mut w.sc, false);
                    }
                    block.restore_kept(be, t, policy, &w.kept[l], cur);
                    let pv = prev.as_deref().map(|p| (&self.blocks[l - 1], p)).or(boundary);
                    block.recompute_lowrank(&cx, cur, pv, &mut w.sc);
                }
                Recompute::Full => {
                    if let (true, Some(p)) = (lax, prev.as_deref_mut()) {
                        self.blocks[l - 1].restore_kept(be, t, policy, &w.kept[l - 1], p);
                    }
                    let pv = prev.as_deref().map(|p| (&self.blocks[l - 1], p)).or(boundary);
                    // The layer's output is not needed again: its buffer takes the rerun's.
                    // Its input is whole already, and its output is written whole.
                    let (lo, hi) = w.resid.split_at_mut(l + 1);
                    block.forward(&cx, &mut lo[l], &mut hi[0], cur, pv, &mut w.bg.dm, &mut w.sc, Join::none());
                }
            }
            drop(recomputing);
            let _s = trace::span("backward", || format!("backward L{}", block.layer));
            let prev = prev.map(|p| (&self.blocks[l - 1], &*p)).or(boundary);
            let above_lax = lax && block.layer + 1 < total_layers;
            let saved = BlockSaved { x_in: &w.resid[l], acts: cur, prev, above_lax };
            block.backward(&cx, grads, saved, &mut w.dx, &mut w.bg, &mut w.sc);
            // A block writes its own gradients only.
            if let Some(f) = ready.as_deref_mut() {
                f(be, self.layer_bufs[l].start, grads);
            }
        }
        if let Some(first) = self.first {
            let _s = trace::span("backward", || "embed backward");
            self.embed_backward(grads, first, tp, w);
        }
        if let Some(f) = ready {
            f(&self.be, 0, grads);
        }
    }
}
