//! One rank's optimizer step and evaluation: its micro-batches through its pipeline stage,
//! the data-parallel gradient combination, the global gradient norm and AdamW.

use crate::Learner;
use crate::dp::Optimizer;
use crate::groups::Groups;
use crate::optim::clip_coef;
use crate::overlap::{ParamGathers, SyncPlan};
use crate::pipeline::schedule::table;
use crate::pipeline::{Hooks, Links, StageRunner};
use boost_config::{ParallelConfig, TrainConfig};
use boost_data::{Loader, TrainStream};
use boost_model::{Batch, LossSum, Model};
use boost_tensor::{Backend, Label, Mat, MatMut, ReduceOp, trace};

mod queued;
pub use queued::Queued;

/// What one optimizer step did.
#[derive(Debug, Clone, Copy)]
pub struct StepOut {
    pub loss: f64,
    pub lr: f64,
    pub grad_norm: f64,
    pub tokens: u64,
    pub sequences: u64,
    /// The update was not applied (`train.skip_nonfinite`).
    pub skipped: bool,
    /// A rank of the grid received this signal: every rank stops after this step.
    pub stop: Option<i32>,
}

/// A step's gradients, combined over the grid but not yet applied.
pub struct Accumulated {
    /// This rank's share of the loss (summed over the grid by [`StepRunner::apply`]).
    loss: LossSum,
    pub grad_norm: f64,
}

/// One rank's step loop: its micro-batches through its pipeline stage, then the data-parallel
/// gradient combination, the global gradient norm and the optimizer (buffers allocated once).
/// `'g` is the lifetime of the groups its calls run on.
pub struct StepRunner<'g, B: Backend> {
    inputs: Vec<Vec<u32>>,
    targets: Vec<Vec<u32>>,
    stage: StageRunner<B>,
    bucket: Option<B::Buf>,
    /// The gradient buckets reduced during the backward (`parallel.overlap` with dp > 1).
    sync: Option<SyncPlan<B>>,
    scalar: B::Buf,
    report: B::Buf,
    /// The step's shape (micro-batch, sequence, accumulation) and the optimizer's settings.
    train: TrainConfig,
    /// Data-parallel replicas, and this rank's.
    dp: usize,
    dp_rank: usize,
    /// ZeRO-1 with overlap: the last update's parameter all-gathers, still in flight until
    /// the next forward reads each buffer, or [`StepRunner::settle`].
    gathers: ParamGathers<'g, B>,
    /// The guard a queued step's device applies ([`StepRunner::queue`]).
    guard: Option<boost_tensor::GuardSpec>,
}

impl<'g, B: Backend> StepRunner<'g, B> {
    /// With overlapped data-parallel gradients: the bucket size (bytes) and count of this
    /// rank's stage.
    pub fn bucket_sizes(&self) -> Option<(usize, usize)> {
        self.sync.as_ref().map(|s| s.sizes())
    }

    /// The runner of `model`'s rank, replica `dp_rank`: steps of `t`'s shape and optimizer
    /// settings, scheduled and overlapped as `par` says.
    pub fn new(t: &TrainConfig, par: &ParallelConfig, model: &Model<B>, dp_rank: usize) -> Self {
        let n = t.micro_batch * t.seq_len;
        let l = model.layout();
        Self {
            inputs: vec![vec![0; n]; t.accumulation],
            targets: vec![vec![0; n]; t.accumulation],
            stage: StageRunner::new(table(par.schedule, l.stage, l.stages, t.accumulation)),
            bucket: None,
            sync: (par.overlap && par.dp > 1).then(|| {
                // The tied table of a pipeline's end stages is final only once they have
                // summed it (after the schedule): its bucket waits for that.
                let tied = model.tied_table().filter(|_| l.stages > 1).map(|s| s.buf);
                SyncPlan::new(model.store(), par.bucket_mb, tied)
            }),
            scalar: model.be().alloc(1),
            report: model.be().alloc(3),
            train: t.clone(),
            dp: par.dp,
            dp_rank,
            gathers: ParamGathers::new(),
            guard: None,
        }
    }

    /// The time tp chunks left their collectives exposed since the last call (None without
    /// chunks; see [`crate::chunks::Chunks::take_exposed`]).
    pub fn take_chunk_exposed(&mut self) -> Option<std::time::Duration> {
        self.stage.chunks.take_exposed()
    }

