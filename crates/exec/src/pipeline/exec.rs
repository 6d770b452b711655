//! Running micro-batches through this rank's pipeline stage: one optimizer step's by the
//! schedule's op table, or an evaluation's as a table of forwards.

use super::posted::{Staging, Transfers};
use super::schedule::{Op, max_in_flight};
use super::stage_io;
use crate::chunks::Chunks;
use boost_model::{Batch, GradsReady, LossSum, Model, ParamsNeeded};
use boost_tensor::{Backend, Collective, Label, Mat, MatMut, trace};

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

/// The groups a stage's run uses.
pub struct Links<'l, B: Backend> {
    /// The rank's tp group; with `parallel.tp_chunks`, chunk c's group is `tp[c]` (a
    /// communicator of the same ranks each).
    pub tp: &'l [&'l dyn Collective<B>],
    pub pp: &'l dyn Collective<B>,
}

/// A stage's executor: its op table and the scratch it reuses every step. One loop runs
/// every table; how the boundary moves (`Io`) and how a micro-batch computes (`Passes`)
/// are its strategies.
pub struct StageRunner<B: Backend> {
    pub ops: Vec<Op>,
    /// Micro-batches in flight at most (work slots of the model).
    pub slots: usize,
    /// The other stage's copy of a tied embedding gradient.
    tied: Option<B::Buf>,
    /// Staging of transfers that overlap compute.
    staging: Staging<B>,
    /// The tp chunks' own gradients and exposed time.
    pub chunks: Chunks<B>,
}

impl<B: Backend> StageRunner<B> {
    pub fn new(ops: Vec<Op>) -> Self {
        let slots = max_in_flight(&ops).max(1);
        Self { ops, slots, tied: None, staging: Staging::default(), chunks: Chunks::default() }
    }

    /// Run every op of the table on `batches` (micro-batch k is `batches[k]`); gradients
    /// accumulate scaled by `grad_scale`, and the [`Hooks`] are told what the passes reach.
    /// Transfers overlap compute when the pipeline group overlaps (`parallel.overlap`); a
    /// single stage with several tp groups runs each micro-batch as tp chunks. Returns the
    /// summed loss on the last stage.
    pub fn run(
        &mut self,
        model: &mut Model<B>,
        links: Links<B>,
        batches: &[Batch],
        grad_scale: f64,
        hooks: Hooks<B>,
    ) -> LossSum {
        let passes = match links.tp {
            [tp] => Passes::Whole(*tp, Some(grad_scale)),
            tps => Passes::Chunks(tps, &mut self.chunks, grad_scale),
        };
        let loss = walk(model, links.pp, &mut self.staging, passes, (&self.ops, self.slots), batches, hooks);
        self.sync_tied(model, links.pp);
        loss
    }

    /// The summed loss of `batches` on the last stage, forward only: the same loop over a
    /// table of forwards, each in slot 0 (nothing is kept for a backward). With tp chunks
    /// each micro-batch goes through in chunk-sized pieces, one after the other on the
    /// rank's tp group: the work buffers the chunks train with.
    pub fn evaluate(&mut self, model: &mut Model<B>, links: Links<B>, batches: &[Batch]) -> LossSum {
        let pieces = links.tp.len();
        let parts: Vec<Batch> = batches.iter().flat_map(|b| (0..pieces).map(move |p| b.chunk(p, pieces))).collect();
        let ops: Vec<Op> = (0..parts.len()).map(Op::Forward).collect();
        let passes = Passes::Whole(links.tp[0], None);
        walk(model, links.pp, &mut self.staging, passes, (&ops, 1), &parts, Hooks::default())
    }

    /// With tied embeddings over several stages, the first and last stage both hold the
    /// table: sum their gradients (last → first, added, sum sent back).
    fn sync_tied(&mut self, model: &mut Model<B>, pp: &dyn Collective<B>) {
        let (stage, stages) = (model.layout().stage, model.layout().stages);
        if stages == 1 || !model.cfg().tie_embeddings || (stage != 0 && stage + 1 != stages) {
            return;
        }
        let slot = model.tied_table().expect("both ends hold the tied table");
        let buf = slot.buf;
        let n = model.store().bufs()[buf].len;
        let label = Label::op("embed.tied_grads");
        if stage == 0 {
            let tmp = self.tied.get_or_insert_with(|| model.be().alloc(n));
            pp.recv(tmp, 0, n, stages - 1, label);
            let (be, store) = model.be_and_store_mut();
            be.axpy(MatMut::new(store.grad_mut(buf), 1, n), Mat::new(tmp, 1, n), 1.0);
            pp.send(model.store().grad(buf), 0, n, stages - 1, label);
        } else {
            pp.send(model.store().grad(buf), 0, n, 0, label);
            pp.recv(model.store_mut().grad_mut(buf), 0, n, 0, label);
        }
    }
}

