//! Running one optimizer step's micro-batches through this rank's pipeline stage.

use super::posted::{Staging, Transfers};
use super::schedule::{Op, max_in_flight};
use super::stage_io;
use boost_model::{Batch, GradsReady, LossSum, Model, ParamsNeeded};
use boost_tensor::{Backend, Collective, Label, Mat, MatMut};

/// What a step's passes tell the data-parallel side as they go.
pub struct Hooks<'h, B: Backend> {
    /// Which gradients are final, during the table's last backward (the earlier ones still
    /// accumulate into every buffer).
    pub ready: Option<&'h mut GradsReady<'h, B>>,
    /// Which parameters the table's first forward reads next (the later forwards read what
    /// it has read).
    pub need: Option<&'h mut ParamsNeeded<'h, B>>,
}

impl<B: Backend> Default for Hooks<'_, B> {
    fn default() -> Self {
        Self { ready: None, need: None }
    }
}

/// A stage's executor: its op table and the scratch it reuses every step.
pub struct StageRunner<B: Backend> {
    pub ops: Vec<Op>,
    /// Micro-batches in flight at most (work slots of the model).
    pub slots: usize,
    /// The other stage's copy of a tied embedding gradient.
    tied: Option<B::Buf>,
    /// Staging of transfers that overlap compute.
    staging: Staging<B>,
}

impl<B: Backend> StageRunner<B> {
    pub fn new(ops: Vec<Op>) -> Self {
        let slots = max_in_flight(&ops).max(1);
        Self { ops, slots, tied: None, staging: Staging::default() }
    }

    /// Run every op of the table on `batches` (micro-batch k is `batches[k]`); gradients
    /// accumulate scaled by `grad_scale`. Returns the summed loss on the last stage.
    pub fn run(
        &mut self,
        model: &mut Model<B>,
        tp: &dyn Collective<B>,
        pp: &dyn Collective<B>,
        batches: &[Batch],
        grad_scale: f64,
    ) -> LossSum {
        self.run_with(model, tp, pp, batches, grad_scale, Hooks::default())
    }

    /// [`StageRunner::run`], telling the [`Hooks`] what the passes reach.
    pub fn run_with(
        &mut self,
        model: &mut Model<B>,
        tp: &dyn Collective<B>,
        pp: &dyn Collective<B>,
        batches: &[Batch],
        grad_scale: f64,
        hooks: Hooks<B>,
    ) -> LossSum {
        let (stage, stages) = (model.layout.stage, model.layout.stages);
        if pp.overlaps() {
            return self.run_overlapped(model, tp, pp, batches, grad_scale, hooks);
        }
        let Hooks { mut ready, mut need } = hooks;
        let mut loss = LossSum::default();
        let last_backward = self.ops.iter().rposition(|op| matches!(op, Op::Backward(_)));
        for (i, &op) in self.ops.iter().enumerate() {
            match op {
                Op::Forward(k) => {
                    let slot = k % self.slots;
                    if stage > 0 {
                        stage_io::recv_activation(model, pp, slot, stage - 1, &batches[k]);
                    }
                    if let Some(l) = model.forward_stage_with(tp, slot, &batches[k], Some(grad_scale), need.take()) {
                        loss.sum += l.sum;
                        loss.tokens += l.tokens;
                    }
                    if stage + 1 < stages {
                        stage_io::send_activation(model, pp, slot, stage + 1);
                    }
                }
                Op::Backward(k) => {
                    let slot = k % self.slots;
                    if stage + 1 < stages {
                        stage_io::recv_grad(model, pp, slot, stage + 1);
                    }
                    let hook = if Some(i) == last_backward { ready.take() } else { None };
                    model.backward_stage_with(tp, slot, hook);
                    if stage > 0 {
                        stage_io::send_grad(model, pp, slot, stage - 1);
                    }
                }
            }
        }
        self.sync_tied(model, pp);
        loss
    }