    /// Complete the last update's parameter gathers: call before reading the parameters
    /// other than through [`StepRunner::step`] (evaluation, checkpoints, samples, the end).
    pub fn settle(&mut self, l: &mut Learner<B>) {
        l.complete(std::mem::take(&mut self.gathers));
    }

    /// Sum `[loss, tokens]` of the last stage's tp rank 0 over the whole grid; the same
    /// collective counts the ranks that received a stop signal (`signal`: this rank's), so
    /// every rank agrees on whether to stop after this step.
    fn report(
        &mut self,
        model: &Model<B>,
        g: &Groups<B>,
        loss: LossSum,
        signal: Option<i32>,
    ) -> (LossSum, Option<i32>) {
        let signal = signal.unwrap_or(0);
        if g.world.size() == 1 {
            return (loss, (signal != 0).then_some(signal));
        }
        let mine = model.layout().last_stage() && model.layout().tp_rank == 0;
        let v = if mine { [loss.sum, loss.tokens as f64] } else { [0.0, 0.0] };
        model.be().write_mat(MatMut::new(&mut self.report, 1, 2), &v);
        model.be().write_mat(MatMut::at(&mut self.report, 2, 1, 1, 1), &[(signal != 0) as u8 as f64]);
        g.world.all_reduce(&mut self.report, 0, 3, ReduceOp::Sum, Label::op("loss.report"));
        let r: Vec<f64> = model.be().read_mat(Mat::new(&self.report, 1, 3));
        // Ranks asked to stop; which signal only sets the exit code (mpirun forwards the same
        // signal to every process), so a rank that saw none reports SIGTERM's.
        let stop = (r[2] > 0.0).then_some(if signal != 0 { signal } else { libc::SIGTERM });
        (LossSum { sum: r[0], tokens: r[1].round() as usize }, stop)
    }

    /// One optimizer step at rate `lr` from stream position `position` (sequences consumed so
    /// far): this replica trains on sequences `position + (dp_rank·acc + a)·mb`, for a < acc,
    /// so a global batch holds the same sequences whatever the layout.
    pub fn step(
        &mut self,
        l: &mut Learner<B>,
        g: &Groups<'g, B>,
        data: &TrainStream,
        lr: f64,
        position: u64,
    ) -> StepOut {
        let acc = self.accumulate(l, g, data, position);
        self.apply(l, g, lr, acc, false, None)
    }

    /// The first half of [`StepRunner::step`]: every micro-batch's forward and backward, the
    /// data-parallel gradient combination and the global gradient norm.
    pub fn accumulate(
        &mut self,
        l: &mut Learner<B>,
        g: &Groups<'g, B>,
        data: &TrainStream,
        position: u64,
    ) -> Accumulated {
        l.zero_grads();
        let scale = self.fill(data, position);
        let batches = batches(&self.inputs, &self.targets, &self.train);
        let gathers = std::mem::take(&mut self.gathers);
        let loss = match self.sync.as_mut() {
            Some(plan) => {
                // Parameter gathers complete as the first forward reaches them; buckets start
                // during the last backward; the rest once the schedule is done.
                let Learner { model, opt } = l;
                let zero = match opt {
                    Optimizer::Zero1(z) => Some(z.staging()),
                    Optimizer::Replicated(_) => None,
                };
                let sync = std::cell::RefCell::new(plan.begin(g.dp, zero, gathers));
                let mut ready = |be: &B, k: usize, grads: &[B::Buf]| sync.borrow_mut().ready(be, k, grads);
                let mut need = |be: &B, k: usize, values: &mut [B::Buf]| sync.borrow_mut().need(be, k, values);
                let hooks = Hooks { ready: Some(&mut ready), need: Some(&mut need) };
                let loss = run_stage(&mut self.stage, model, g, &batches, scale, hooks);
                let _s = trace::span("dp", || "dp gradients (the rest)");
                let (be, store) = model.be_and_store_mut();
                sync.into_inner().finish(be, store);
                loss
            }
            None => {
                l.complete(gathers);
                let loss = run_stage(&mut self.stage, &mut l.model, g, &batches, scale, Hooks::default());
                let _s = trace::span("dp", || "dp gradients");
                l.sync_grads(g.dp, &mut self.bucket);
                loss
            }
        };
        drop(batches);
        let grad_norm = {
            let _s = trace::span("optimizer", || "gradient norm");
            l.grad_norm(self.dp_rank, g.world, &mut self.scalar)
        };
        Accumulated { loss, grad_norm }
    }

