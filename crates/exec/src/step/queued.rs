//! A single rank's step that never waits for its device: the micro-batches' losses summed
//! there, the gradient norm, its clip coefficient and the guard's verdict computed there, and
//! AdamW obeying the verdict, all queued; the step's report (loss, norm, verdict) is copied
//! aside at its end and read later ([`StepRunner::resolve`]), once later steps are queued.

use super::{StepOut, StepRunner, run_stage};
use crate::Learner;
use crate::groups::Groups;
use crate::pipeline::Hooks;
use boost_data::TrainStream;
use boost_tensor::{Backend, GuardSpec, Verdict, trace};

/// A step queued on the device ([`StepRunner::queue`]): what the host knows of it, and the
/// ticket of its report.
#[derive(Debug, Clone, Copy)]
pub struct Queued {
    ticket: u64,
    lr: f64,
    tokens: u64,
    sequences: u64,
    stop: Option<i32>,
}

impl Queued {
    /// The signal this step ends the run with, known when it was queued.
    pub fn stop(&self) -> Option<i32> {
        self.stop
    }
    /// The tokens of its loss, and the sequences it consumed.
    pub fn tokens(&self) -> u64 {
        self.tokens
    }
    pub fn sequences(&self) -> u64 {
        self.sequences
    }
}

impl<'g, B: Backend> StepRunner<'g, B> {
    /// Whether this rank's steps can stay on the device ([`StepRunner::queue`]): a run of one
    /// rank on a backend that keeps the step there.
    pub fn keeps_step_on_device(&self, l: &Learner<B>, g: &Groups<'g, B>) -> bool {
        g.world.size() == 1 && self.sync.is_none() && l.keeps_step_on_device()
    }

    /// Judge each queued step's gradient norm with `guard` on the device.
    pub fn set_device_guard(&mut self, guard: GuardSpec) {
        self.guard = Some(guard);
    }

    /// [`StepRunner::step`] queued on the device, the update obeying the verdict of the
    /// guard ([`StepRunner::set_device_guard`]) on the gradient norm there: the host waits for
    /// nothing. `signal`: one this rank received.
    pub fn queue(
        &mut self,
        l: &mut Learner<B>,
        g: &Groups<'g, B>,
        data: &TrainStream,
        lr: f64,
        position: u64,
        signal: Option<i32>,
    ) -> Queued {
        assert!(self.keeps_step_on_device(l, g), "a step on the device needs one rank and a device backend");
        let guard = self.guard.expect("StepRunner::set_device_guard before queueing a step");
        l.zero_grads();
        let scale = self.fill(data, position);
        let t = &self.train;
        let batches = super::batches(&self.inputs, &self.targets, t);
        l.model.be().begin_loss_tally();
        l.model.set_loss_on_device(true);
        let loss = run_stage(&mut self.stage, &mut l.model, g, &batches, scale, Hooks::default());
        l.model.set_loss_on_device(false);
        {
            let _s = trace::span("optimizer", || "norm, guard and AdamW (on the device)");
            l.update_guarded(t, lr, &guard);
        }
        let ticket = l.model.be().snapshot_report().expect("the backend keeps the step's report");
        Queued {
            ticket,
            lr,
            tokens: loss.tokens as u64,
            sequences: (t.accumulation * t.micro_batch) as u64,
            stop: signal,
        }
    }

    /// The figures of queued step `q`, from its report (waits for that step only), and the
    /// guard's verdict. Reports must be resolved in the order their steps were queued.
    pub fn resolve(&mut self, l: &mut Learner<B>, q: Queued) -> (StepOut, Verdict) {
        let r = l.model.be().read_report(q.ticket);
        if !r.verdict.applied() {
            l.unapply();
        }
        let out = StepOut {
            loss: r.loss_sum / q.tokens.max(1) as f64,
            lr: q.lr,
            grad_norm: r.grad_norm,
            tokens: q.tokens,
            sequences: q.sequences,
            skipped: !r.verdict.applied(),
            stop: q.stop,
        };
        (out, r.verdict)
    }
}
