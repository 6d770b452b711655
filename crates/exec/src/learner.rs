//! A rank's model with the optimizer state that updates it: the gradient, norm and update
//! operations a step needs, named for what they do to the parameters.

use crate::dp::Optimizer;
use crate::overlap::ParamGathers;
use boost_config::{ParallelConfig, TrainConfig};
use boost_model::Model;
use boost_tensor::{Backend, Collective, GuardSpec};

/// A rank's model and optimizer.
pub struct Learner<B: Backend> {
    pub model: Model<B>,
    pub opt: Optimizer<B>,
}

impl<B: Backend> Learner<B> {
    /// `model` with a fresh optimizer: ZeRO-1 shards under `parallel.zero = 1`, replicated
    /// AdamW otherwise; `dp_rank` is this rank's replica.
    pub fn new(model: Model<B>, par: &ParallelConfig, dp_rank: usize) -> Self {
        let mut opt = Optimizer::new(model.be(), model.store(), par.zero == 1, par.dp, dp_rank);
        opt.set_overlap(par.overlap);
        Self { model, opt }
    }

    /// Start a step's gradients from zero.
    pub fn zero_grads(&mut self) {
        self.model.zero_grads();
    }

    /// Combine the replicas' gradients over `dp` ([`Optimizer::sync_grads`]).
    pub fn sync_grads(&mut self, dp: &dyn Collective<B>, bucket: &mut Option<B::Buf>) {
        let (be, store) = self.model.be_and_store_mut();
        self.opt.sync_grads(be, store, dp, bucket);
    }

    /// The whole model's gradient norm after [`Learner::sync_grads`] ([`Optimizer::grad_norm`]).
    pub fn grad_norm(&self, dp_rank: usize, world: &dyn Collective<B>, scalar: &mut B::Buf) -> f64 {
        let m = &self.model;
        self.opt.grad_norm(m.be(), m.store(), m.layout().tp_rank, dp_rank, world, scalar)
    }

    /// One AdamW update at rate `lr`, the gradients scaled by `grad_scale` first; what is
    /// returned must complete before the parameters are read ([`Optimizer::update`]).
    pub fn update<'d>(
        &mut self,
        t: &TrainConfig,
        lr: f64,
        grad_scale: f64,
        dp: &'d dyn Collective<B>,
    ) -> ParamGathers<'d, B> {
        let (be, store) = self.model.be_and_store_mut();
        self.opt.update(be, store, t, lr, grad_scale, dp)
    }

    /// Whether a step can stay on the device: the backend keeps the gradient norm and the
    /// step's report there, and the optimizer is the replicated one.
    pub fn keeps_step_on_device(&self) -> bool {
        self.model.be().keeps_grad_sumsq() && matches!(self.opt, Optimizer::Replicated(_))
    }

    /// A single rank's update at rate `lr`, queued on the device without waiting: the
    /// gradient norm, its clip coefficient, `guard`'s verdict on it, and AdamW obeying the
    /// verdict. Counted as applied until [`Learner::unapply`].
    pub fn update_guarded(&mut self, t: &TrainConfig, lr: f64, guard: &GuardSpec) {
        let (be, store) = self.model.be_and_store_mut();
        assert!(self.opt.queue_guarded_norm(be, store, t.grad_clip, guard), "{}: no norm on the device", be.name());
        let Optimizer::Replicated(a) = &mut self.opt else { panic!("a guarded update needs the replicated optimizer") };
        a.update_guarded(be, store, t, lr);
    }

    /// A step's report showed its guarded update was not applied.
    pub fn unapply(&mut self) {
        if let Optimizer::Replicated(a) = &mut self.opt {
            a.unapply();
        }
    }

    /// Complete an update's parameter gathers now.
    pub fn complete(&mut self, gathers: ParamGathers<'_, B>) {
        let (be, store) = self.model.be_and_store_mut();
        self.opt.complete(be, store, gathers);
    }
}