    /// Fill this replica's micro-batches of the step at stream position `position`; returns
    /// the gradient scale, 1 / the global batch's tokens.
    fn fill(&mut self, data: &TrainStream, position: u64) -> f64 {
        let t = &self.train;
        let (mb, seq, acc) = (t.micro_batch, t.seq_len, t.accumulation);
        for a in 0..acc {
            let first = position + ((self.dp_rank * acc + a) * mb) as u64;
            data.fill(first, mb, &mut self.inputs[a], &mut self.targets[a]);
        }
        1.0 / (acc * self.dp * mb * seq) as f64
    }

    /// The second half of [`StepRunner::step`]: clip, update at rate `lr`, and agree on the
    /// step's loss and on stopping (`signal`: one this rank received). `skip` leaves the
    /// weights and moments untouched (every rank decides alike: the gradient norm is the
    /// grid's).
    pub fn apply(
        &mut self,
        l: &mut Learner<B>,
        g: &Groups<'g, B>,
        lr: f64,
        acc: Accumulated,
        skip: bool,
        signal: Option<i32>,
    ) -> StepOut {
        let t = &self.train;
        if !skip {
            let _s = trace::span("optimizer", || "AdamW");
            self.gathers = l.update(t, lr, clip_coef(acc.grad_norm, t.grad_clip), g.dp);
        }
        let sequences = (t.accumulation * self.dp * t.micro_batch) as u64;
        let (loss, stop) = self.report(&l.model, g, acc.loss, signal);
        StepOut {
            loss: loss.sum / loss.tokens.max(1) as f64,
            lr,
            grad_norm: acc.grad_norm,
            tokens: loss.tokens as u64,
            sequences,
            skipped: skip,
            stop,
        }
    }

    /// Mean loss over the first `batches` micro-batches of the validation windows, through
    /// the stage executor, forward only (every data-parallel replica computes the same; the
    /// grid agrees on it).
    pub fn evaluate(&mut self, l: &mut Learner<B>, g: &Groups<B>, val: &Loader, batches: usize) -> f64 {
        self.settle(l);
        let (mb, seq) = (self.train.micro_batch, val.seq_len());
        let n = mb * seq;
        let (mut ids, mut targets) = (vec![0; batches * n], vec![0; batches * n]);
        val.fill_val(0, batches * mb, &mut ids, &mut targets);
        let parts: Vec<Batch> = (0..batches)
            .map(|k| Batch { ids: &ids[k * n..(k + 1) * n], targets: &targets[k * n..(k + 1) * n], batch: mb, seq })
            .collect();
        let tps = g.tp_all();
        let mut total = self.stage.evaluate(&mut l.model, Links { tp: &tps, pp: g.pp }, &parts);
        // Replicas computed the same: only replica 0 reports.
        if self.dp_rank != 0 {
            total = LossSum::default();
        }
        let (total, _) = self.report(&l.model, g, total, None);
        total.sum / total.tokens.max(1) as f64
    }
}

/// The micro-batches of a step of `t`'s shape, from their filled ids and targets.
fn batches<'a>(inputs: &'a [Vec<u32>], targets: &'a [Vec<u32>], t: &TrainConfig) -> Vec<Batch<'a>> {
    let (mb, seq) = (t.micro_batch, t.seq_len);
    (inputs.iter().zip(targets)).map(|(ids, targets)| Batch { ids, targets, batch: mb, seq }).collect()
}

/// A step's micro-batches through this rank's stage, by the stage's op table: as tp chunks
/// when the groups have them (chunk 0 on the rank's tp group, chunk c on `tp_chunks[c − 1]`).
fn run_stage<B: Backend>(
    stage: &mut StageRunner<B>,
    model: &mut Model<B>,
    g: &Groups<B>,
    batches: &[Batch],
    scale: f64,
    hooks: Hooks<B>,
) -> LossSum {
    stage.run(model, Links { tp: &g.tp_all(), pp: g.pp }, batches, scale, hooks)
}