    /// A single stage's micro-batches as tensor-parallel chunks (`parallel.tp_chunks`): each
    /// micro-batch's forward and backward in [`Model::forward_backward_chunks`], chunk c on
    /// `tps[c]`. The first micro-batch completes `need`; the last tells `ready` as each part's
    /// gradients become final in every chunk.
    pub fn run_chunked(
        &mut self,
        model: &mut Model<B>,
        tps: &[&dyn Collective<B>],
        batches: &[Batch],
        grad_scale: f64,
        hooks: Hooks<B>,
    ) -> LossSum {
        let Hooks { mut ready, mut need } = hooks;
        let mut loss = LossSum::default();
        for (k, b) in batches.iter().enumerate() {
            let last = if k + 1 == batches.len() { ready.take() } else { None };
            let l = model.forward_backward_chunks(tps, b, grad_scale, need.take(), last);
            loss.sum += l.sum;
            loss.tokens += l.tokens;
        }
        loss
    }

    /// [`StageRunner::run`] with each op's receives posted while the op before it computes
    /// and sends that do not wait ([`super::posted`]); the same bytes, so the same results.
    fn run_overlapped(
        &mut self,
        model: &mut Model<B>,
        tp: &dyn Collective<B>,
        pp: &dyn Collective<B>,
        batches: &[Batch],
        grad_scale: f64,
        hooks: Hooks<B>,
    ) -> LossSum {
        let Hooks { mut ready, mut need } = hooks;
        let (stage, stages) = (model.layout.stage, model.layout.stages);
        let mut loss = LossSum::default();
        let last_backward = self.ops.iter().rposition(|op| matches!(op, Op::Backward(_)));
        let mut io = Transfers::new(pp, &mut self.staging, stage, stages);
        for (i, &op) in self.ops.iter().enumerate() {
            let slot = match op {
                Op::Forward(k) | Op::Backward(k) => k % self.slots,
            };
            let mine = io.start(model, slot, i, op, batches);
            if let Some(&next) = self.ops.get(i + 1) {
                io.post(&model.be, i + 1, next, batches);
            }
            io.deliver(model, slot, op, batches, mine);
            match op {
                Op::Forward(k) => {
                    if let Some(l) = model.forward_stage_with(tp, slot, &batches[k], Some(grad_scale), need.take()) {
                        loss.sum += l.sum;
                        loss.tokens += l.tokens;
                    }
                    if stage + 1 < stages {
                        io.send(&model.be, model.stage_output(slot), stage + 1);
                    }
                }
                Op::Backward(_) => {
                    let hook = if Some(i) == last_backward { ready.take() } else { None };
                    model.backward_stage_with(tp, slot, hook);
                    if stage > 0 {
                        io.send(&model.be, model.stage_input_grad(slot), stage - 1);
                    }
                }
            }
        }
        io.finish();
        self.sync_tied(model, pp);
        loss
    }

    /// With tied embeddings over several stages, the first and last stage both hold the
    /// table: sum their gradients (last → first, added, sum sent back).
    fn sync_tied(&mut self, model: &mut Model<B>, pp: &dyn Collective<B>) {
        let (stage, stages) = (model.layout.stage, model.layout.stages);
        if stages == 1 || !model.cfg.tie_embeddings || (stage != 0 && stage + 1 != stages) {
            return;
        }
        let slot = model.tied_table().expect("both ends hold the tied table");
        let buf = slot.buf;
        let n = model.store.bufs[buf].len;
        let label = Label::op("embed.tied_grads");
        if stage == 0 {
            let tmp = self.tied.get_or_insert_with(|| model.be.alloc(n));
            pp.recv(tmp, 0, n, stages - 1, label);
            model.be.axpy(MatMut::new(&mut model.store.grads[buf], 1, n), Mat::new(tmp, 1, n), 1.0);
            pp.send(&model.store.grads[buf], 0, n, stages - 1, label);
        } else {
            pp.send(&model.store.grads[buf], 0, n, 0, label);
            pp.recv(&mut model.store.grads[buf], 0, n, 0, label);
        }
    }
}