/// The one loop over a table `(ops, slots)`: micro-batch k is `batches[k]`, in work slot
/// k mod `slots`; each op receives, computes by `passes`, then sends.
fn walk<B: Backend>(
    model: &mut Model<B>,
    pp: &dyn Collective<B>,
    staging: &mut Staging<B>,
    mut passes: Passes<B>,
    (ops, slots): (&[Op], usize),
    batches: &[Batch],
    hooks: Hooks<B>,
) -> LossSum {
    let Hooks { mut ready, mut need } = hooks;
    let (stage, stages) = (model.layout().stage, model.layout().stages);
    let mut io = if pp.overlaps() { Io::Posted(Transfers::new(pp, staging, stage, stages)) } else { Io::Blocking(pp) };
    let mut loss = LossSum::default();
    let last_backward = ops.iter().rposition(|op| matches!(op, Op::Backward(_)));
    for (i, &op) in ops.iter().enumerate() {
        let slot = op.micro_batch() % slots;
        io.receive(model, i, op, ops.get(i + 1).copied(), slot, batches);
        let computing = trace::span("op", || match op {
            Op::Forward(k) => format!("F{k} (micro-batch {k} forward)"),
            Op::Backward(k) => format!("B{k} (micro-batch {k} backward)"),
        });
        let l = match op {
            Op::Forward(k) => passes.forward(model, slot, &batches[k], need.take()),
            Op::Backward(k) => {
                let hook = if Some(i) == last_backward { ready.take() } else { None };
                passes.backward(model, slot, &batches[k], hook)
            }
        };
        drop(computing);
        if let Some(l) = l {
            loss.sum += l.sum;
            loss.tokens += l.tokens;
        }
        io.send(model, op, slot);
    }
    io.finish();
    loss
}

/// How a stage's boundary moves: blocking calls, or each op's receives posted while the op
/// before it computes and sends that do not wait ([`super::posted`]; the same bytes, so the
/// same results).
enum Io<'a, B: Backend> {
    Blocking(&'a dyn Collective<B>),
    Posted(Transfers<'a, B>),
}

impl<B: Backend> Io<'_, B> {
    /// Op `i`'s receives into `slot`, before it computes; `next` is the op after it.
    fn receive(&mut self, model: &mut Model<B>, i: usize, op: Op, next: Option<Op>, slot: usize, batches: &[Batch]) {
        let (stage, stages) = (model.layout().stage, model.layout().stages);
        match self {
            Io::Blocking(pp) => match op {
                Op::Forward(k) if stage > 0 => stage_io::recv_activation(model, *pp, slot, stage - 1, &batches[k]),
                Op::Backward(_) if stage + 1 < stages => stage_io::recv_grad(model, *pp, slot, stage + 1),
                _ => {}
            },
            Io::Posted(io) => {
                let mine = io.start(model, slot, i, op, batches);
                if let Some(next) = next {
                    io.post(model.be(), i + 1, next, batches);
                }
                io.deliver(model, slot, op, batches, mine);
            }
        }
    }

    /// Op `op`'s sends from `slot`, after it computes.
    fn send(&mut self, model: &Model<B>, op: Op, slot: usize) {
        let (stage, stages) = (model.layout().stage, model.layout().stages);
        let (wires, to) = match op {
            Op::Forward(_) if stage + 1 < stages => (model.stage_output(slot), stage + 1),
            Op::Backward(_) if stage > 0 => (model.stage_input_grad(slot), stage - 1),
            _ => return,
        };
        match self {
            Io::Blocking(pp) => stage_io::send(*pp, wires, to),
            Io::Posted(io) => io.send(model.be(), wires, to),
        }
    }

    fn finish(self) {
        if let Io::Posted(io) = self {
            io.finish();
        }
    }
}

/// How a micro-batch computes: on the rank's own thread, or as tp chunks on threads of their
/// own ([`Chunks`], a single stage). A chunked micro-batch runs its forward and backward
/// together at its backward op (chunk c's backward overlaps chunk c + 1's forward
/// collectives); its forward op only completes the parameters. Gradients accumulate scaled
/// by the variant's `f64`; a whole micro-batch's forward without one prepares no backward
/// (evaluation).
enum Passes<'a, B: Backend> {
    Whole(&'a dyn Collective<B>, Option<f64>),
    Chunks(&'a [&'a dyn Collective<B>], &'a mut Chunks<B>, f64),
}

impl<B: Backend> Passes<'_, B> {
    fn forward(
        &mut self,
        model: &mut Model<B>,
        slot: usize,
        b: &Batch,
        need: Option<&mut ParamsNeeded<B>>,
    ) -> Option<LossSum> {
        match self {
            Passes::Whole(tp, grad_scale) => model.forward_stage(*tp, slot, b, *grad_scale, need),
            Passes::Chunks(..) => {
                // The chunks read every parameter side by side: complete them all first.
                if let Some(need) = need {
                    let all = model.store().buf_count();
                    let (be, store) = model.be_and_store_mut();
                    need(be, all, store.values_mut());
                }
                None
            }
        }
    }

    fn backward(
        &mut self,
        model: &mut Model<B>,
        slot: usize,
        b: &Batch,
        ready: Option<&mut GradsReady<B>>,
    ) -> Option<LossSum> {
        match self {
            Passes::Whole(tp, _) => {
                model.backward_stage(*tp, slot, ready);
                None
            }
            Passes::Chunks(tps, chunks, grad_scale) => Some(chunks.forward_backward(model, tps, b, *grad_scale, ready)),
        }
    }
}
